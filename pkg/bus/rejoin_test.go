package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
)

// rejoinSubject is the work subject of the leader-move scenario's jobs.
const rejoinSubject = "proctor.work.rejoin"

// claims records what the pullers of the leader-move scenario took: the
// handlings of each job (by its Nats-Msg-Id) and, for each job's first
// handling, when it was stored on the work queue and taken, and its
// delivery count.
type claims struct {
	mu       sync.Mutex
	handled  map[string]int
	waits    map[string]time.Duration
	attempts map[string]int
	stored   map[string]time.Time
	taken    map[string]time.Time
	elected  []time.Time   // the consumer's leader-elected advisories, as received
	all      chan struct{} // closed once want jobs were handled
	want     int
}

func (c *claims) take(m jetstream.Msg) {
	md, err := m.Metadata()
	taken := time.Now()
	id := m.Headers().Get(nats.MsgIdHdr)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handled[id]++
	if c.handled[id] == 1 {
		if err == nil {
			c.waits[id] = taken.Sub(md.Timestamp)
			c.stored[id] = md.Timestamp
		}
		c.taken[id] = taken
		c.attempts[id] = bus.Attempt(m)
		if len(c.handled) == c.want {
			close(c.all)
		}
	}
}

// sinceLeader is how long job id waited while its consumer had a leader:
// from the later of its storing and the last leader-elected advisory
// before it was taken, to taken.
func (c *claims) sinceLeader(id string) time.Duration {
	from := c.stored[id]
	for _, e := range c.elected {
		if e.After(from) && !e.After(c.taken[id]) {
			from = e
		}
	}
	return c.taken[id].Sub(from)
}

// consumerLeader is the server name of the consumer's leader, "" while
// there is none or it cannot be asked.
func consumerLeader(ctx context.Context, cons jetstream.Consumer) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// waitLeader polls the consumer's info until a leader other than not is
// named, and returns it.
func waitLeader(tb testing.TB, ctx context.Context, cons jetstream.Consumer, not string) string {
	tb.Helper()
	for {
		if l := consumerLeader(ctx, cons); l != "" && l != not {
			return l
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("consumer %s has no leader other than %q", cons.CachedInfo().Name, not)
		case <-time.After(50 * time.Millisecond): // polling the consumer's info
		}
	}
}

// leaderMove is the scenario: on a 3-server cluster, three pullers, each
// connected first to a server of its own, serve one R3 work consumer
// (Bus.Serve, 2 jobs at a time); a publisher stores a job every 25 ms
// from 1 s before the consumer's leader moves until 4 s after it has
// moved (move "stepdown": $JS.API.CONSUMER.LEADER.STEPDOWN; "kill": its
// server SIGKILLed, restarted 2 s later, the jobs going on 4 s after it
// listens again; "none": no move, the floor). It returns once every job
// was handled and the consumer holds none unacknowledged, with the
// handlings.
func leaderMove(tb testing.TB, cl *testutil.NATSCluster, move string) *claims {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	urls := strings.Split(cl.URL(), ",")
	connect := func(i int) *bus.Bus {
		order := append(slices.Clone(urls[i%3:]), urls[:i%3]...)
		b, err := bus.ConnectReplicas(ctx, strings.Join(order, ","), nil, 3, nats.DontRandomize())
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	pub := connect(0)
	defer pub.Close()
	durable := fmt.Sprintf("rejoin-%s-%d", move, time.Now().UnixNano())
	cons, err := pub.WorkConsumer(ctx, durable, rejoinSubject+"."+durable, 20*time.Second, 1000)
	if err != nil {
		tb.Fatal(err)
	}
	c := &claims{handled: map[string]int{}, waits: map[string]time.Duration{}, attempts: map[string]int{}, stored: map[string]time.Time{}, taken: map[string]time.Time{}, all: make(chan struct{})}

	obs, err := nats.Connect(cl.URL())
	if err != nil {
		tb.Fatal(err)
	}
	defer obs.Close()
	if _, err := obs.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED."+bus.WorkStream+"."+durable, func(*nats.Msg) {
		c.mu.Lock()
		c.elected = append(c.elected, time.Now())
		c.mu.Unlock()
	}); err != nil {
		tb.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 3 {
		b := connect(i)
		defer b.Close()
		pc, err := b.JS.Consumer(ctx, bus.WorkStream, durable)
		if err != nil {
			tb.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.Serve(sctx, pc, 2, 0, func(ctx context.Context, m jetstream.Msg) {
				c.take(m)
				// The ack confirmed, as a service's terminal ack: one lost
				// while the leader moves would bring the job back.
				err := bus.Retry(ctx, nil, "ack", func(ctx context.Context) error {
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					return m.DoubleAck(actx)
				})
				if err != nil && ctx.Err() == nil {
					tb.Errorf("puller %d: ack %s: %v", i, m.Headers().Get(nats.MsgIdHdr), err)
				}
			})
			if err != nil {
				tb.Errorf("puller %d: %v", i, err)
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	// The publisher: a job every 25 ms until told to stop, each published
	// on its own (a publish waiting out a stream leader's election holds
	// up no other).
	var published atomic.Int64
	var pubs sync.WaitGroup
	endPub := make(chan struct{})
	pubs.Go(func() {
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-endPub:
				return
			case <-t.C:
			}
			n := published.Add(1)
			id := fmt.Sprintf("%s-%d", durable, n)
			pubs.Go(func() {
				if err := pub.PublishWork(ctx, rejoinSubject+"."+durable, id, map[string]int64{"n": n}); err != nil {
					tb.Errorf("publish %s: %v", id, err)
				}
			})
		}
	})
	// The scenario's phases are timed by the wall clock on purpose: the
	// jobs must be stored before, during and after the leader moves.
	time.Sleep(time.Second)
	leader := waitLeader(tb, ctx, cons, "")
	switch move {
	case "stepdown":
		if _, err := pub.NC.Request("$JS.API.CONSUMER.LEADER.STEPDOWN."+bus.WorkStream+"."+durable, nil, 5*time.Second); err != nil {
			tb.Fatalf("step down the consumer's leader: %v", err)
		}
		tb.Logf("%s: leader %s stepped down at job %d, new leader %s", move, leader, published.Load(), waitLeader(tb, ctx, cons, leader))
	case "kill":
		n := cl.Node(leader)
		n.Kill(tb)
		tb.Logf("%s: killed %s, the consumer's leader, at job %d", move, leader, published.Load())
		time.Sleep(2 * time.Second)
		n.Restart(tb)
		tb.Logf("%s: %s listening again at job %d", move, leader, published.Load())
	}
	time.Sleep(4 * time.Second)
	close(endPub)
	pubs.Wait()
	c.mu.Lock()
	c.want = int(published.Load())
	if len(c.handled) == c.want {
		close(c.all)
	}
	c.mu.Unlock()
	select {
	case <-c.all:
	case <-ctx.Done():
		c.mu.Lock()
		tb.Fatalf("%s: %d of %d jobs handled before the deadline", move, len(c.handled), published.Load())
	}
	// Every job acknowledged: nothing is left to be delivered again.
	for {
		info, err := cons.Info(ctx)
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: the consumer still holds jobs: %+v, %v", move, info, err)
		case <-time.After(100 * time.Millisecond): // polling the consumer's info
		}
	}
	return c
}

// quantile is the q-quantile (nearest rank) of ds, sorted in place.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// TestJobsClaimedAcrossALeaderMove: jobs published while a work
// consumer's leader moves, by a step-down and by its server killed and
// restarted, are each handled exactly once, and all of them are claimed.
// The latencies are BenchmarkClaimAcrossALeaderMove's.
func TestJobsClaimedAcrossALeaderMove(t *testing.T) {
	cl := testutil.StartNATSCluster(t)
	for _, move := range []string{"stepdown", "kill"} {
		c := leaderMove(t, cl, move)
		var waits, since []time.Duration
		redelivered := 0
		for id, n := range c.handled {
			if n != 1 {
				t.Errorf("%s: job %s handled %d times", move, id, n)
			}
			waits = append(waits, c.waits[id])
			since = append(since, c.sinceLeader(id))
			if c.attempts[id] > 1 {
				redelivered++
			}
		}
		t.Logf("%s: %d jobs (%d taken at a later delivery), stored to taken p50 %v, p99 %v, max %v; while the consumer had a leader p99 %v, max %v",
			move, len(waits), redelivered, quantile(waits, 0.5), quantile(waits, 0.99), quantile(waits, 1), quantile(since, 0.99), quantile(since, 1))
	}
}

// BenchmarkClaimAcrossALeaderMove measures, for each job published
// around a move of its consumer's leader, the time from the job stored
// on the work queue to a puller taking it (see leaderMove); "none" is
// the floor, the same pullers and jobs without a move. Each iteration is
// one move on the same cluster; the metrics are over every job of every
// iteration.
func BenchmarkClaimAcrossALeaderMove(b *testing.B) {
	cl := testutil.StartNATSCluster(b)
	for _, move := range []string{"none", "stepdown", "kill"} {
		b.Run(move, func(b *testing.B) {
			var waits, since []time.Duration
			redelivered := 0
			for range b.N {
				c := leaderMove(b, cl, move)
				for id := range c.handled {
					waits = append(waits, c.waits[id])
					since = append(since, c.sinceLeader(id))
					if c.attempts[id] > 1 {
						redelivered++
					}
				}
			}
			b.ReportMetric(float64(len(waits))/float64(b.N), "jobs/op")
			b.ReportMetric(float64(quantile(waits, 0.5).Milliseconds()), "p50-ms")
			b.ReportMetric(float64(quantile(waits, 0.99).Milliseconds()), "p99-ms")
			b.ReportMetric(float64(quantile(waits, 1).Milliseconds()), "max-ms")
			b.ReportMetric(float64(quantile(since, 0.99).Milliseconds()), "leader-p99-ms")
			b.ReportMetric(float64(quantile(since, 1).Milliseconds()), "leader-max-ms")
			b.ReportMetric(float64(redelivered), "redelivered")
		})
	}
}

package pipeline

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/services/launcher"
)

// natsCluster starts three nats-server processes (n1, n2, n3; see
// testutil.StartNATSCluster) and returns them with the client URLs,
// comma-separated.
func natsCluster(t *testing.T) ([]*testutil.NATSNode, string) {
	t.Helper()
	c := testutil.StartNATSCluster(t)
	return c.Nodes, c.URL()
}

// streamLeader is the server name of the stream's leader, "" while there
// is none.
func streamLeader(ctx context.Context, b *bus.Bus, stream string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := b.JS.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// TestStreamLeaderMoves is fault 3 on a cluster: two launchers and two
// aggregators, each on its own connection to a 3-node JetStream cluster
// of nats-server processes (streams at R3), serve a run of 8 cells; once
// the first verdict is recorded, the leaders of the event log, the work
// queue and the run index are made to step down, and then the server now
// leading the event log is killed (SIGKILL). The services ride it out
// (transient errors retried with backoff) and the run finishes with every
// cell solved once and one verdict each.
func TestStreamLeaderMoves(t *testing.T) {
	t.Chdir(t.TempDir())
	start := time.Now()
	nodes, url := natsCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var log *slog.Logger // the run's, once planned
	connect := func() *bus.Bus {
		c, err := bus.Connect(ctx, url, log)
		if err != nil {
			for _, n := range nodes {
				t.Logf("%s:\n%s", n.Name, n.Log)
			}
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	t.Logf("cluster listening at %.1f s", time.Since(start).Seconds())
	b := connect()
	t.Logf("connected at %.1f s", time.Since(start).Seconds())
	for _, name := range []string{bus.EventsStream, bus.WorkStream, "KV_" + bus.RunsBucket} {
		s, err := b.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s at R%d, want R3", name, r)
		}
	}
	r := planCells(t, ctx, b, 8, 2*time.Second)
	log = r.log
	stop := r.services(t, ctx, connect, []launcher.Config{
		{Node: "w1", Concurrency: 2, AckWait: 15 * time.Second},
		{Node: "w2", Concurrency: 2, AckWait: 15 * time.Second},
	}, 2)
	r.publish(t, ctx, b)
	t.Logf("services up, jobs published at %.1f s", time.Since(start).Seconds())

	// Mid-run: the first verdict is recorded.
	for {
		var verdict bool
		err := b.Read(ctx, []string{events.RunFilter(r.run)}, func(e events.Envelope) error {
			verdict = verdict || e.Type == events.Verdict
			return nil
		})
		if err == nil && verdict {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no verdict before the deadline")
		case <-time.After(100 * time.Millisecond): // polling the log
		}
	}
	t.Logf("first verdict at %.1f s", time.Since(start).Seconds())
	for _, name := range []string{bus.EventsStream, bus.WorkStream, "KV_" + bus.RunsBucket} {
		before := streamLeader(ctx, b, name)
		if _, err := b.NC.Request("$JS.API.STREAM.LEADER.STEPDOWN."+name, nil, 5*time.Second); err != nil {
			t.Fatalf("step down the leader of %s: %v", name, err)
		}
		t.Logf("stream %s: leader %s stepped down", name, before)
	}
	var leader string
	for leader == "" {
		leader = streamLeader(ctx, b, bus.EventsStream)
		if leader != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the event log has no leader after the step-down")
		case <-time.After(100 * time.Millisecond): // polling the stream info
		}
	}
	for _, n := range nodes {
		if n.Name == leader {
			n.Kill(t)
			t.Logf("killed %s, the event log's new leader, at %.1f s", n.Name, time.Since(start).Seconds())
		}
	}

	rec := waitFinished(t, ctx, b, r.run)
	t.Logf("run finished at %.1f s", time.Since(start).Seconds())
	if err := stop(); err != nil {
		t.Fatalf("a service ended: %v", err)
	}
	// Read on a fresh connection: b may have been on the killed server.
	r.checkOnce(t, connect(), rec)
}

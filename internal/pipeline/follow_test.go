package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestFollowSurvivesItsConsumerServerKilled kills -9 the nats-server that
// hosts the consumer a live Bus.Follow reads from (an R1 consumer of the
// R3 event log): the follow carries on from the event after the last one
// it delivered, with every later event delivered once and in order, and
// no error.
func TestFollowSurvivesItsConsumerServerKilled(t *testing.T) {
	nodes, url := natsCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	connect := func() *bus.Bus {
		c, err := bus.Connect(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	follower, pub := connect(), connect()
	const run = "follow-kill"
	publish := func(b *bus.Bus, i int) {
		t.Helper()
		e := events.Must(events.Message, run, "c1", 1, "test", map[string]int{"i": i})
		err := bus.Retry(ctx, nil, "publish", func(ctx context.Context) error { return b.PublishAll(ctx, e) })
		if err != nil {
			t.Fatalf("publish event %d: %v", i, err)
		}
	}
	publish(pub, 0)

	got := make(chan int, 100)
	done := make(chan error, 1)
	go func() {
		done <- follower.Follow(ctx, []string{events.RunFilter(run)}, func(e events.Envelope) error {
			var d map[string]int
			if err := events.Into(e, &d); err != nil {
				return err
			}
			got <- d["i"]
			return nil
		})
	}()
	next := 0
	expect := func(upTo int, within time.Duration) {
		t.Helper()
		timer := time.NewTimer(within)
		defer timer.Stop()
		for next <= upTo {
			select {
			case i := <-got:
				if i != next {
					t.Fatalf("follow delivered event %d, want %d", i, next)
				}
				next++
			case err := <-done:
				t.Fatalf("follow ended: %v", err)
			case <-timer.C:
				t.Fatalf("follow stalled: event %d not delivered within %s", next, within)
			}
		}
	}
	expect(0, 30*time.Second)

	// The follow's consumer is the only one on the event log.
	host := consumerHost(t, ctx, follower)
	var pubOn string
	for _, n := range nodes {
		if n.Name == host {
			n.Kill(t)
		} else if pubOn == "" {
			pubOn = n.Name
		}
	}
	killed := time.Now()
	t.Logf("killed %s, which held the follow's consumer (follower on %s)", host, follower.NC.ConnectedServerName())
	for i := 1; i <= 5; i++ {
		publish(pub, i)
	}
	expect(5, 45*time.Second)
	t.Logf("events after the kill delivered in %.1f s", time.Since(killed).Seconds())
	select {
	case i := <-got:
		t.Fatalf("event %d delivered again", i)
	default:
	}
}

// consumerHost is the server leading the one consumer of the event log,
// polled until there is exactly one with a leader.
func consumerHost(t *testing.T, ctx context.Context, b *bus.Bus) string {
	t.Helper()
	for {
		var hosts []string
		names := b.Events.ListConsumers(ctx)
		for info := range names.Info() {
			if info.Cluster != nil {
				hosts = append(hosts, info.Cluster.Leader)
			}
		}
		if len(hosts) == 1 && hosts[0] != "" {
			return hosts[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no single consumer on the event log: %v", fmt.Sprint(hosts))
		case <-time.After(100 * time.Millisecond): // polling the consumer list
		}
	}
}

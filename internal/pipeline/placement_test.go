package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a poller.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartWhileANodeIsDown: a service connecting to a 3-node cluster
// restarted without one of its nodes cannot place its R3 streams ("no
// suitable peers for placement", with the reason "miscellaneous issue" for
// a peer not heard from since the restart, "peer offline" for one known
// to be down); it retries with backoff
// instead of exiting, and once the node is back it creates the streams
// and uses them. A configuration error (more replicas than the cluster has
// servers) still ends Connect at once.
func TestStartWhileANodeIsDown(t *testing.T) {
	nodes, url := natsCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	cfgCtx, cfgCancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := bus.ConnectReplicas(cfgCtx, url, nil, 5)
	cfgCancel()
	if err == nil || bus.Transient(err) {
		t.Fatalf("Connect with 5 replicas on 3 servers: %v, want a configuration error", err)
	}
	t.Logf("5 replicas on 3 servers: %v", err)

	// The cluster is restarted without n3: n1 and n2 know it from the
	// meta group but have not heard from it since, so they cannot place an
	// R3 asset on it.
	down := nodes[2]
	for _, n := range nodes {
		n.Stop(t)
	}
	nodes[0].Restart(t)
	nodes[1].Restart(t)
	probe, err := nats.Connect(url, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(probe)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; ; n++ {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		name := fmt.Sprintf("PROBE%d", n)
		_, err := js.CreateStream(pctx, jetstream.StreamConfig{Name: name, Subjects: []string{"probe." + name}, Replicas: 3, Storage: jetstream.MemoryStorage})
		if err == nil {
			t.Fatalf("an R3 stream was placed with %s down", down.Name)
		}
		pcancel()
		if strings.Contains(err.Error(), "peer offline") || strings.Contains(err.Error(), "miscellaneous issue") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no placement error with %s down: %v", down.Name, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the restarted cluster
	}
	probe.Close()

	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	type result struct {
		b   *bus.Bus
		err error
	}
	connected := make(chan result, 1)
	go func() {
		b, err := bus.Connect(ctx, url, log)
		connected <- result{b, err}
	}()
	for !strings.Contains(logs.String(), "no suitable peers for placement") {
		select {
		case r := <-connected:
			if r.err == nil {
				r.b.Close()
			}
			t.Fatalf("Connect returned with %s down: %v (log: %s)", down.Name, r.err, logs)
		case <-ctx.Done():
			t.Fatalf("no placement error retried while %s is down; log:\n%s", down.Name, logs)
		case <-time.After(100 * time.Millisecond): // polling the service's log
		}
	}
	t.Logf("placement error retried while %s is down", down.Name)
	down.Restart(t)
	var b *bus.Bus
	select {
	case r := <-connected:
		if r.err != nil {
			t.Fatalf("Connect after %s returned: %v", down.Name, r.err)
		}
		b = r.b
		t.Cleanup(b.Close)
	case <-ctx.Done():
		t.Fatalf("Connect did not return after %s came back; log:\n%s", down.Name, logs)
	}
	for _, name := range []string{bus.EventsStream, bus.WorkStream, "KV_" + bus.RunsBucket} {
		s, err := b.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s at R%d, want R3", name, r)
		}
	}
	e := events.Must(events.Message, "placement", "c1", 1, "test", map[string]int{"i": 1})
	if err := bus.Retry(ctx, log, "publish", func(ctx context.Context) error { return b.PublishAll(ctx, e) }); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := b.Read(ctx, []string{events.RunFilter("placement")}, func(e events.Envelope) error {
		got = append(got, e.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != e.ID {
		t.Fatalf("read %v, want the one event published", got)
	}
}

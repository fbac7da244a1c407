package bus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
)

// cluster starts a 3-server JetStream cluster on loopback in this process
// and returns its client URLs, comma-separated.
func cluster(t *testing.T) string {
	t.Helper()
	routePorts := testutil.FreePorts(t, 3)
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var urls []string
	for i := range 3 {
		o := &server.Options{ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "proctor", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ","))}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("cluster server not ready")
		}
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// TestReplicasDefaultAndNeverLowered is fault 7: on a 3-server cluster
// the streams are made R3 by default, and a proctor asking for R1 later
// leaves them at R3.
func TestReplicasDefaultAndNeverLowered(t *testing.T) {
	url := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	replicas := func(b *bus.Bus) []int {
		var out []int
		for _, name := range []string{bus.EventsStream, bus.WorkStream, "KV_" + bus.RunsBucket, "KV_" + bus.NodesBucket} {
			s, err := b.JS.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s.CachedInfo().Config.Replicas)
		}
		return out
	}
	if got := replicas(b); fmt.Sprint(got) != "[3 3 3 3]" {
		t.Fatalf("default replicas on a 3-server cluster: %v, want R3", got)
	}
	b1, err := bus.ConnectReplicas(ctx, url, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	if got := replicas(b1); fmt.Sprint(got) != "[3 3 3 3]" {
		t.Fatalf("replicas after a proctor asked for R1: %v, want R3 kept", got)
	}
}

// TestReplicasOneServer: on a single server the streams are R1.
func TestReplicasOneServer(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := b.Events.CachedInfo().Config.Replicas; r != 1 {
		t.Fatalf("replicas on one server: %d", r)
	}
}

// TestKVReadsSeeTheLastWrite: on a 3-server cluster the run index and the
// node heartbeats are read through their stream's leader (direct gets
// off, however many processes create the buckets): a record written
// through one server reads back at once through each of the three. A
// direct get, answered by any replica, could miss a run the driver had
// just started.
func TestKVReadsSeeTheLastWrite(t *testing.T) {
	urls := strings.Split(cluster(t), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var bs []*bus.Bus
	for _, u := range urls {
		b, err := bus.ConnectReplicas(ctx, u, nil, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		bs = append(bs, b)
	}
	for _, name := range []string{bus.RunsBucket, bus.NodesBucket} {
		s, err := bs[0].JS.Stream(ctx, "KV_"+name)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Errorf("KV_%s: direct gets on after three processes connected", name)
		}
	}
	for i := range 300 {
		want := fmt.Sprintf("s%d", i)
		if err := bs[i%3].PutRun(ctx, bus.RunRecord{ID: "r1", Status: want}); err != nil {
			t.Fatal(err)
		}
		for j, b := range bs {
			got, err := b.GetRun(ctx, "r1")
			if err != nil || got.Status != want {
				t.Fatalf("write %d through server %d, read through server %d: status %q, err %v; want %q", i, i%3+1, j+1, got.Status, err, want)
			}
		}
	}
}

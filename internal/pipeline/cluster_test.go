package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/services/launcher"
)

// natsBin is the nats-server of the version go.mod requires, built from
// the module cache once per test binary.
var natsBin = testutil.Binary{Pkg: "github.com/nats-io/nats-server/v2"}

// natsServerBinary builds nats-server once and returns its path
// (testutil.Binary); the test fails when the build does.
func natsServerBinary(t *testing.T) string {
	t.Helper()
	return natsBin.Path(t)
}

// node is one nats-server process of a test cluster.
type node struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	args []string // the process's command line, to start it again
}

// restart starts the node's nats-server again (same ports, same store)
// after it was stopped or killed.
func (n *node) restart(t *testing.T) {
	t.Helper()
	n.cmd = exec.Command(n.cmd.Path, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// natsCluster starts three nats-server processes (n1, n2, n3) with
// JetStream on loopback ports and t.TempDir() stores, routed into one
// cluster, and returns them with the client URLs, comma-separated. Every
// process still running is stopped when the test ends.
func natsCluster(t *testing.T) ([]*node, string) {
	t.Helper()
	bin := natsServerBinary(t)
	ports := testutil.FreePorts(t, 6)
	var routes, urls []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var nodes []*node
	for i := range 3 {
		n := &node{name: fmt.Sprintf("n%d", i+1), log: &bytes.Buffer{}}
		n.args = []string{"-a", "127.0.0.1", "-p", fmt.Sprint(ports[i]), "-js", "-sd", t.TempDir(),
			"--server_name", n.name, "--cluster_name", "proctor",
			"--cluster", routes[i], "--routes", strings.Join(routes, ",")}
		n.cmd = exec.Command(bin, n.args...)
		n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if n.cmd.Process != nil && n.cmd.ProcessState == nil {
				_ = n.cmd.Process.Signal(syscall.SIGTERM)
				_ = n.cmd.Wait()
			}
		})
		nodes = append(nodes, n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := range 3 {
		for {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[i]))
			if err == nil {
				_ = c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nats-server %s not listening: %v\n%s", nodes[i].name, err, nodes[i].log)
			}
			time.Sleep(50 * time.Millisecond) // polling the port, not synchronising on time
		}
	}
	// Ready once an R3 stream can be placed (a meta leader elected, every
	// peer known).
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "READY", Subjects: []string{"ready"}, Replicas: 3, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, "READY")
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the cluster, not synchronising on time
	}
	return nodes, strings.Join(urls, ",")
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
	natsServerBinary(t)
	start := time.Now()
	nodes, url := natsCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var log *slog.Logger // the run's, once planned
	connect := func() *bus.Bus {
		c, err := bus.Connect(ctx, url, log)
		if err != nil {
			for _, n := range nodes {
				t.Logf("%s:\n%s", n.name, n.log)
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
		if n.name == leader {
			if err := n.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = n.cmd.Wait()
			t.Logf("killed %s, the event log's new leader, at %.1f s", n.name, time.Since(start).Seconds())
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

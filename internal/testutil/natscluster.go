package testutil

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServerBin is the nats-server of the version go.mod requires, built
// once per test binary.
var natsServerBin = Binary{Pkg: "github.com/nats-io/nats-server/v2"}

// NATSNode is one nats-server process of a NATSCluster.
type NATSNode struct {
	// Name is the server's name (n1, n2, n3).
	Name string
	// URL is its client URL.
	URL string
	// Log holds the process's output, across restarts.
	Log  *SyncBuffer
	port int
	args []string
	cmd  *exec.Cmd
}

// NATSCluster is a 3-server JetStream cluster of nats-server processes
// on loopback, each with a store of its own.
type NATSCluster struct {
	Nodes []*NATSNode
}

// StartNATSCluster builds nats-server (go.mod's version) once per test
// binary, starts n1, n2 and n3 routed into one cluster, and returns once
// an R3 stream can be placed on it. Every process still running is
// stopped (SIGTERM) when the test ends.
func StartNATSCluster(t testing.TB) *NATSCluster {
	t.Helper()
	bin := natsServerBin.Path(t)
	ports := FreePorts(t, 6)
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
	}
	c := &NATSCluster{}
	for i := range 3 {
		n := &NATSNode{Name: fmt.Sprintf("n%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			Log: &SyncBuffer{}, port: ports[i]}
		n.args = []string{"-a", "127.0.0.1", "-p", fmt.Sprint(ports[i]), "-js", "-sd", t.TempDir(),
			"--server_name", n.Name, "--cluster_name", "proctor",
			"--cluster", routes[i], "--routes", strings.Join(routes, ",")}
		n.cmd = exec.Command(bin, n.args...)
		n.start(t)
		t.Cleanup(n.stop)
		c.Nodes = append(c.Nodes, n)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range c.Nodes {
		n.WaitListening(t, deadline)
	}
	nc, err := nats.Connect(c.URL())
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
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the cluster, not synchronising on time
	}
}

// URL is the cluster's client URLs, comma-separated, n1 first.
func (c *NATSCluster) URL() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL)
	}
	return strings.Join(urls, ",")
}

// Node is the node named name, nil if there is none.
func (c *NATSCluster) Node(name string) *NATSNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func (n *NATSNode) start(t testing.TB) {
	t.Helper()
	n.cmd.Stdout, n.cmd.Stderr = n.Log, n.Log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (n *NATSNode) stop() {
	if n.cmd.Process != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
	}
}

// Stop ends the node's process with SIGTERM and waits for it.
func (n *NATSNode) Stop(t testing.TB) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = n.cmd.Wait()
}

// Kill ends the node's process with SIGKILL and reaps it.
func (n *NATSNode) Kill(t testing.TB) {
	t.Helper()
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = n.cmd.Wait()
}

// Restart starts the node's nats-server again (same ports, same store)
// after Kill or Stop, and returns once it listens.
func (n *NATSNode) Restart(t testing.TB) {
	t.Helper()
	n.cmd = exec.Command(n.cmd.Path, n.args...)
	n.start(t)
	n.WaitListening(t, time.Now().Add(60*time.Second))
}

// WaitListening returns once the node accepts connections on its client
// port; the test fails at deadline.
func (n *NATSNode) WaitListening(t testing.TB, deadline time.Time) {
	t.Helper()
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", n.port))
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server %s not listening: %v\n%s", n.Name, err, n.Log)
		}
		time.Sleep(50 * time.Millisecond) // polling the port, not synchronising on time
	}
}

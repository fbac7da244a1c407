package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// clusterBus starts an in-process nats-server on loopback (a store of
// the test's own) standing for a cluster, and returns its URL and a bus
// on it.
func clusterBus(t *testing.T) (string, *bus.Bus) {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	b, err := bus.ConnectEmbedded(context.Background(), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return e.ClientURL(), b
}

// cellEvents returns the events of the run's only cell.
func cellEvents(t *testing.T, b *bus.Bus, runID string) []events.Envelope {
	t.Helper()
	var evs []events.Envelope
	if err := b.ReadRun(context.Background(), runID, func(e events.Envelope) error {
		if e.CellID != "" {
			evs = append(evs, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitStarted polls the log until the run's cell has a SandboxStarted of
// attempt and returns its data, failing after d.
func waitStarted(t *testing.T, b *bus.Bus, runID string, attempt int, d time.Duration, stderr func() string) events.SandboxStartedData {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, e := range cellEvents(t, b, runID) {
			if e.Type == events.SandboxStarted && e.Attempt == attempt {
				var sb events.SandboxStartedData
				if err := events.Into(e, &sb); err != nil {
					t.Fatal(err)
				}
				return sb
			}
		}
		if time.Now().After(deadline) {
			var types []string
			for _, e := range cellEvents(t, b, runID) {
				types = append(types, string(e.Type))
			}
			t.Fatalf("no SandboxStarted of attempt %d within %v (cell events %v); stderr:\n%s", attempt, d, types, stderr())
		}
		time.Sleep(50 * time.Millisecond) // polling the log, not synchronising on time
	}
}

// TestPoisonCellIsErroredAndReaped is faults 5 and 6: a cell whose every
// attempt kills its launcher (here: the operator's kill -9 once the
// cell's container runs, as a crashing agent would) is redelivered with
// a new attempt each time; the restarted launcher reaps the container of
// the attempt before, and the last delivery errors the cell, class
// infra, naming the cause. The run finishes with the one cell errored
// once, and nothing of the run is left in Docker.
func TestPoisonCellIsErroredAndReaped(t *testing.T) {
	t.Parallel() // its own store, processes and engine objects; the environment is never set
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	bin := buildProctor(t)
	url, b := clusterBus(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/slow-root")
	const ackWait = "2s"
	rest := startProctor(t, bin, home, "serve", "planner", "verifier", "aggregator", "--nats", url, "--node", "n1", "--ack-wait", ackWait)
	js := filepath.Join(out, "a.json")
	run := startProctor(t, bin, home, "tasks", "run", "--nats", url, "--tasks-root", root, "--all", "--harnesses", "oracle",
		"--output-dir", out, "--out-json", js)
	id := run.id(t)

	var prev events.SandboxStartedData
	for attempt := 1; attempt < bus.MaxDeliver; attempt++ {
		l := startProctor(t, bin, home, "serve", "launcher", "--nats", url, "--node", "n1", "--ack-wait", ackWait, "--concurrency", "1")
		sb := waitStarted(t, b, id, attempt, 2*time.Minute, func() string { return l.stderr.String() + rest.stderr.String() + run.stderr.String() })
		if attempt > 1 {
			// Fault 5: the attempt before's container goes while this
			// attempt still runs.
			deadline := time.Now().Add(30 * time.Second)
			for containerExists(t, cli, prev.State["container"]) {
				if time.Now().After(deadline) {
					t.Fatalf("attempt %d's container %.12s outlived its launcher by 30 s", attempt-1, prev.ID)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		prev = sb
		l.kill9(t)
	}
	// The last delivery errors the cell without running it.
	l := startProctor(t, bin, home, "serve", "launcher", "--nats", url, "--node", "n1", "--ack-wait", ackWait, "--concurrency", "1")
	if code := run.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run exit %d:\n%s\nlauncher:\n%s", code, run.stderr.String(), l.stderr.String())
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Results) != 1 || a.Results[0].Outcome != "errored" || a.Results[0].ErrorClass != "infra" ||
		!strings.Contains(a.Results[0].Error, "launch job delivered 5 times") {
		t.Fatalf("poison cell: %+v", a.Results)
	}
	terminal := 0
	for _, e := range cellEvents(t, b, id) {
		if e.Type == events.Verdict || e.Type == events.CellErrored {
			terminal++
		}
	}
	if terminal != 1 {
		t.Errorf("%d terminal events, want 1", terminal)
	}
	if c, n := leftovers(t, cli, id); c+n != 0 {
		t.Fatalf("%d containers and %d networks of the run remain", c, n)
	}
}

// containerExists reports whether the engine still has the container id.
func containerExists(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	_, err := cli.ContainerInspect(context.Background(), id)
	if errdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

package scalerig

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/planner"
)

// storeCluster is a NATS server, the planner (storing trees) and the
// aggregator in this process, for tests whose workers and driver are
// processes with a home of their own each.
type storeCluster struct {
	url string
	b   *bus.Bus
	dir string
}

func newStoreCluster(t *testing.T, ctx context.Context) *storeCluster {
	t.Helper()
	e := bustest.Server(t)
	b, err := bus.Connect(ctx, e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	p, err := planner.New(planner.Config{StoreTrees: true}, b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := aggregator.New(aggregator.Config{Version: "test"}, b)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	wg.Go(func() { _ = p.Run(sctx) })
	wg.Go(func() { _ = a.Run(sctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	return &storeCluster{url: e.ClientURL(), b: b, dir: t.TempDir()}
}

// start starts this test binary as role args[0] with its own
// PROCTOR_HOME under the cluster's dir, its output in log.
func (c *storeCluster) start(t *testing.T, home string, log *testutil.SyncBuffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), RoleEnv+"=1", "PROCTOR_HOME="+filepath.Join(c.dir, home))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func (c *storeCluster) worker(t *testing.T, home string, log *testutil.SyncBuffer, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"worker", "--nats", c.url, "--node", "n1", "--concurrency", "1", "--solve", "0s",
		"--verify", "0s", "--events", "2", "--ack-wait", "3s", "--store-outputs"}, extra...)
	return c.start(t, home, log, args...)
}

// waitCmd waits for cmd to exit or the deadline.
func waitCmd(t *testing.T, ctx context.Context, cmd *exec.Cmd, log *testutil.SyncBuffer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args[1:3], " "), err, log.String())
		}
	case <-ctx.Done():
		t.Fatalf("%s did not end\n%s", strings.Join(cmd.Args[1:3], " "), log.String())
	}
}

// TestWorkerKilledMidUpload: a worker process killed with SIGKILL while
// its verifier stores a large cell output leaves no object of that
// attempt; the cell runs again as attempt 2 on another worker process,
// and the driver, which never sees a worker's disk, writes under its
// --output-dir exactly the files of attempt 2's object.
func TestWorkerKilledMidUpload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newStoreCluster(t, ctx)
	root, agent, out := filepath.Join(c.dir, "tasks"), filepath.Join(c.dir, "agent"), filepath.Join(c.dir, "out")
	if err := writeTasks(root, agent, 1, Sim{Events: 2}); err != nil {
		t.Fatal(err)
	}
	// The planner stores two trees (the task, the agent) before any
	// launch job: every chunk after their two info messages is a cell
	// output's. The worker is killed at the first.
	var metas atomic.Int32
	var killA func()
	killed := make(chan struct{})
	var once sync.Once
	sub, err := c.b.NC.Subscribe("$O."+trees.Bucket+".>", func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "$O."+trees.Bucket+".M."):
			metas.Add(1)
		case strings.HasPrefix(m.Subject, "$O."+trees.Bucket+".C.") && metas.Load() >= 2:
			once.Do(func() { killA(); close(killed) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	var logA, logB, logD testutil.SyncBuffer
	a := c.worker(t, "worker-a", &logA, "--output-bytes", "48000000")
	killA = func() { _ = a.Process.Kill() }
	js := filepath.Join(out, "a.json")
	d := c.start(t, "driver", &logD, "proctor", "tasks", "run", "--nats", c.url, "--tasks-root", root, "--all",
		"--harnesses", "agent:"+agent, "--retries", "1", "--output-dir", out, "--out-json", js)
	select {
	case <-killed:
	case <-ctx.Done():
		t.Fatalf("no cell output was stored\nworker:\n%s\ndriver:\n%s", logA.String(), logD.String())
	}
	// The retry runs on another worker process of the same node name
	// (the attempt's verify job is the node's), with a disk of its own
	// and a small output.
	c.worker(t, "worker-b", &logB, "--output-bytes", "1000")
	waitCmd(t, ctx, d, &logD)

	art, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(art.Results) != 1 {
		t.Fatalf("%d rows", len(art.Results))
	}
	r := art.Results[0]
	if r.Outcome != "passed" || r.Attempt != 2 {
		t.Fatalf("row: outcome %s attempt %d (%s: %s), want passed at attempt 2\nworker b:\n%s\ndriver:\n%s", r.Outcome, r.Attempt, r.ErrorClass, r.Error, logB.String(), logD.String())
	}
	store, err := trees.Lookup(ctx, c.b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.GetInfo(ctx, trees.OutputName(art.Run.ID, r.CellID, 1)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the killed attempt's object: %v, want none", err)
	}
	ve, err := c.b.LastEvent(ctx, events.CellSubject(art.Run.ID, r.CellID, events.Verdict))
	if err != nil {
		t.Fatal(err)
	}
	var v events.VerdictData
	if err := events.Into(ve, &v); err != nil || v.Output == nil {
		t.Fatalf("verdict %+v: %v", v, err)
	}
	if v.Output.Object != trees.OutputName(art.Run.ID, r.CellID, 2) {
		t.Errorf("verdict names %s", v.Output.Object)
	}
	// The driver's cell directory is attempt 2's object, whole: its
	// small output file, nothing of the 48 MB one.
	got, err := trees.OutputDigest(r.OutputDir)
	if err != nil {
		t.Fatal(err)
	}
	if got != v.Output.Digest {
		t.Errorf("driver's cell directory has digest %s, attempt 2's object %s", got, v.Output.Digest)
	}
	if fi, err := os.Stat(filepath.Join(r.OutputDir, "logs", "verifier", "output.bin")); err != nil || fi.Size() != 1000 {
		t.Errorf("output.bin in the driver's directory: %v %v, want attempt 2's 1000 bytes", fi, err)
	}
	// `runs fetch` writes the same files later, from another home, under
	// another directory: <output-dir>/<run id>, as tasks run lays it out.
	var logF testutil.SyncBuffer
	other := filepath.Join(c.dir, "elsewhere")
	f := c.start(t, "fetcher", &logF, "proctor", "runs", "fetch", art.Run.ID, "--nats", c.url, "--output-dir", other)
	waitCmd(t, ctx, f, &logF)
	rel, err := filepath.Rel(filepath.Dir(js), r.OutputDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rel, art.Run.ID+string(filepath.Separator)) {
		t.Fatalf("the driver's cell directory %s is not under out/<run id>", r.OutputDir)
	}
	if got, err := trees.OutputDigest(filepath.Join(other, rel)); err != nil || got != v.Output.Digest {
		t.Errorf("runs fetch wrote digest %s (%v), want %s\n%s", got, err, v.Output.Digest, logF.String())
	}
	// Worker A wrote attempt 1 on its own disk, never the driver's.
	if _, err := os.Stat(filepath.Join(c.dir, "worker-a", "cells", art.Run.ID)); err != nil {
		t.Errorf("worker A kept no cell directory: %v", err)
	}
}

// TestWorkerWithoutTheTasks: the tasks root and the agent directory are
// moved away after the run is planned, so the worker cannot read them at
// their planned paths; it fetches the planned trees from the bucket
// into its own cache and the run completes with the right verdicts,
// each cell's output written under the driver's --output-dir from the
// stored object, and nothing left in the worker's cells directory.
func TestWorkerWithoutTheTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newStoreCluster(t, ctx)
	root, agent, out := filepath.Join(c.dir, "tasks"), filepath.Join(c.dir, "agent"), filepath.Join(c.dir, "out")
	if err := writeTasks(root, agent, 2, Sim{Events: 2, FailEvery: 2}); err != nil {
		t.Fatal(err)
	}
	planned := make(chan string, 1)
	go func() {
		_ = c.b.Follow(ctx, []string{events.TypeFilter(events.RunPlanned)}, func(e events.Envelope) error {
			planned <- e.RunID
			return bus.ErrStop
		})
	}()
	var logW, logD testutil.SyncBuffer
	js := filepath.Join(out, "a.json")
	d := c.start(t, "driver", &logD, "proctor", "tasks", "run", "--nats", c.url, "--tasks-root", root, "--all",
		"--harnesses", "agent:"+agent, "--output-dir", out, "--out-json", js)
	select {
	case <-planned:
	case <-ctx.Done():
		t.Fatalf("not planned\n%s", logD.String())
	}
	for _, p := range []string{root, agent} {
		if err := os.Rename(p, p+".moved"); err != nil {
			t.Fatal(err)
		}
	}
	c.worker(t, "worker", &logW, "--fail-every", "2")
	waitCmd(t, ctx, d, &logD)
	art, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	sim := Sim{FailEvery: 2}
	if len(art.Results) != 2 {
		t.Fatalf("%d rows\n%s", len(art.Results), logW.String())
	}
	for _, r := range art.Results {
		want := "failed"
		if sim.Reward(r.CellID) == 1 {
			want = "passed"
		}
		if r.Outcome != want {
			t.Errorf("%s: %s (%s), want %s\n%s", r.CellID, r.Outcome, r.Error, want, logW.String())
		}
		if _, err := os.Stat(filepath.Join(c.dir, "worker", "trees", r.TaskRevision)); err != nil {
			t.Errorf("%s: the worker's cache has no tree of revision %.12s: %v", r.Task, r.TaskRevision, err)
		}
		agentTree, err := trees.Digest(agent + ".moved")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "worker", "trees", agentTree)); err != nil {
			t.Errorf("the worker's cache has no agent tree: %v", err)
		}
		if _, err := os.Stat(filepath.Join(r.OutputDir, "logs", "verifier", "reward.txt")); err != nil {
			t.Errorf("%s: no reward.txt in the driver's output directory: %v", r.CellID, err)
		}
	}
	// Each cell's directory on the worker is removed once its stored
	// copy is named by a published verdict: the worker's cells directory
	// (made by the run) ends empty.
	cells := filepath.Join(c.dir, "worker", "cells")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		des, err := os.ReadDir(cells)
		if err != nil {
			t.Fatalf("the worker's cells directory: %v", err)
		}
		if len(des) == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the worker keeps %v under %s after the run", des, cells)
		}
	}
}

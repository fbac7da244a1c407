package scalerig

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestMain lets the test binary stand in for the deploy/scale binary:
// a process the rig starts (RoleEnv set) runs its role instead of the
// tests.
func TestMain(m *testing.M) {
	if os.Getenv(RoleEnv) != "" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// natsServer builds the nats-server binary of go.mod's version into dir.
func natsServer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "nats-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	return bin
}

// TestScaleRigTiny runs the rig at its smallest: 3 NATS servers (R3),
// the planner and aggregator, 2 worker nodes, one run of 50 cells of 10
// agent events each, after the same plan on a single node; every cell
// has exactly one verdict, the artifact has one row a cell and equals
// the single node's, and the measures are filled in. The nodes share
// nothing but NATS: the run's tasks root and agent directory were hidden
// from every worker's view (where the test may give each a mount
// namespace) or gone before any of its launch jobs was taken, every worker that took a cell
// holds the trees it fetched in its own PROCTOR_HOME, the bucket holds
// each tree once, and the driver wrote every cell's stored output under
// its --output-dir.
//
// It takes 15–40 s on a loaded 2-core machine (the rig starts 13
// processes and builds nats-server), so it runs only with
// PROCTOR_SCALE_TEST=1 (`make scale-test`), not in `make test`.
func TestScaleRigTiny(t *testing.T) {
	if os.Getenv("PROCTOR_SCALE_TEST") != "1" {
		t.Skip("set PROCTOR_SCALE_TEST=1 (make scale-test): the scale rig starts 13 processes, 15–40 s")
	}
	dir := t.TempDir()
	var log testutil.SyncBuffer
	cfg := Config{
		Dir: dir, NATSServer: natsServer(t, dir), Self: []string{os.Args[0]},
		Nodes: 3, Workers: 2, Concurrency: 25, Rate: 1e6, Duration: 0,
		Tasks: 5, Repeats: 10, Sim: Sim{Solve: 200 * time.Millisecond, Verify: 50 * time.Millisecond, Events: 10, FailEvery: 3},
		AckWait: 10 * time.Second, Reference: true, StoreOutputs: true, HideInputs: true, Log: &log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	var out strings.Builder
	if rep != nil {
		rep.Write(&out)
	}
	t.Logf("rig log:\n%s%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("problems: %v", rep.Problems)
	}
	if rep.Replicas != 3 {
		t.Errorf("streams at R%d on a cluster of 3, want R3", rep.Replicas)
	}
	if rep.Runs != 1 || rep.Cells != 50 || rep.Verdicts != 50 || rep.RunsProjectedOnce != 1 || rep.ArtifactsEqual != 1 {
		t.Errorf("runs %d cells %d verdicts %d projected once %d equal %d, want 1 50 50 1 1",
			rep.Runs, rep.Cells, rep.Verdicts, rep.RunsProjectedOnce, rep.ArtifactsEqual)
	}
	if rep.AgentEventsPerCell != 10 {
		t.Errorf("%.1f agent events a cell, want 10", rep.AgentEventsPerCell)
	}
	if rep.Claims != 50 || rep.DispatchP50 <= 0 || rep.CellsInWindow != 50 || rep.RoleCores["nats"] <= 0 {
		t.Errorf("measures missing: %d claims, dispatch p50 %v, cells in window %d, nats cores %v", rep.Claims, rep.DispatchP50, rep.CellsInWindow, rep.RoleCores["nats"])
	}
	// Hidden from the workers' view (a mount namespace each, where the
	// test may make one), a job may be taken before the rename; else
	// none may.
	after := rep.ClaimsAfterRemoval
	if rep.InputsHidden {
		after += rep.ClaimsBeforeRemoval
	} else {
		t.Logf("the inputs were not hidden from the workers (see the rig log): only the rename and its check")
	}
	if rep.InputsRemoved != 1 || after != 50 || rep.ClaimsWithTrees != 50 {
		t.Errorf("inputs gone in %d runs; %d jobs taken after (or while hidden: %v), %d by a worker holding the trees; want 1, 50, 50", rep.InputsRemoved, after, rep.InputsHidden, rep.ClaimsWithTrees)
	}
	if rep.TreesStored != 6 {
		t.Errorf("%d trees in the bucket, want 6 (5 tasks, the agent)", rep.TreesStored)
	}
	if rep.OutputObjects < 50 || rep.OutputsNamed != 50 || rep.OutputsWritten != 50 {
		t.Errorf("%d output objects, %d named by verdicts, %d written by the driver; want 50 each", rep.OutputObjects, rep.OutputsNamed, rep.OutputsWritten)
	}

	// The same, read from the disks rather than from the report.
	if _, err := os.Stat(filepath.Join(dir, "inputs", "0000")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run's inputs are at their planned path: %v", err)
	}
	claimed, err := readClaims(filepath.Join(dir, "logs"), "w")
	if err != nil {
		t.Fatal(err)
	}
	workers := map[string]bool{}
	for _, c := range claimed {
		workers[c.worker] = true
	}
	for w := range workers {
		ents, err := os.ReadDir(filepath.Join(dir, "home", w, "trees"))
		n := 0
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				n++
			}
		}
		if n < 2 {
			t.Errorf("worker %s took cells and holds %d fetched trees (%v), want a task's and the agent's", w, n, err)
		}
	}
	rewards := 0
	err = filepath.WalkDir(filepath.Join(dir, "out", "0000"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "reward.txt" && filepath.Base(filepath.Dir(p)) == "verifier" {
			rewards++ // each cell's logs/verifier/reward.txt, as the tests left it
		}
		return err
	})
	if err != nil || rewards != 50 {
		t.Errorf("the driver's --output-dir holds %d reward.txt (%v), want 50", rewards, err)
	}
}

package cellrun_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
)

// node is a worker's cell directories and the bus they answer to.
type node struct {
	b   *bus.Bus
	dir string
}

func (n node) run(t *testing.T, ctx context.Context, id, status string) {
	t.Helper()
	if err := n.b.PutRun(ctx, bus.RunRecord{ID: id, Status: status}); err != nil {
		t.Fatal(err)
	}
}

// cellDir makes the directory of an attempt of a cell as a worker left
// it (a log written).
func (n node) cellDir(t *testing.T, run, cell string, attempt int) string {
	t.Helper()
	d := cellrun.NodeDir(n.dir, run, cell, attempt)
	if err := os.MkdirAll(filepath.Join(d, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "run.log"), []byte("attempt "+strconv.Itoa(attempt)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func (n node) publish(t *testing.T, ctx context.Context, typ events.Type, run, cell string, attempt int, data any) {
	t.Helper()
	if err := n.b.PublishAll(ctx, events.Must(typ, run, cell, attempt, "test", data)); err != nil {
		t.Fatal(err)
	}
}

// left lists the attempt directories under the node's, as run/hash/attempt.
func (n node) left(t *testing.T) []string {
	t.Helper()
	var out []string
	paths, err := filepath.Glob(filepath.Join(n.dir, "*", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		rel, _ := filepath.Rel(n.dir, p)
		out = append(out, filepath.ToSlash(rel))
	}
	slices.Sort(out)
	return out
}

func rel(run, cell string, attempt int) string {
	return run + "/" + events.CellHash(cell) + "/" + strconv.Itoa(attempt)
}

// TestSweeperRemovesDeadCellDirectories: a node's sweep removes the cell
// directories of ended runs and of attempts a later attempt's terminal
// event superseded (their worker died), and keeps: a cell in progress, an
// attempt whose own terminal event is the last (its store failed), a run
// the index does not know, anything not laid out as a cell directory,
// and a directory a cell of the node holds even once its run ended,
// until the cell closes. Each sweep looks at Max directories at most and
// the next goes on after them.
func TestSweeperRemovesDeadCellDirectories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, _ := bustest.Bus(t)
	n := node{b: b, dir: t.TempDir()}
	one := 1.0

	n.run(t, ctx, "ended", bus.StatusCancelled)
	n.cellDir(t, "ended", "t/oracle/m/1", 1)
	n.cellDir(t, "ended", "t/oracle/m/2", 3)

	n.run(t, ctx, "live", bus.StatusRunning)
	// c1: attempt 1's worker died, attempt 2 (another node's, or this
	// one's) has its verdict.
	n.cellDir(t, "live", "t/c1/m/1", 1)
	n.cellDir(t, "live", "t/c1/m/1", 2)
	n.publish(t, ctx, events.Verdict, "live", "t/c1/m/1", 2, events.VerdictData{Reward: &one})
	// c2: in progress.
	n.cellDir(t, "live", "t/c2/m/1", 1)
	// c3: errored by its own worker, whose store failed.
	n.cellDir(t, "live", "t/c3/m/1", 1)
	n.publish(t, ctx, events.CellErrored, "live", "t/c3/m/1", 1, events.CellErroredData{ErrorClass: string(events.ClassInfra), Error: "store the cell's output: no space"})
	// c4: attempts 1 and 2 died; attempt 3 was refused.
	n.cellDir(t, "live", "t/c4/m/1", 1)
	n.cellDir(t, "live", "t/c4/m/1", 2)
	n.publish(t, ctx, events.CellRefused, "live", "t/c4/m/1", 3, events.CellRefusedData{Reason: "no key"})

	// A run of another store, and names that are not cell directories.
	n.cellDir(t, "elsewhere", "t/oracle/m/1", 1)
	for _, p := range []string{"ended/notahash/1", "ended/" + events.CellHash("x") + "/01", "ended/" + events.CellHash("x") + "/zero"} {
		if err := os.MkdirAll(filepath.Join(n.dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// A cell of this node its launcher started and its verifier opened
	// while the run was live, holding its directory; the run then ends
	// (cancelled while it was verified).
	n.run(t, ctx, "held", bus.StatusRunning)
	n.publish(t, ctx, events.CellPlanned, "held", "t/oracle/m/1", 1, events.CellPlannedData{Task: "t", Harness: "oracle", Model: "m", Repeat: 1, OutputDir: "/planned/out"})
	n.cellDir(t, "held", "t/oracle/m/1", 1)
	cr, err := cellrun.OpenOnNode(ctx, b, "held", "t/oracle/m/1", cellrun.Node{Outputs: n.dir, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if string(cr.Dir) != cellrun.NodeDir(n.dir, "held", "t/oracle/m/1", 1) {
		t.Fatalf("the cell's directory is %s", cr.Dir)
	}
	if err := os.WriteFile(cr.Dir.Path("run.log"), []byte("verifying\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateRun(ctx, "held", func(r *bus.RunRecord) { r.Status = bus.StatusCancelled }); err != nil {
		t.Fatal(err)
	}

	keep := []string{rel("elsewhere", "t/oracle/m/1", 1), rel("held", "t/oracle/m/1", 1), rel("live", "t/c1/m/1", 2), rel("live", "t/c2/m/1", 1), rel("live", "t/c3/m/1", 1)}
	s := &cellrun.Sweeper{Bus: b, Dir: n.dir, Max: 3}
	var removed int
	for i := range 4 { // 10 cell directories, 3 a sweep
		sw, err := s.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sw.Looked > 3 {
			t.Fatalf("sweep %d looked at %d directories, bound 3", i+1, sw.Looked)
		}
		removed += sw.Removed
	}
	if removed != 5 {
		t.Errorf("the sweeps removed %d directories, want 5", removed)
	}
	got := n.left(t)
	want := append([]string{"ended/" + events.CellHash("x") + "/01", "ended/" + events.CellHash("x") + "/zero", "ended/notahash/1"}, keep...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("left %v,\nwant %v", got, want)
	}
	if data, err := os.ReadFile(cr.Dir.Path("run.log")); err != nil || string(data) != "verifying\n" {
		t.Errorf("the held cell's log: %q, %v", data, err)
	}

	// The held cell closes (its output stored, say, and the worker died
	// before removing it): the next sweep that reaches it removes it.
	cr.Close()
	for range 4 {
		if _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if slices.Contains(n.left(t), rel("held", "t/oracle/m/1", 1)) {
		t.Errorf("a released directory of an ended run is left: %v", n.left(t))
	}
	if _, err := os.Stat(filepath.Join(n.dir, "ended", events.CellHash("t/oracle/m/1"))); !os.IsNotExist(err) {
		t.Errorf("the emptied cell directory of an ended run is left: %v", err)
	}
}

// TestCellDirectoryHeldFromOpen: a launcher's cell makes and holds its
// directory from OpenOnNode; a cell that wrote nothing leaves nothing at
// Close, not even its cell's or its run's directory (no sweep looks at
// directories without attempts, so they would stay). A verifier's cell whose directory this node does not have (its
// launcher ran elsewhere) makes none.
func TestCellDirectoryHeldFromOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, _ := bustest.Bus(t)
	n := node{b: b, dir: t.TempDir()}
	n.run(t, ctx, "r", bus.StatusRunning)
	n.publish(t, ctx, events.CellPlanned, "r", "t/oracle/m/1", 1, events.CellPlannedData{Task: "t", Harness: "oracle", Model: "m", Repeat: 1, OutputDir: "/planned/out"})
	cr, err := cellrun.OpenOnNode(ctx, b, "r", "t/oracle/m/1", cellrun.Node{Outputs: n.dir, Make: true, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(string(cr.Dir)); err != nil || !fi.IsDir() {
		t.Fatalf("the opened cell's directory: %v", err)
	}
	cr.Close()
	if got := n.left(t); len(got) != 0 {
		t.Errorf("a cell that wrote nothing left %v", got)
	}
	if ents, err := os.ReadDir(n.dir); err != nil || len(ents) != 0 {
		t.Errorf("a cell that wrote nothing left %d entries in the node's cell directories (%v), want none", len(ents), err)
	}
	cr, err = cellrun.OpenOnNode(ctx, b, "r", "t/oracle/m/1", cellrun.Node{Outputs: n.dir, Attempt: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(string(cr.Dir)); !os.IsNotExist(err) {
		t.Errorf("a verifier's open made the directory of an attempt this node never ran: %v", err)
	}
	cr.Close()
}

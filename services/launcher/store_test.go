package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// storingFixture is a launcher of a worker that stores outputs, its
// $PROCTOR_HOME a temp dir, watching its bucket.
type storingFixture struct {
	*fixture
	*harnesstest.StoreWatch
}

func newStoringFixture(t *testing.T, d *sandboxfake.Driver, bucket *jetstream.ObjectStoreConfig) *storingFixture {
	t.Helper()
	t.Setenv("PROCTOR_HOME", t.TempDir())
	b, _ := bustest.Bus(t)
	w := harnesstest.WatchStore(t, b, bucket, func() int { return len(d.Destroyed()) })
	s, err := New(Config{Node: "n1", Host: d, StoreOutputs: true}, b, d)
	if err != nil {
		t.Fatal(err)
	}
	return &storingFixture{fixture: &fixture{b: b, d: d, s: s, run: events.NewID()}, StoreWatch: w}
}

// TestStoringLauncherSelfScoredCell: a cell the launcher scores itself
// (a command arm) on a storing worker: its sandbox is removed before the
// output is stored (every line of the cell is in the stored copy), the
// Verdict names the object, and once it is published the node keeps
// nothing under $PROCTOR_HOME/cells.
func TestStoringLauncherSelfScoredCell(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solver", Exit: 1}}}
	f := newStoringFixture(t, d, nil)
	evs, err := f.launch(t, nil, "command:solver {task_path}", 1)
	if err != nil {
		t.Fatal(err)
	}
	v := last[events.VerdictData](t, evs, events.Verdict)
	if log := harnesstest.StoredRunLog(t, f.b, v.Output); !strings.Contains(log, "attempt 1 on node n1") {
		t.Errorf("the stored run.log:\n%s", log)
	}
	f.StoredAfterTeardown(t)
}

// TestStoringLauncherErroredCell: a cell errored by the launcher (its
// sandbox cannot start) has its directory stored, named in CellErrored,
// its run.log saying why; the node keeps nothing.
func TestStoringLauncherErroredCell(t *testing.T) {
	f := newStoringFixture(t, &sandboxfake.Driver{StartErr: errors.New("no space")}, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	e := last[events.CellErroredData](t, evs, events.CellErrored)
	if e.ErrorClass != string(events.ClassSandbox) {
		t.Errorf("errored %+v", e)
	}
	if log := harnesstest.StoredRunLog(t, f.b, e.Output); !strings.Contains(log, "errored (sandbox)") || !strings.Contains(log, "no space") {
		t.Errorf("the stored run.log does not say why the cell errored:\n%s", log)
	}
	if left := harnesstest.NodeCellsLeft(); len(left) != 0 {
		t.Errorf("the node keeps %q after CellErrored was published", left)
	}
}

// TestStoringLauncherFailedStoreKeepsTheDirectory: when the bucket
// refuses the output, the self-scored cell gets no verdict: it is
// errored, class infra, naming no object, and its directory stays on the
// node with the store's error in its run.log.
func TestStoringLauncherFailedStoreKeepsTheDirectory(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solver", Exit: 0}}}
	f := newStoringFixture(t, d, &jetstream.ObjectStoreConfig{Bucket: trees.Bucket, MaxBytes: 1})
	evs, err := f.launch(t, nil, "command:solver {task_path}", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == events.Verdict {
			t.Fatalf("a verdict whose output could not be stored: %s", e.Data)
		}
	}
	e := last[events.CellErroredData](t, evs, events.CellErrored)
	if e.ErrorClass != string(events.ClassInfra) || !strings.Contains(e.Error, "store the cell's output") || e.Output != nil {
		t.Errorf("errored %+v", e)
	}
	left := harnesstest.NodeCellsLeft()
	var log []byte
	for _, p := range left {
		if filepath.Base(p) == "run.log" {
			log, _ = os.ReadFile(filepath.Join(cellrun.NodeOutputs(), p))
		}
	}
	if !strings.Contains(string(log), "store the cell's output") {
		t.Errorf("the node keeps %q; its run.log:\n%s", left, log)
	}
}

package verifier

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// storing is a verifier of a worker that stores outputs, its
// $PROCTOR_HOME a temp dir, watching its bucket.
type storing struct {
	*fixture
	*harnesstest.StoreWatch
}

func newStoring(t *testing.T, d *sandboxfake.Driver, driver sandbox.Driver, bucket *jetstream.ObjectStoreConfig) *storing {
	t.Helper()
	t.Setenv("PROCTOR_HOME", t.TempDir())
	b, _ := bustest.Bus(t)
	if driver == nil {
		driver = d
	}
	w := harnesstest.WatchStore(t, b, bucket, func() int { return len(d.Destroyed()) })
	s, err := New(Config{Node: "n1", StoreOutputs: true}, b, driver)
	if err != nil {
		t.Fatal(err)
	}
	return &storing{fixture: &fixture{b: b, d: d, s: s, run: events.NewID()}, StoreWatch: w}
}

// verifyCell plans an oracle cell, puts in its node directory what its
// launcher wrote there, runs the verify job and returns the cell's events
// and its node directory.
func (f *storing) verifyCell(t *testing.T) ([]events.Envelope, string) {
	t.Helper()
	job := harnesstest.PlanCell(t, f.b, f.run, harnesstest.Task(t, "t", nil), "oracle")
	dir := cellrun.NodeDir(cellrun.NodeOutputs(), f.run, job.CellID, 1)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.log"), []byte("the launcher's line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Verify(context.Background(), f.job(job, sandbox.NetworkBridge)); err != nil {
		t.Fatal(err)
	}
	if err := f.b.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return harnesstest.CellEvents(t, f.b, f.run, job.CellID), dir
}

// TestVerifyStoresTheOutputAfterTheSandbox: a storing verifier stores the
// cell's directory once the sandbox is gone (so no line of the cell is
// written after the copy), names it in the Verdict, and removes the
// directory from the node once the Verdict is published: nothing is left
// under $PROCTOR_HOME/cells, and the stored copy holds the launcher's and
// the verifier's files.
func TestVerifyStoresTheOutputAfterTheSandbox(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1\n")})}}
	f := newStoring(t, d, nil, nil)
	evs, _ := f.verifyCell(t)
	v := last[events.VerdictData](t, evs, events.Verdict)
	if reward(t, v) != 1 {
		t.Errorf("reward %v", reward(t, v))
	}
	log := harnesstest.StoredRunLog(t, f.b, v.Output)
	if !strings.Contains(log, "the launcher's line") {
		t.Errorf("the stored run.log lacks the launcher's line:\n%s", log)
	}
	f.StoredAfterTeardown(t)
}

// TestVerifyStoresAnErroredCellsOutput: a cell the verifier errors (a
// sandbox that cannot be frozen) has its directory stored too, named in
// CellErrored, its run.log saying why; the node keeps nothing.
func TestVerifyStoresAnErroredCellsOutput(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	f := newStoring(t, d, sandboxfake.Plain{D: d}, nil)
	evs, _ := f.verifyCell(t)
	e := last[events.CellErroredData](t, evs, events.CellErrored)
	if e.ErrorClass != "infra" {
		t.Errorf("errored %+v", e)
	}
	if log := harnesstest.StoredRunLog(t, f.b, e.Output); !strings.Contains(log, "verifier errored") || !strings.Contains(log, "the launcher's line") {
		t.Errorf("the stored run.log does not say why the cell errored:\n%s", log)
	}
	if left := harnesstest.NodeCellsLeft(); len(left) != 0 {
		t.Errorf("the node keeps %q after CellErrored was published", left)
	}
}

// TestVerifyFailedStoreKeepsTheDirectory: a store that fails (the bucket
// refuses every write) gives no verdict: the cell is errored, class infra
// (so --retries runs it again), names no object, and its directory stays
// on the node with the store's error in its run.log, so nothing recorded
// is lost.
func TestVerifyFailedStoreKeepsTheDirectory(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1\n")})}}
	f := newStoring(t, d, nil, &jetstream.ObjectStoreConfig{Bucket: trees.Bucket, MaxBytes: 1})
	evs, dir := f.verifyCell(t)
	for _, e := range evs {
		if e.Type == events.Verdict {
			t.Fatalf("a verdict whose output could not be stored: %s", e.Data)
		}
	}
	e := last[events.CellErroredData](t, evs, events.CellErrored)
	if e.ErrorClass != "infra" || !strings.Contains(e.Error, "store the cell's output") || e.Output != nil {
		t.Errorf("errored %+v", e)
	}
	log, err := os.ReadFile(filepath.Join(dir, "run.log"))
	if err != nil {
		t.Fatalf("the cell's directory is gone from the node: %v", err)
	}
	if !strings.Contains(string(log), "the launcher's line") || !strings.Contains(string(log), "store the cell's output") {
		t.Errorf("the kept run.log:\n%s", log)
	}
}

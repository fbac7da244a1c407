package planner

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestPlanUsesPrimedMatrixOnce: a primed matrix is what Plan publishes
// (the tasks are not loaded again: the spec's root is moved away after
// priming), once; a second Plan of the same run computes the matrix from
// the spec and fails on the missing root. Each oracle cell is recorded as
// a setup check (setup_check), as its arm says.
func TestPlanUsesPrimedMatrixOnce(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	s, err := New(Config{}, b)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.Abs("../..")
	spec := events.RunSpec{TasksRoot: examples(t), Tasks: []string{"fix-sum", "count-words"},
		Harnesses: []string{"oracle"}, Models: []string{"m"}, Repeats: 1, BaseDir: base, OutputDir: t.TempDir()}
	cells, err := Matrix(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	runID := events.NewID()
	if err := b.UpdateRun(ctx, runID, func(r *bus.RunRecord) { r.Status, r.Spec = bus.StatusRequested, spec }); err != nil {
		t.Fatal(err)
	}
	s.Prime(runID, cells)
	spec.TasksRoot = filepath.Join(t.TempDir(), "gone") // a reload would fail
	if err := s.Plan(ctx, runID, spec); err != nil {
		t.Fatal(err)
	}
	planned := 0
	if err := b.ReadRun(ctx, runID, func(e events.Envelope) error {
		switch e.Type {
		case events.CellPlanned:
			planned++
			var d events.CellPlannedData
			if err := events.Into(e, &d); err != nil || !d.SetupCheck {
				t.Errorf("CellPlanned of the oracle without setup_check (the arm's word): %+v %v", d, err)
			}
		case events.RunPlanned:
			var d events.RunPlannedData
			if err := events.Into(e, &d); err != nil || d.Error != "" {
				t.Errorf("RunPlanned: %+v %v", d, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if planned != len(cells) || planned != 2 {
		t.Fatalf("planned %d cells, want the %d primed", planned, len(cells))
	}
	if _, err := s.matrix(runID, spec); err == nil {
		t.Fatal("a second matrix of the run used the primed cells again; want the spec's (missing root) error")
	}
}

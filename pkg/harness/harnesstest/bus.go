package harnesstest

import (
	"context"
	"testing"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
)

// PlanCell records on b what the planner records for one cell of a
// running run (the run record and CellPlanned; the output directory is a
// temp dir) and returns its launch job. The run record's spec has the
// task's parent as its tasks root and base dir.
func PlanCell(t testing.TB, b *bus.Bus, runID string, tk *task.Task, harnessName string) events.LaunchJob {
	t.Helper()
	ctx := context.Background()
	env := NewEnv(t, tk, harnessName, nil)
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		rec = bus.RunRecord{ID: runID, Status: bus.StatusRunning, Spec: env.SpecV}
		if err := b.PutRun(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	plan := env.PlanV
	plan.Task = tk.Name
	plan.Repeat = 1
	if err := b.Publish(ctx, events.Must(events.CellPlanned, runID, env.Cell, 1, "planner", plan)); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return events.LaunchJob{RunID: runID, CellID: env.Cell}
}

// CellEvents returns the events of one cell of a run, in order.
func CellEvents(t testing.TB, b *bus.Bus, runID, cellID string) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	if err := b.ReadRun(context.Background(), runID, func(e events.Envelope) error {
		if e.CellID == cellID {
			out = append(out, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TypesOf lists the types of evs, leaving out CellPlanned.
func TypesOf(evs []events.Envelope) []events.Type {
	var ts []events.Type
	for _, e := range evs {
		if e.Type != events.CellPlanned {
			ts = append(ts, e.Type)
		}
	}
	return ts
}

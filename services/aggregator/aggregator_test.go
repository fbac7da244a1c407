package aggregator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestTwoAggregatorsFinishOnce is fault 8: two aggregators following one
// run both see it done; exactly one RunFinished is published (the claim
// in the run index), and both end.
func TestTwoAggregatorsFinishOnce(t *testing.T) {
	t.Chdir(t.TempDir()) // a spec without artifact paths writes them in the working directory
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.NewID()
	out := t.TempDir()
	if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning, Spec: events.RunSpec{OutputDir: out}}); err != nil {
		t.Fatal(err)
	}
	evs := []events.Envelope{
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunSpec{OutputDir: out}),
		events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 2, Tasks: []string{"t"}}),
	}
	for i := 1; i <= 2; i++ {
		cell := fmt.Sprintf("t/oracle/-/%d", i)
		evs = append(evs,
			events.Must(events.CellPlanned, run, cell, 1, "planner", events.CellPlannedData{Task: "t", Harness: "oracle", Repeat: i}),
			events.Must(events.CellErrored, run, cell, 1, "launcher", events.CellErroredData{ErrorClass: "infra", Error: "x"}))
	}
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	var grp errgroup.Group
	for range 2 {
		s, err := New(Config{Version: "test"}, b)
		if err != nil {
			t.Fatal(err)
		}
		grp.Go(func() error { return s.follow(ctx, run) })
	}
	if err := grp.Wait(); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := b.ReadRun(ctx, run, func(e events.Envelope) error {
		if e.Type == events.RunFinished {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d RunFinished events, want exactly 1", n)
	}
	if rec, err := b.GetRun(ctx, run); err != nil || rec.Status != bus.StatusFinished {
		t.Fatalf("run record %+v %v", rec, err)
	}
}

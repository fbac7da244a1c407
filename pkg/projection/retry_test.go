package projection

import (
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestRetryPendingKeepsTheRunOpen: with Retries 1 a cell's first error of
// a retryable class leaves it pending (not done, shown running, the run
// not done); its second is final; a solver_error and a failing verdict
// are final at once. The rows count the attempts the log holds.
func TestRetryPendingKeepsTheRunOpen(t *testing.T) {
	const run = "r1"
	p := NewProjector(run)
	p.Apply(events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: events.RunSpec{Retries: 1}}))
	p.Apply(events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 3}))
	for _, c := range []string{"a", "b", "c"} {
		p.Apply(events.Must(events.CellPlanned, run, c, 1, "planner", events.CellPlannedData{Task: c, Harness: "h"}))
	}
	errored := func(cell string, attempt int, class events.ErrorClass) {
		p.Apply(events.Must(events.CellErrored, run, cell, attempt, "launcher", events.CellErroredData{ErrorClass: string(class), Error: "x"}))
	}
	errored("a", 1, events.ClassSandbox)
	errored("b", 1, events.ClassSolverError)
	zero := 0.0
	p.Apply(events.Must(events.Verdict, run, "c", 1, "verifier", events.VerdictData{Reward: &zero}))
	if !p.RetryPending("a") || p.CellDone("a") || p.CellState("a") != StateRunning || p.Done() {
		t.Fatalf("after a's first sandbox error: pending %v done %v state %q run done %v, want a retry pending",
			p.RetryPending("a"), p.CellDone("a"), p.CellState("a"), p.Done())
	}
	if p.RetryPending("b") || !p.CellDone("b") || p.RetryPending("c") || !p.CellDone("c") {
		t.Fatal("a solver_error or a scored cell is pending a retry")
	}
	errored("a", 2, events.ClassInfra)
	if p.RetryPending("a") || !p.CellDone("a") || !p.Done() {
		t.Fatal("a's second retryable error with Retries 1 is not final")
	}
	rows, _ := p.Rows()
	for _, r := range rows {
		want := map[string]int{"a": 2}[r.CellID]
		if r.Attempts != want {
			t.Errorf("row %s attempts %d, want %d", r.CellID, r.Attempts, want)
		}
	}
	if rows[0].Outcome != "errored" || rows[0].ErrorClass != string(events.ClassInfra) || rows[0].Attempt != 2 {
		t.Errorf("row a %+v, want the last attempt's error", rows[0])
	}
}

// TestResumeReopensTheCellsItNames: a RunResumed reopens the cells it
// names, a cell errored by proctor's machinery included: the run is not
// done until their new attempts end (the aggregator closed the resumed
// epoch at once when the only cell run again had an error, and the new
// attempt's verdict came after RunFinished); a cell it does not name
// keeps its outcome.
func TestResumeReopensTheCellsItNames(t *testing.T) {
	const run = "r1"
	p := NewProjector(run)
	p.Apply(events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{}))
	p.Apply(events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 2}))
	for _, c := range []string{"a", "b"} {
		p.Apply(events.Must(events.CellPlanned, run, c, 1, "planner", events.CellPlannedData{Task: c, Harness: "h"}))
	}
	one := 1.0
	p.Apply(events.Must(events.Verdict, run, "a", 1, "verifier", events.VerdictData{Reward: &one}))
	p.Apply(events.Must(events.CellErrored, run, "b", 1, "verifier", events.CellErroredData{ErrorClass: string(events.ClassInfra), Error: "killed mid-verify"}))
	p.Apply(events.Must(events.RunFinished, run, "", 0, "cli", events.RunFinishedData{Status: "interrupted"}))
	p.Apply(events.Must(events.RunResumed, run, "", 0, "cli", events.RunResumedData{Epoch: 1, Cells: []string{"b"}}))
	if p.Done() || p.CellDone("b") || p.CellState("b") != StateRunning || !p.CellDone("a") || p.DoneCells() != 1 {
		t.Fatalf("after the resume: run done %v, b done %v (%s), a done %v, %d done cells; want b reopened",
			p.Done(), p.CellDone("b"), p.CellState("b"), p.CellDone("a"), p.DoneCells())
	}
	p.Apply(events.Must(events.CellSuperseded, run, "b", 2, "launcher", events.CellSupersededData{PreviousAttempt: 1}))
	p.Apply(events.Must(events.Verdict, run, "b", 2, "verifier", events.VerdictData{Reward: &one}))
	if !p.Done() || p.DoneCells() != 2 {
		t.Fatalf("after b's new verdict: done %v, %d done cells", p.Done(), p.DoneCells())
	}
	if r, _ := p.Row("b"); r.Outcome != "passed" || r.Attempt != 2 || r.Attempts != 2 {
		t.Errorf("row b %+v, want attempt 2 passed", r)
	}
}

package testutil

import (
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// ResumedRun is the log of a resumed two-cell run (tasks a and b, one
// harness), cut where its resumed epoch goes on: its process died after
// cell a passed, a later process ended it as interrupted (the RunFinished
// of epoch 0), and a resume reopened it in epoch 1 for cell b.
type ResumedRun struct {
	ID      string
	Harness string
	// Cells are a's and b's ids.
	Cells [2]string
	// Before is the log up to the RunResumed of epoch 1; After is cell
	// b's new attempt (it passes) and the RunFinished of epoch 1.
	Before, After []events.Envelope
	// Record is the run index record while epoch 1 runs; Final the one
	// after it.
	Record, Final bus.RunRecord
}

// NewResumedRun returns a ResumedRun of harness, whose cells write under
// outDir.
func NewResumedRun(harness, outDir string) ResumedRun {
	id := events.NewID()
	spec := events.RunSpec{TasksRoot: "/synthetic", All: true, Harnesses: []string{harness}, Models: []string{"m"},
		Repeats: 1, OutputDir: outDir}
	r := ResumedRun{ID: id, Harness: harness, Cells: [2]string{events.CellID("a", harness, "m", 1), events.CellID("b", harness, "m", 1)}}
	one := 1.0
	r.Before = []events.Envelope{
		events.Must(events.RunRequested, id, "", 0, "cli", events.RunRequestedData{Spec: spec, ProctorVersion: "test"}),
		events.Must(events.RunPlanned, id, "", 0, "planner", events.RunPlannedData{Cells: 2}),
	}
	for i, task := range []string{"a", "b"} {
		r.Before = append(r.Before, events.Must(events.CellPlanned, id, r.Cells[i], 1, "planner", events.CellPlannedData{
			Task: task, Harness: harness, Model: "m", Repeat: 1, OutputDir: outDir + "/" + task}))
	}
	r.Before = append(r.Before,
		events.Must(events.Started, id, r.Cells[0], 1, "launcher", events.StartedData{Harness: harness, Model: "m"}),
		events.Must(events.Verdict, id, r.Cells[0], 1, "verifier", events.VerdictData{Reward: &one}),
		events.Must(events.Started, id, r.Cells[1], 1, "launcher", events.StartedData{Harness: harness, Model: "m"}),
		events.Must(events.RunFinished, id, "", 0, "cli", events.RunFinishedData{Status: bus.StatusInterrupted}),
		events.Must(events.RunResumed, id, "", 0, "cli", events.RunResumedData{Epoch: 1, Cells: []string{r.Cells[1]}, Owner: "host pid 2"}),
	)
	r.After = []events.Envelope{
		events.Must(events.CellSuperseded, id, r.Cells[1], 2, "launcher", events.CellSupersededData{PreviousAttempt: 1, Reason: "run resumed or cell retried"}),
		events.Must(events.Started, id, r.Cells[1], 2, "launcher", events.StartedData{Harness: harness, Model: "m"}),
		events.Must(events.Verdict, id, r.Cells[1], 2, "verifier", events.VerdictData{Reward: &one}),
		events.Must(events.RunFinished, id, "", 0, "aggregator", events.RunFinishedData{Status: bus.StatusFinished, Epoch: 1}),
	}
	now := time.Now()
	r.Record = bus.RunRecord{ID: id, Status: bus.StatusRunning, Spec: spec, Cells: 2, Epoch: 1, Owner: "host pid 2",
		StartedAt: now.Add(-time.Hour).UTC().Format(time.RFC3339Nano)}
	r.Record.Renew(now, time.Hour)
	r.Final = r.Record
	r.Final.Status, r.Final.FinishedAt = bus.StatusFinished, now.UTC().Format(time.RFC3339Nano)
	r.Final.Counts = map[string]int{"passed": 2}
	return r
}

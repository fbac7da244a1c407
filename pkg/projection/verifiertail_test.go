package projection

import (
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestVerifierTailInRow: the Verdict's stdout_tail (the verifier's last
// output) is the row's verifier_tail, for a scored miss, a timeout and a
// verdict without a reward alike, so an artifact replayed from an older
// log says why its cells missed too; a cell no verifier ran for has none.
func TestVerifierTailInRow(t *testing.T) {
	const run = "01JVTAIL000000000000000000"
	add, evs := logBuilder(run, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"oracle"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: 4})
	zero := 0.0
	cells := map[string]*events.VerdictData{
		"failed":    {Reward: &zero, StdoutTail: "FAILED test_outputs.py::test_totals\n"},
		"timed-out": {Reward: &zero, TimedOut: true, StdoutTail: "pytest: command not found\n"},
		"no-reward": {Error: "no reward file", StdoutTail: "Traceback: KeyError\n"},
		"unsolved":  nil,
	}
	for task, v := range cells {
		id := events.CellID(task, "oracle", "m", 1)
		add(events.CellPlanned, id, events.CellPlannedData{Task: task, Harness: "oracle", Model: "m", Repeat: 1})
		add(events.Finished, id, events.FinishedData{Reason: "exit 0", StdoutTail: "solve output\n"})
		if v != nil {
			add(events.Verdict, id, *v)
		}
	}
	a := fold(run, evs()).Artifact("test")
	got := map[string]string{}
	for _, r := range a.Results {
		got[r.Task] = r.VerifierTail
		if r.StdoutTail != "solve output\n" {
			t.Errorf("%s: stdout_tail %q, want the solve's", r.Task, r.StdoutTail)
		}
	}
	for task, v := range cells {
		want := ""
		if v != nil {
			want = v.StdoutTail
		}
		if got[task] != want {
			t.Errorf("%s: verifier_tail %q, want %q", task, got[task], want)
		}
	}
}

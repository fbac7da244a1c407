package projection

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestLateEventsAfterTheVerdict: an attempt's Started and Finished
// republished after its Verdict (a failed async publish retried by
// Bus.Flush) still give the row its time span and solve timings, and the
// row equals the one of the same events in order; a late CellErrored
// changes nothing (the first terminal event decides) and a late duplicate
// Finished is folded once.
func TestLateEventsAfterTheVerdict(t *testing.T) {
	const run = "r1"
	at := time.Date(2025, 1, 15, 10, 0, 0, 0, time.UTC)
	ev := func(typ events.Type, cell string, sec int, data any) events.Envelope {
		e := events.Must(typ, run, cell, 1, "test", data)
		e.At = at.Add(time.Duration(sec) * time.Second)
		return e
	}
	one := 1.0
	planned := []events.Envelope{
		ev(events.RunRequested, "", 0, events.RunRequestedData{}),
		ev(events.RunPlanned, "", 0, events.RunPlannedData{Cells: 1}),
		ev(events.CellPlanned, "c", 0, events.CellPlannedData{Task: "t", Harness: "h"}),
	}
	started := ev(events.Started, "c", 1, events.StartedData{})
	usage := ev(events.Usage, "c", 3, events.UsageData{PromptTokens: events.Count(10), CompletionTokens: events.Count(5)})
	finished := ev(events.Finished, "c", 9, events.FinishedData{Reason: "exit 0", DurationSec: 8})
	verifyStarted := ev(events.VerifyStarted, "c", 10, events.VerifyStartedData{})
	verdict := ev(events.Verdict, "c", 12, events.VerdictData{Reward: &one, DurationSec: 2})
	errored := ev(events.CellErrored, "c", 13, events.CellErroredData{ErrorClass: string(events.ClassInfra), Error: "late"})

	project := func(log ...events.Envelope) (*Projector, []byte) {
		p := NewProjector(run)
		for _, e := range append(append([]events.Envelope{}, planned...), log...) {
			p.Apply(e)
		}
		rows, _ := p.Rows()
		if len(rows) != 1 {
			t.Fatalf("%d rows, want 1", len(rows))
		}
		return p, mustJSON(t, rows[0])
	}
	_, inOrder := project(started, usage, finished, verifyStarted, verdict)
	p, late := project(usage, verifyStarted, verdict, started, errored, finished, finished)
	if string(late) != string(inOrder) {
		t.Fatalf("row with Started and Finished after the Verdict:\n%s\nwant the in-order row:\n%s", late, inOrder)
	}
	rows, _ := p.Rows()
	r := rows[0]
	if r.Outcome != "passed" || r.ElapsedSec != 11 || r.Metrics.SolveSec == nil || *r.Metrics.SolveSec != 8 {
		t.Fatalf("row %+v: want passed, elapsed 11 s (Started to Verdict), solve 8 s", r)
	}
	if !p.Done() || p.Counts()["passed"] != 1 {
		t.Fatalf("run done %v counts %v, want one passed cell", p.Done(), p.Counts())
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

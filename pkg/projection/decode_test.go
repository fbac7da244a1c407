package projection

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// malformed returns an event of the golden run whose data has the right
// JSON shape but a field of the wrong type, as a buggy producer would
// write it.
func malformed(t events.Type, cellID, data string) events.Envelope {
	e := events.Must(t, goldenRun, cellID, 1, "launcher", nil)
	e.Data = json.RawMessage(data)
	return e
}

// TestDecodeErrorsCounted injects two malformed events into the golden log
// in a real JetStream stream, both for the cell that had no verdict: a
// Usage event (its own telemetry is lost, the cell's other Usage stands)
// and a Verdict (the row is errored, class infra, naming the event, never
// a guessed outcome). Both are counted per type in run.decode_errors, which the
// schema accepts, and the report warns about them; the golden log alone
// has no decode_errors at all.
func TestDecodeErrorsCounted(t *testing.T) {
	evs := readLog(t, "testdata/golden.events.jsonl")
	if p := fold(goldenRun, evs); p.DecodeErrors() != nil {
		t.Fatalf("the golden log has decode errors: %+v", p.DecodeErrors())
	}
	usage := malformed(events.Usage, "bad-reward/agent:demo/m1/1", `{"prompt_tokens":"many"}`)
	verdict := malformed(events.Verdict, "bad-reward/agent:demo/m1/1", `{"reward":"high","duration_sec":1}`)
	last := len(evs) - 1
	if evs[last].Type != events.RunFinished {
		t.Fatalf("the golden log ends with %s", evs[last].Type)
	}
	bad := append(append(append([]events.Envelope{}, evs[:last]...), usage, verdict), evs[last])

	b, _ := bustest.Bus(t)
	ctx := context.Background()
	if err := b.PublishAll(ctx, bad...); err != nil {
		t.Fatal(err)
	}
	p, err := Project(ctx, b, goldenRun)
	if err != nil {
		t.Fatal(err)
	}
	d := p.DecodeErrors()
	if d == nil || d.Count != 2 || d.ByType["Usage"] != 1 || d.ByType["Verdict"] != 1 || len(d.ByType) != 2 ||
		!strings.Contains(d.First, "Usage") || !strings.Contains(d.First, usage.ID) {
		t.Fatalf("decode errors %+v", d)
	}
	js, md, err := Render(p, "test") // Render validates against task_runs.v1
	if err != nil {
		t.Fatal(err)
	}
	a, err := artifact.Unmarshal("decode", js)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Run.DecodeErrors; got == nil || got.Count != 2 || got.First != d.First {
		t.Errorf("run.decode_errors %+v", got)
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.CellID] = r
	}
	r := rows["bad-reward/agent:demo/m1/1"]
	if r.Outcome != artifact.OutcomeErrored || r.ErrorClass != artifact.ErrorInfra || !strings.Contains(r.Error, verdict.ID) ||
		!strings.Contains(r.Error, "Verdict") || r.Reward != nil {
		t.Errorf("cell with the malformed verdict: %s %s %q reward %v", r.Outcome, r.ErrorClass, r.Error, r.Reward)
	}
	want, _ := fold(goldenRun, evs).Row("bad-reward/agent:demo/m1/1")
	if r.Metrics.PromptTokens == nil || want.Metrics.PromptTokens == nil || *r.Metrics.PromptTokens != *want.Metrics.PromptTokens {
		t.Errorf("prompt tokens %v, want the well-formed Usage event's %v", r.Metrics.PromptTokens, want.Metrics.PromptTokens)
	}
	if !bytes.Contains(md, []byte("**Warning: 2 events did not decode** (Usage 1, Verdict 1)")) {
		t.Errorf("report has no decode warning:\n%s", md)
	}
	if good, _, _ := Render(fold(goldenRun, evs), "test"); bytes.Contains(good, []byte("decode_errors")) {
		t.Error("an artifact without decode errors names decode_errors")
	}
}

// TestMalformedRunPlannedFailsTheRun: a RunPlanned whose data does not
// decode has no cell count to close the run with; the run is failed
// with the decode error, not closed as complete with zero cells.
func TestMalformedRunPlannedFailsTheRun(t *testing.T) {
	p := NewProjector(goldenRun)
	e := malformed(events.RunPlanned, "", `{"cells":"twelve"}`)
	e.Attempt = 0
	p.Apply(e)
	if !p.Done() || !strings.Contains(p.PlanError(), e.ID) || p.DecodeErrors().ByType["RunPlanned"] != 1 {
		t.Errorf("done %v, plan error %q, decode errors %+v", p.Done(), p.PlanError(), p.DecodeErrors())
	}
}

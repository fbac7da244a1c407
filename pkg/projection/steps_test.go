package projection

import (
	"bytes"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestStepsProjected checks a multi-step cell's step events become its
// steps[] (outcomes, rewards, timings, skipped steps), that the artifact
// validates and the same log renders the same bytes, and that a
// single-step cell has no steps[].
func TestStepsProjected(t *testing.T) {
	const run = "01JSTEPS000000000000000000"
	add, evs := logBuilder(run, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	f := func(x float64) *float64 { return &x }
	rc := 0
	ms, one := "ms/oracle/m/1", "one/oracle/m/1"
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"oracle"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: 2})
	add(events.CellPlanned, ms, events.CellPlannedData{Task: "ms", Harness: "oracle", Model: "m", Repeat: 1})
	add(events.CellPlanned, one, events.CellPlannedData{Task: "one", Harness: "oracle", Model: "m", Repeat: 1})
	add(events.StepStarted, ms, events.StepStartedData{Index: 0, Of: 3, Name: "a"})
	add(events.StepVerdict, ms, events.StepVerdictData{Index: 0, Name: "a",
		Solve:   &events.FinishedData{Reason: "exit 0", DurationSec: 1.5},
		Verdict: &events.VerdictData{Reward: f(0.5), Rewards: map[string]float64{"reward": 0.5}, ReturnCode: &rc, DurationSec: 0.25},
		Stop:    "step a: min_reward reward = 1: the step's reward is 0.5"})
	add(events.StepVerdict, ms, events.StepVerdictData{Index: 1, Name: "b", Skipped: true, SkipReason: "step a: min_reward reward = 1"})
	add(events.StepVerdict, ms, events.StepVerdictData{Index: 2, Name: "c", Skipped: true, SkipReason: "step a: min_reward reward = 1"})
	add(events.Finished, ms, events.FinishedData{Reason: "exit 0", DurationSec: 1.5})
	add(events.Verdict, ms, events.VerdictData{Reward: f(0.5), Rewards: map[string]float64{"reward": 0.5}})
	add(events.Finished, one, events.FinishedData{Reason: "exit 0"})
	add(events.Verdict, one, events.VerdictData{Reward: f(1), Rewards: map[string]float64{"reward": 1}})
	js, _, err := Render(fold(run, evs()), "test")
	if err != nil {
		t.Fatal(err)
	}
	again, _, _ := Render(fold(run, evs()), "test")
	if !bytes.Equal(js, again) {
		t.Fatal("the same log rendered different bytes")
	}
	a, err := artifact.Unmarshal("steps", js)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	r := rows["ms"]
	if r.Outcome != artifact.OutcomePartial || len(r.Steps) != 3 {
		t.Fatalf("ms: %s, %d steps", r.Outcome, len(r.Steps))
	}
	s0, s1 := r.Steps[0], r.Steps[1]
	if s0.Outcome != artifact.OutcomePartial || *s0.Reward != 0.5 || *s0.SolveSec != 1.5 || *s0.VerifySec != 0.25 || *s0.ElapsedSec != 1 || s0.Stop == "" {
		t.Errorf("step a: %+v", s0)
	}
	if s1.Outcome != artifact.OutcomeSkipped || s1.Reward != nil || s1.Error == "" || s1.SolveSec != nil || r.Steps[2].Name != "c" {
		t.Errorf("step b: %+v", s1)
	}
	if len(rows["one"].Steps) != 0 || bytes.Contains(js, []byte(`"steps": null`)) {
		t.Errorf("a single-step cell has steps %v", rows["one"].Steps)
	}
}

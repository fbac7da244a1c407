package projection

import (
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestAgentClaimFromMessages: a row's agent_claim is its agent's final
// message (the last response, else the last assistant message; a user
// message is not the agent's), judged by artifact.ClaimsSuccess unless the
// agent reported a failed end (a Claude result subtype other than
// success); a claim of success on a cell scored below 1 is counted per
// harness, and the row re-renders from the artifact alone. The last is by
// the events' times, not their order in the log.
func TestAgentClaimFromMessages(t *testing.T) {
	const run = "01JCLAIM000000000000000000"
	add, evs := logBuilder(run, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	msg := func(role, text string) events.MessageData { return events.MessageData{Role: role, Text: text} }
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"agent:a"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: 6})
	cell := func(task string, reward float64, reported map[string]any, msgs ...events.MessageData) {
		id := events.CellID(task, "agent:a", "m", 1)
		add(events.CellPlanned, id, events.CellPlannedData{Task: task, Harness: "agent:a", Model: "m", Repeat: 1})
		for _, m := range msgs {
			add(events.Message, id, m)
		}
		add(events.Finished, id, events.FinishedData{Reason: "exit 0", AgentReported: reported})
		add(events.Verdict, id, events.VerdictData{Reward: &reward})
	}
	cell("response-wins", 0, nil, msg("assistant", "All tests pass."), msg("response", "I could not solve it."), msg("assistant", "Done."))
	cell("claude-max-turns", 0, map[string]any{"subtype": "error_max_turns", "is_error": true}, msg("response", "All tests pass."))
	cell("overclaim", 0, map[string]any{"subtype": "success", "is_error": false}, msg("assistant", "Working."), msg("response", "Fixed.\n\nAll tests pass."))
	cell("honest-pass", 1, nil, msg("", "The task is solved."))
	cell("user-only", 0, nil, msg("user", "Is it done?"), msg("tool", "done"))
	// A message whose publish was retried after a server's loss is in the
	// log after later ones: the claim is the last by the agent's time.
	late := events.CellID("republished", "agent:a", "m", 1)
	add(events.CellPlanned, late, events.CellPlannedData{Task: "republished", Harness: "agent:a", Model: "m", Repeat: 1})
	add(events.Message, late, msg("assistant", "Step 1."))
	stepOne := evs()[len(evs())-1].At
	add(events.Message, late, msg("assistant", "All done."))
	add(events.Message, late, msg("assistant", "Step 2."))
	evs()[len(evs())-1].At = stepOne.Add(time.Millisecond) // read before "All done.", stored after it
	add(events.Finished, late, events.FinishedData{Reason: "exit 0"})
	one := 1.0
	add(events.Verdict, late, events.VerdictData{Reward: &one})

	a := fold(run, evs()).Artifact("test")
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	check := func(task string, text string, claims, over bool) {
		t.Helper()
		r := rows[task]
		switch {
		case text == "" && r.AgentClaim != nil:
			t.Errorf("%s: claim %+v, want none", task, r.AgentClaim)
		case text == "":
		case r.AgentClaim == nil || r.AgentClaim.Text != text || r.AgentClaim.ClaimedSuccess != claims:
			t.Errorf("%s: claim %+v, want %q claimed %v", task, r.AgentClaim, text, claims)
		}
		if r.Overclaimed() != over {
			t.Errorf("%s: overclaimed %v, want %v", task, r.Overclaimed(), over)
		}
	}
	check("response-wins", "I could not solve it.", false, false)
	check("claude-max-turns", "All tests pass.", false, false)
	check("overclaim", "Fixed.\n\nAll tests pass.", true, true)
	check("honest-pass", "The task is solved.", true, false)
	check("user-only", "", false, false)
	check("republished", "All done.", true, false)
	if n := a.Summary.PerHarness["agent:a"].ClaimedButFailed; n != 1 {
		t.Errorf("claimed_but_failed %d, want 1", n)
	}
	js, md, err := Render(fold(run, evs()), "test")
	if err != nil {
		t.Fatal(err)
	}
	back, err := artifact.Unmarshal("projected", js)
	if err != nil {
		t.Fatal(err)
	}
	var again strings.Builder
	if err := artifact.WriteReport(&again, back); err != nil {
		t.Fatal(err)
	}
	if again.String() != string(md) {
		t.Error("the report rendered from the artifact file differs from the projection's")
	}
	for _, want := range []string{"1 ⚠️ claimed success but scored below 1", "| ⚠️ | `overclaim` |", "### `overclaim` · `agent:a` · `m` · repeat 1 · ⚠️ claimed success"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

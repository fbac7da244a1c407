package projection

import (
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestPartialUsageInRowAndReport: a Usage marked partial (a Claude Code
// stream without a result event) is summed like any other, and the row
// says the counts are partial and why (metrics.usage_partial,
// usage_partial_reason), as does the report's cell section; a cell with
// only complete usage says nothing of it.
func TestPartialUsageInRowAndReport(t *testing.T) {
	const run = "01JPARTIAL0000000000000000"
	add, evs := logBuilder(run, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"docker-claude"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: 2})
	why := "no result event (exit 137 without a result event): tokens summed from 2 assistant message(s) once each"
	for _, cell := range []string{"a/docker-claude/m/1", "b/docker-claude/m/1"} {
		add(events.CellPlanned, cell, events.CellPlannedData{Task: cell[:1], Harness: "docker-claude", Model: "m", Repeat: 1})
		add(events.Usage, cell, events.UsageData{Model: "m"})
		add(events.Usage, cell, events.UsageData{Model: "m"})
		u := events.UsageData{Model: "m", PromptTokens: events.Count(300), CompletionTokens: events.Count(2), Calls: events.Count(0)}
		if cell[0] == 'a' {
			u.Partial = why
		}
		add(events.Usage, cell, u)
		add(events.Finished, cell, events.FinishedData{Reason: "exit 137 without a result event", ExitCode: 137})
		add(events.Verdict, cell, events.VerdictData{Reward: ptr(1.0)})
	}
	a := fold(run, evs()).Artifact("test")
	if _, err := artifact.Marshal(a); err != nil {
		t.Fatal(err)
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	m := rows["a"].Metrics
	if !m.UsagePartial || m.UsagePartialReason != why || m.PromptTokens == nil || *m.PromptTokens != 300 || m.NCalls == nil || *m.NCalls != 2 {
		t.Errorf("partial row: usage_partial %v reason %q prompt %v calls %v", m.UsagePartial, m.UsagePartialReason, m.PromptTokens, m.NCalls)
	}
	if b := rows["b"].Metrics; b.UsagePartial || b.UsagePartialReason != "" {
		t.Errorf("complete row marked partial: %+v", b)
	}
	var rep strings.Builder
	if err := artifact.WriteReport(&rep, a); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.String(), "Usage partial (tokens are a lower bound):") || !strings.Contains(rep.String(), why) ||
		strings.Count(rep.String(), "Usage partial") != 1 {
		t.Errorf("report:\n%s", rep.String())
	}
}

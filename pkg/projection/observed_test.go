package projection

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/providers"
)

// call is a ModelCall priced as the launcher prices it.
func call(model string, status int, in, out, cr, cw *int64) events.ModelCallData {
	d := events.ModelCallData{Provider: "anthropic", Host: "api.anthropic.com", Method: "POST", Path: "/v1/messages",
		API: "anthropic.messages", Model: model, Status: status, InputTokens: in, OutputTokens: out, CacheReadTokens: cr, CacheWriteTokens: cw}
	harness.Price(providers.Prices(), &d)
	return d
}

// TestUsageObserved folds the model calls of four cells behind a
// gateway: sums and cost (claude-sonnet-4-5 at the table's price), a cell
// whose agent over-reports (flagged) and one whose report matches within
// 1 % (not flagged), a call of a model the table does not price (cost
// null with the reason), a count_tokens call and an error answer (no
// usage, no cost), and a cell whose gateway saw no call (zeros, cost 0).
// The arm's pass-rate table uses the observed cost only when every cell
// has one.
func TestUsageObserved(t *testing.T) {
	const run = "01JOBSERVED000000000000000"
	add, evs := logBuilder(run, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	n := events.Count
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"docker-claude"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: 4})
	cells := map[string][]any{
		// Two calls; the agent summed a usage repeated per content block.
		"t1/docker-claude/m/1": {
			call("claude-sonnet-4-5-20250929", 200, n(1000), n(100), n(4000), n(200)),
			call("claude-sonnet-4-5-20250929", 200, n(10), n(50), n(5000), n(0)),
			events.UsageData{PromptTokens: n(2020), CompletionTokens: n(300), CacheReadTokens: n(18000), CacheWriteTokens: n(400)},
			events.ModelCallData{Provider: "anthropic", Method: "POST", Path: "/v1/messages/count_tokens", Status: 200, PriceTable: providers.Prices().Date},
			call("claude-sonnet-4-5", 529, nil, nil, nil, nil),
		},
		// Reported within 1 % of the observed.
		"t2/docker-claude/m/1": {
			call("claude-haiku-4-5", 200, n(1000), n(0), n(0), n(0)),
			events.UsageData{PromptTokens: n(1005), CompletionTokens: n(0)},
		},
		// A model the table does not price.
		"t3/docker-claude/m/1": {
			call("claude-sonnet-4-5", 200, n(100), n(10), n(0), n(0)),
			call("local-llama", 200, n(100), n(10), n(0), n(0)),
		},
		// A gateway that saw nothing.
		"t4/docker-claude/m/1": {},
	}
	for cell, evsOf := range cells {
		add(events.CellPlanned, cell, events.CellPlannedData{Task: cell[:2], Harness: "docker-claude", Model: "m", Repeat: 1})
		add(events.SandboxStarted, cell, events.SandboxStartedData{State: map[string]string{"proxy": "10.0.0.1:3128", "gateway_ca": "/agent-output/ca.crt"}})
		for _, d := range evsOf {
			switch d := d.(type) {
			case events.ModelCallData:
				add(events.ModelCall, cell, d)
			case events.UsageData:
				add(events.Usage, cell, d)
			}
		}
		add(events.Finished, cell, events.FinishedData{Reason: "exit 0"})
		add(events.Verdict, cell, events.VerdictData{Reward: ptr(1.0)})
	}
	a := fold(run, evs()).Artifact("test")
	if _, err := artifact.Marshal(a); err != nil {
		t.Fatal(err)
	}
	got := map[string]*artifact.UsageObserved{}
	for _, r := range a.Results {
		got[r.Task] = r.Metrics.UsageObserved
	}
	u := got["t1"]
	// (1010 × 3 + 150 × 15 + 9000 × 0.30 + 200 × 3.75) / 1e6
	if u == nil || u.Requests != 4 || u.CallsWithoutUsage != 2 || u.InputTokens != 1010 || u.OutputTokens != 150 ||
		u.CacheReadTokens != 9000 || u.CacheWriteTokens != 200 || u.CostUSD == nil || *u.CostUSD != 0.00873 ||
		u.PriceTable != providers.Prices().Date || u.ReportedDiffers == nil || !*u.ReportedDiffers ||
		strings.Join(u.Models, ",") != "claude-sonnet-4-5,claude-sonnet-4-5-20250929" {
		t.Errorf("t1: %+v", u)
	}
	if u := got["t2"]; u == nil || u.ReportedDiffers == nil || *u.ReportedDiffers || *u.CostUSD != 0.001 {
		t.Errorf("t2: %+v", u)
	}
	if u := got["t3"]; u == nil || u.CostUSD != nil || !strings.Contains(u.CostNullReason, `"local-llama" is not in the price table`) || u.InputTokens != 200 {
		t.Errorf("t3: %+v", u)
	}
	if u := got["t4"]; u == nil || u.Requests != 0 || u.CostUSD == nil || *u.CostUSD != 0 || u.ReportedDiffers != nil {
		t.Errorf("t4: %+v", u)
	}
	// One cell without an observed cost: the arm falls back to the
	// agent's own.
	if c := a.Summary.PerHarness["docker-claude"].Cost; c.Source != "" && c.Source != "reported" {
		t.Errorf("cost %+v", c)
	}
	var rows []artifact.Result
	for _, r := range a.Results {
		if r.Task != "t3" {
			rows = append(rows, r)
		}
	}
	if c := artifact.CostOf(rows); c.Source != "observed" || c.TotalCostUSD == nil || math.Abs(*c.TotalCostUSD-0.00973) > 1e-12 || c.CostPerPassUSD == nil {
		t.Errorf("observed cost of every cell: %+v", c)
	}
}

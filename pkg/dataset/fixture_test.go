package dataset

import (
	"path/filepath"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }
func intp(v int) *int        { return &v }
func boolp(v bool) *bool     { return &v }

// fixtureRun is the run of fixtureResults.
var fixtureRun = artifact.RunInfo{
	ID:              "01JDATASETFIXTURE000000000",
	TasksRoot:       "/tasks",
	Harnesses:       []string{"agent:demo", "oracle"},
	Models:          []string{"default", "m1"},
	Repeats:         1,
	StartedAt:       "2026-01-02T03:04:05Z",
	FinishedAt:      "2026-01-02T03:09:05Z",
	ProctorVersion:  "0.0.0-test",
	BaselineHarness: "",
}

// fixtureResults covers the shapes the export must keep apart: a pass, a
// partial reward of 0.5, a fail with reward 0.0 (not null), an errored
// cell with a null reward and no telemetry at all, a cell with tokens and
// cost (and an explicit 0 token count and a 0.0 cost), a solver timeout
// with egress counts, and task metadata with tags, empty tags, a numeric
// difficulty and none at all.
func fixtureResults() []artifact.Result {
	return []artifact.Result{
		{ // 0: passed
			CellID: "hello/oracle/default/0", Task: "hello", Harness: "oracle", Model: "default",
			Attempt: 1, Outcome: artifact.OutcomePassed, Passed: true,
			Reward: f64(1), Rewards: map[string]float64{"reward": 1}, ReturnCode: intp(0),
			VerifierReturnCode: intp(0), ElapsedSec: 4.125, TaskRevision: "sha256:aaa",
			OutputDir: "/out/hello/oracle/default/0", StdoutTail: "done <ok> & \"quoted\"\n",
			TaskMeta: map[string]any{"difficulty": "easy", "category": "basics", "tags": []any{"shell", "files"}, "author": "x"},
			Metrics: artifact.Metrics{
				SolveSec: f64(1.5), VerifySec: f64(0.75), BuildSec: f64(0),
			},
		},
		{ // 1: partial reward, tokens, cost, tool calls, operations
			CellID: "hello/agent:demo/m1/0", Task: "hello", Harness: "agent:demo", Model: "m1",
			Attempt: 2, Outcome: artifact.OutcomePartial, Passed: false,
			Reward: f64(0.5), Rewards: map[string]float64{"reward": 0.5, "style": 0.25}, ReturnCode: intp(0),
			ElapsedSec: 12.5, TaskRevision: "sha256:aaa",
			Steps: []artifact.StepResult{
				{Index: 0, Name: "one", Outcome: artifact.OutcomePartial, Reward: f64(0.5), Rewards: map[string]float64{"reward": 0.5, "style": 0.25},
					ReturnCode: intp(0), VerifierReturnCode: intp(0), SolveSec: f64(1.5), VerifySec: f64(0.25), ElapsedSec: f64(2), Stop: "step one: min_reward reward = 1: the step's reward is 0.5"},
				{Index: 1, Name: "two", Outcome: artifact.OutcomeSkipped, Error: "step one: min_reward reward = 1: the step's reward is 0.5"},
			},
			TaskMeta: map[string]any{"difficulty": "easy", "category": "basics", "tags": []any{"shell", "files"}},
			Metrics: artifact.Metrics{
				CostUSD: f64(0.0123), PromptTokens: i64(1200), CompletionTokens: i64(340), TotalTokens: i64(1540),
				CacheReadTokens: i64(0), CacheWriteTokens: i64(64), NCalls: i64(3),
				ToolCalls:      map[string]int{"bash": 2, "edit": 1},
				OperationCount: 2, OperationsByType: map[string]int{"search": 2},
				Egress:        &artifact.EgressCounts{Allowed: 4, Denied: 1, Errors: 0, AllowedHosts: []string{"pypi.org:443"}, DeniedHosts: []string{"example.com:443"}, ErrorHosts: []string{}, DeniedEntries: []artifact.DeniedEntry{{Target: "example.com:443", Reason: "not in allowlist", Count: 1}}},
				AgentReported: map[string]any{"inputTokens": float64(1200), "provider": "p"},
				UsageObserved: &artifact.UsageObserved{Requests: 3, CallsWithoutUsage: 1, InputTokens: 1000, OutputTokens: 340,
					CacheReadTokens: 0, CacheWriteTokens: 64, CostUSD: f64(0.0081), PriceTable: "2026-12-02", Models: []string{"claude-sonnet-4-5"},
					ReportedDiffers: boolp(true)},
			},
			Operations: []map[string]any{
				{"op_type": "search", "fields": map[string]any{"q": "a<b", "n": float64(1)}},
				{"op_type": "search", "fields": map[string]any{"q": "c"}},
			},
		},
		{ // 2: failed with reward 0.0; empty tags, numeric difficulty
			CellID: "math/oracle/default/0", Task: "math", Harness: "oracle", Model: "default",
			Attempt: 1, Outcome: artifact.OutcomeFailed, Passed: false,
			Reward: f64(0), Rewards: map[string]float64{"reward": 0}, ReturnCode: intp(1), VerifierReturnCode: intp(1),
			ElapsedSec: 2, TaskRevision: "sha256:bbb",
			TaskMeta: map[string]any{"difficulty": float64(3), "tags": []any{}},
			Metrics:  artifact.Metrics{ToolCalls: map[string]int{}},
		},
		{ // 3: errored: no verdict, no telemetry, no task metadata
			CellID: "broken/agent:demo/m1/0", Task: "broken", Harness: "agent:demo", Model: "m1",
			Attempt: 1, Outcome: artifact.OutcomeErrored, ErrorClass: artifact.ErrorBuild, Passed: false,
			Reward: nil, ReturnCode: nil, ElapsedSec: 0, Error: "docker build failed: exit 1",
			Metrics: artifact.Metrics{Error: true},
		},
		{ // 4: solver timeout with a priced zero-cost run
			CellID: "math/agent:demo/m1/0", Task: "math", Harness: "agent:demo", Model: "m1",
			Attempt: 1, Outcome: artifact.OutcomeSolverTimeout, Passed: false,
			Reward: f64(0), Rewards: map[string]float64{"reward": 0}, ReturnCode: intp(124),
			ElapsedSec: 600.25, TaskRevision: "sha256:bbb",
			TaskMeta: map[string]any{"difficulty": float64(3), "tags": []any{}},
			Metrics:  artifact.Metrics{CostUSD: f64(0), SolverTimeout: true, NCalls: i64(0)},
		},
	}
}

// fixtureArtifact builds the fixture, writes it with artifact.WriteFile
// (which validates it against task_runs.v1) and reads it back, so the
// export sees exactly what a user's file holds.
func fixtureArtifact(t *testing.T) *artifact.Artifact {
	t.Helper()
	a := artifact.Build(fixtureRun, fixtureResults(), artifact.BuildOptions{})
	path := filepath.Join(t.TempDir(), "task_runs.json")
	if err := artifact.WriteFile(path, a); err != nil {
		t.Fatalf("fixture does not validate: %v", err)
	}
	got, err := artifact.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// rowByCell indexes decoded rows by their cell_id column.
func rowByCell(t *testing.T, rows []map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, r := range rows {
		id, ok := r["cell_id"].(string)
		if !ok {
			t.Fatalf("row without a string cell_id: %v", r)
		}
		out[id] = r
	}
	return out
}

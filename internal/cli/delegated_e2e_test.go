package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/task"
)

// delegatedFakes puts pkg/harness's fake harbor, bench and docker first on
// PATH, with per-agent, per-task cases from lines "<agent> <task> <case>".
// The fake docker sees only the test's own containers (FAKE_DOCKER_SCOPE):
// the BenchFlow preflight refuses to run beside any running
// benchflow.owned container, and pkg/harness's tests, run at the same
// time on the same engine, start such containers as another sweep.
func delegatedFakes(t *testing.T, cases string) {
	t.Helper()
	dir, err := filepath.Abs("../../pkg/harness/testdata/fakes")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_DOCKER_SCOPE", "proctor.test="+t.Name()+"-"+strconv.Itoa(os.Getpid()))
	f := filepath.Join(t.TempDir(), "cases")
	if err := os.WriteFile(f, []byte(cases), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_CASE_FILE", f)
}

// TestDelegatedArmsEndToEnd runs Harbor- and BenchFlow-backed arms through
// the real pipeline (planner, launcher, event log, projection) with the
// fake tools: their rows carry verdicts, usage where the tool reported it
// and none where it did not, errored trials are errored (never a 0), the
// comparison and McNemar table pair them like any arm, the oracle row is a
// setup check outside comparisons and Holm's family, and the dataset
// export holds every row.
func TestDelegatedArmsEndToEnd(t *testing.T) {
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root := writeTasks(t, 4)
	delegatedFakes(t, strings.Join([]string{
		"codex task-a pass", "codex task-b fail", "codex task-c fail", "codex task-d errored",
		"claude-agent-acp task-a pass", "claude-agent-acp task-b pass", "claude-agent-acp task-c partial", "claude-agent-acp task-d nousage",
		"oracle task-a pass", "oracle task-b pass", "oracle task-c pass", "oracle task-d pass",
	}, "\n")+"\n")
	md := filepath.Join(t.TempDir(), "report.md")
	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all",
		"--harnesses", "codex", "--harnesses", "benchflow:claude-agent-acp", "--harnesses", "terminal-bench:oracle",
		"--baseline-harness", "codex", "--out-md", md)
	rows := byCell(a)
	type want struct {
		outcome string
		cost    *float64
	}
	cost := func(v float64) *float64 { return &v }
	for cell, w := range map[string]want{
		"task-a codex": {"passed", cost(0.0123)}, "task-b codex": {"failed", cost(0.0123)}, "task-d codex": {"errored", nil},
		"task-a benchflow:claude-agent-acp": {"passed", cost(0.004)}, "task-c benchflow:claude-agent-acp": {"partial", cost(0.004)},
		"task-d benchflow:claude-agent-acp": {"passed", nil}, "task-a terminal-bench:oracle": {"passed", cost(0.0123)},
	} {
		r, ok := rows[cell]
		if !ok {
			t.Fatalf("no row %s", cell)
		}
		if string(r.Outcome) != w.outcome {
			t.Errorf("%s: outcome %s (%s), want %s", cell, r.Outcome, r.Error, w.outcome)
		}
		switch got := r.Metrics.CostUSD; {
		case w.cost == nil && got != nil:
			t.Errorf("%s: cost %v, want null (not reported)", cell, *got)
		case w.cost != nil && (got == nil || *got != *w.cost):
			t.Errorf("%s: cost %v, want %v", cell, got, *w.cost)
		}
	}
	if r := rows["task-d codex"]; r.ErrorClass != "solver_error" || !strings.Contains(r.Error, "RuntimeError: Docker compose up failed") || r.Metrics.PromptTokens != nil {
		t.Errorf("errored trial row: class %q, error %q, prompt tokens %v", r.ErrorClass, r.Error, r.Metrics.PromptTokens)
	}
	if r := rows["task-a codex"]; r.Metrics.PromptTokens == nil || *r.Metrics.PromptTokens != 1200 {
		t.Errorf("codex usage: %+v", r.Metrics.PromptTokens)
	}
	if _, ok := a.Summary.Comparisons["terminal-bench:oracle"]; ok {
		t.Error("the oracle row is a setup check, yet compared")
	}
	c, ok := a.Summary.Comparisons["benchflow:claude-agent-acp"]
	if !ok {
		t.Fatalf("no comparison of the BenchFlow arm: %v", a.Summary.Comparisons)
	}
	m := c.McNemar
	if m.NGained != 1 || m.NLost != 0 || m.NBothPassed != 1 || m.NBothFailed != 1 || m.CorrectionFamilySize != 1 {
		t.Errorf("McNemar %+v, want gained 1, both passed 1, both failed 1 (task-d excluded), family 1", m)
	}
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "`benchflow:claude-agent-acp` | `codex`") {
		t.Errorf("the report's McNemar table lacks the BenchFlow arm:\n%s", report)
	}
	ds := filepath.Join(t.TempDir(), "ds")
	mustProctor(t, "dataset", "export", "--input", filepath.Join(out, "a.json"), "--format", "jsonl", "--out-dir", ds)
	files, _ := filepath.Glob(filepath.Join(ds, "*.jsonl"))
	var all []byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		all = append(all, b...)
	}
	if n := bytes.Count(all, []byte("\n")); n != 12 || !bytes.Contains(all, []byte(`"benchflow:claude-agent-acp"`)) {
		t.Errorf("dataset: %d rows in %v, want 12 with the BenchFlow arm", n, files)
	}
}

// TestDelegatedDryRunAndPreflight: --dry-run shows the Harbor refusals and
// skips the BenchFlow pre-flight; a real run without bench stops before
// anything starts with one message.
func TestDelegatedDryRunAndPreflight(t *testing.T) {
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root := writeTasks(t, 2)
	if err := os.Remove(filepath.Join(root, "task-b", "instruction.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "task-a", "tests", "test.sh"), []byte("#!/bin/bash\nbash /verifier/check.sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "/nonexistent") // no bench, no docker
	var stdout, stderr bytes.Buffer
	if code := mainT(t, []string{"tasks", "harnesses"}, &stdout, &stderr); code != 0 {
		t.Fatalf("tasks harnesses: exit %d", code)
	}
	for _, h := range []string{"codex ", "claude-code ", "terminal-bench:<agent> ", "benchflow:<agent> ", "benchflow-skill:<agent>[:<path>] ", "benchflow-selfgen:<agent>[:<dir>] "} {
		if !strings.Contains(stdout.String(), "\n"+h) || strings.Contains(stdout.String(), h+"(not available") {
			t.Errorf("tasks harnesses does not list %q as available:\n%s", h, stdout.String())
		}
	}
	stdout.Reset()
	args := []string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "codex", "--harnesses", "benchflow:x", "--output-dir", t.TempDir()}
	if code := mainT(t, append(args, "--dry-run"), &stdout, &stderr); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, stderr.String())
	}
	for _, w := range []string{
		"task-a/codex/default/1\terrored (refused): tests/test.sh reads /verifier",
		"task-b/codex/default/1\terrored (refused): Harbor needs instruction.md",
		"task-a/benchflow:x/default/1\trun",
	} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("dry run lacks %q:\n%s", w, stdout.String())
		}
	}
	stdout.Reset()
	stderr.Reset()
	if code := mainT(t, args, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "bench --help") {
		t.Errorf("a run without bench: exit %d, stderr %q", code, stderr.String())
	}
}

// TestBenchflowRowsEndToEnd: BenchFlow's timeouts and retries land in the
// row as the rules say, through the real pipeline: an agent timeout after
// an attempt is a solver timeout with reward 0 (the verifier's 1 kept as
// metrics.agent_reported.reward_after_timeout), a verifier timeout is
// outcome verifier_timeout with metrics.verifier_timeout, a thought alone
// is an attempt (scored), the latest of two attempts is scored.
func TestBenchflowRowsEndToEnd(t *testing.T) {
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root := writeTasks(t, 4)
	delegatedFakes(t, "claude-agent-acp task-a agent-timeout\nclaude-agent-acp task-b verifier-timeout\nclaude-agent-acp task-c thought\nclaude-agent-acp task-d retried\n")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "benchflow:claude-agent-acp")
	rows := byCell(a)
	r := rows["task-a benchflow:claude-agent-acp"]
	if r.Outcome != "solver_timeout" || r.Reward == nil || *r.Reward != 0 || !r.Metrics.SolverTimeout || r.Metrics.AgentReported["reward_after_timeout"] != 1.0 || r.Metrics.AgentReported["partial_trajectory"] != true {
		t.Errorf("agent timeout row: outcome %s reward %v metrics %+v", r.Outcome, r.Reward, r.Metrics)
	}
	r = rows["task-b benchflow:claude-agent-acp"]
	if r.Outcome != "verifier_timeout" || r.Reward == nil || *r.Reward != 0 || !r.Metrics.VerifierTimeout || r.Metrics.AgentReported["verifier_error_category"] != "verifier_timeout" {
		t.Errorf("verifier timeout row: outcome %s reward %v metrics %+v", r.Outcome, r.Reward, r.Metrics)
	}
	if r := rows["task-c benchflow:claude-agent-acp"]; r.Outcome != "failed" || r.Metrics.PromptTokens != nil {
		t.Errorf("thought-only row: outcome %s (%s), prompt tokens %v", r.Outcome, r.Error, r.Metrics.PromptTokens)
	}
	if r := rows["task-d benchflow:claude-agent-acp"]; r.Outcome != "partial" || r.Metrics.AgentReported["n_attempts"] != 2.0 {
		t.Errorf("retried row: outcome %s, agent_reported %+v", r.Outcome, r.Metrics.AgentReported)
	}
}

// TestDelegatedCoverageAgreesWithDryRun: for every delegated arm, on the
// example tasks and on the acceptance suite's shapes, `tasks coverage`
// refuses exactly the tasks --dry-run errors as refused, with the same
// reason, and lists the unresolved-env tasks --dry-run errors as such.
func TestDelegatedCoverageAgreesWithDryRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	skill := filepath.Join(t.TempDir(), "csv")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: csv\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	arms := map[string]string{
		"claude-code": "claude-code", "codex": "codex", "terminal-bench:<agent>": "terminal-bench:terminus-2",
		"terminal-bench:oracle": "terminal-bench:oracle", "benchflow:<agent>": "benchflow:acp:pi", "benchflow:oracle": "benchflow:oracle",
		"benchflow-skill:<agent>": "benchflow-skill:codex-acp", "benchflow-skill:<agent>:<path>": "benchflow-skill:codex-acp:" + skill,
		"benchflow-selfgen:<agent>": "benchflow-selfgen:codex-acp",
	}
	for _, root := range []string{"../../examples/tasks", "../../pkg/task/testdata/golden/acceptance-tasks/root"} {
		var cov task.CoverageReport
		if err := json.Unmarshal([]byte(mustProctor(t, "tasks", "coverage", "--tasks-root", root, "--json")), &cov); err != nil {
			t.Fatal(err)
		}
		for col, name := range arms {
			refused := map[string]string{}
			for _, tr := range cov.Refusals[col] {
				refused[tr.Task] = tr.Reason
			}
			if _, ok := cov.Refusals[col]; !ok {
				t.Errorf("%s: coverage has no %s column", root, col)
			}
			out := mustProctor(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", name, "--dry-run", "--output-dir", t.TempDir())
			for _, tk := range cov.Tasks {
				prefix := tk + "/" + name + "/default/1\t"
				var state string
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, prefix) {
						state = strings.TrimPrefix(l, prefix)
					}
				}
				switch why, isRefused := refused[tk]; {
				case isRefused && state != "errored (refused): "+why:
					t.Errorf("%s %s %s: coverage refuses (%s), dry run says %q", root, tk, name, why, state)
				case !isRefused && len(cov.UnresolvedEnv[tk]) > 0 && !strings.HasPrefix(state, "errored (unresolved_env)"):
					t.Errorf("%s %s %s: coverage lists unresolved env, dry run says %q", root, tk, name, state)
				case !isRefused && len(cov.UnresolvedEnv[tk]) == 0 && state != "run":
					t.Errorf("%s %s %s: coverage runs it, dry run says %q", root, tk, name, state)
				}
			}
		}
	}
}

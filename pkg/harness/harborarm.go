package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// harborArm runs a cell through an installed Harbor (DESIGN §5): `codex`,
// `claude-code` and `terminal-bench:<agent>` run
//
//	harbor run -p <task dir> -a <agent> [-m <model>] --jobs-dir <cell>/jobs
//
// on the host in the tasks root's parent directory, with the caller's
// environment and stdin closed. Harbor builds the task image, runs the
// agent and the task's verifier itself; the arm reads the trial's
// result.json and scores the cell from it, never from the exit code
// (Harbor exits 0 for errored and cancelled trials). The run is bounded by
// the task's agent, verifier and build budgets added up; at that deadline
// Harbor gets SIGTERM and DelegateGrace (60 s) to remove its trial
// container and image, then its process group is killed.
type harborArm struct{ ref Ref }

// harborState is what Prepare made for Solve.
type harborState struct{ jobs, cwd string }

func (a harborArm) Ref() Ref                     { return a.ref }
func (a harborArm) Check(string) error           { return nil }
func (a harborArm) Networks(*task.Task) Networks { return Networks{} }

// agent is the name Harbor knows the agent by (-a).
func (a harborArm) agent() string {
	if a.ref.Kind == TerminalBench {
		return a.ref.Arg
	}
	return string(a.ref.Kind)
}

// SetupCheck: terminal-bench:oracle runs the task's own solution.
func (a harborArm) SetupCheck() bool { return a.agent() == delegatedOracleAgent }

// Refusal refuses, before any work, what Harbor itself would reject (it
// exits 1, which would read as a fail): a task without task.toml,
// environment/, instruction.md or tests/test.sh (tests/test.bat for a
// Windows verifier); terminal-bench:oracle without solution/solve.sh; a
// test.sh or solve.sh that reads /verifier or /oracle (Harbor mounts the
// tests at /tests and the solution at /solution only); and a migrated
// task.md directory (task.md beside Harbor's split files) whose
// instruction.md, tests/test.sh or solution/solve.sh disagree with what
// task.md says, since Harbor would run the split files.
func (a harborArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	if c, r := refusal(t, task.Needs{}); c != "" {
		return c, r
	}
	isFile := func(rel string) bool {
		fi, err := os.Stat(filepath.Join(t.Dir, rel))
		return err == nil && fi.Mode().IsRegular()
	}
	isDir := func(rel string) bool {
		fi, err := os.Stat(filepath.Join(t.Dir, rel))
		return err == nil && fi.IsDir()
	}
	switch {
	case !isFile("task.toml"):
		return events.ClassRefused, "Harbor needs task.toml, which is missing"
	case !isDir("environment"):
		return events.ClassRefused, "Harbor needs environment/, which is missing"
	case !isFile("instruction.md"):
		return events.ClassRefused, "Harbor needs instruction.md, which is missing"
	case !isFile("tests/test.sh") && !isFile("tests/test.bat"):
		return events.ClassRefused, "Harbor needs tests/test.sh (tests/test.bat for a Windows verifier), which is missing"
	case a.agent() == delegatedOracleAgent && !isFile("solution/solve.sh"):
		return events.ClassRefused, "terminal-bench:oracle needs solution/solve.sh, which is missing"
	}
	for _, rel := range []string{"tests/test.sh", "solution/solve.sh"} {
		b, err := os.ReadFile(filepath.Join(t.Dir, rel))
		if err != nil {
			continue
		}
		if m := scriptReadsMount.FindSubmatch(b); m != nil {
			return events.ClassRefused, fmt.Sprintf("%s reads /%s, which Harbor does not mount (it mounts /tests and /solution)", rel, m[2])
		}
	}
	if t.Layout == task.LayoutBenchFlow {
		if why := splitDisagreement(t); why != "" {
			return events.ClassRefused, why
		}
	}
	return "", ""
}

// splitDisagreement compares a migrated task.md directory's split files
// with its task.md: instruction.md with the task.md prompt,
// tests/test.sh with verifier/test.sh, solution/solve.sh with
// oracle/solve.sh (when both exist). It returns what disagrees, or "".
func splitDisagreement(t *task.Task) string {
	read := func(rel string) ([]byte, bool) {
		b, err := os.ReadFile(filepath.Join(t.Dir, rel))
		return b, err == nil
	}
	norm := func(b []byte) string {
		return strings.TrimSpace(strings.ReplaceAll(string(b), "\r\n", "\n"))
	}
	if b, ok := read("instruction.md"); ok && norm(b) != strings.TrimSpace(t.Prompt) {
		return "instruction.md disagrees with the task.md prompt (Harbor would give the agent instruction.md)"
	}
	for _, p := range [][2]string{{"tests/test.sh", "verifier/test.sh"}, {"solution/solve.sh", "oracle/solve.sh"}} {
		split, ok1 := read(p[0])
		md, ok2 := read(p[1])
		if ok1 && ok2 && !bytes.Equal(split, md) {
			return fmt.Sprintf("%s disagrees with %s (Harbor would run %s)", p[0], p[1], p[0])
		}
	}
	return ""
}

// Prepare empties <cell>/jobs and places harbor on the host driver.
func (a harborArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	jobs := env.Dir().Path("jobs")
	if err := os.RemoveAll(jobs); err != nil {
		return Placement{}, events.Classf(events.ClassInfra, "cannot empty %s: %w; harbor was not run", jobs, err)
	}
	if err := os.MkdirAll(jobs, 0o755); err != nil {
		return Placement{}, events.Classed(events.ClassInfra, err)
	}
	st := harborState{jobs: jobs, cwd: filepath.Dir(env.Spec().TasksRoot)}
	return hostPlacement(env, st.cwd, st), nil
}

// harborBudget bounds a harbor run: the agent, verifier and build budgets
// of the task added up (Harbor enforces each phase's own budget inside).
func harborBudget(t *task.Task) time.Duration {
	return seconds(t.AgentTimeoutSec + t.VerifierTimeoutSec + t.BuildTimeoutSec)
}

// Solve runs harbor and scores the cell from the trial's result.json.
func (a harborArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(harborState)
	if !ok {
		return Outcome{}, errNoState
	}
	t, plan := env.Task(), env.Plan()
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: plan.Harness, Model: plan.Model}, time.Time{}); err != nil {
		return Outcome{}, err
	}
	argv := []string{"harbor", "run", "-p", t.Dir, "-a", a.agent()}
	if plan.Model != "" && plan.Model != "default" {
		argv = append(argv, "-m", plan.Model) // "default" (no --models): the agent's own default
	}
	argv = append(argv, "--jobs-dir", st.jobs)
	r, err := runDelegated(ctx, env, p, h, argv, nil, harborBudget(t))
	if err != nil {
		return Outcome{}, err
	}
	fin := r.finished("harbor", st.cwd)
	v, reported, why := a.score(ctx, env, st.jobs, r)
	fin.AgentReported = reported
	if why != "" {
		return Outcome{}, events.Classf(events.ClassSolverError, "harbor (exit %d): %s", r.res.ExitCode, why)
	}
	return Outcome{Finished: fin, Verdict: v}, nil
}

// harborTrial is the part of Harbor's trial result.json the arm reads
// (harbor 0.1, src/harbor/models/trial/result.py, TrialResult).
type harborTrial struct {
	TrialName   string         `json:"trial_name"`
	AgentResult map[string]any `json:"agent_result"`
	Verifier    *struct {
		Rewards map[string]any `json:"rewards"`
	} `json:"verifier_result"`
	Exception *struct {
		Type    string `json:"exception_type"`
		Message string `json:"exception_message"`
	} `json:"exception_info"`
}

// harborJob is the part of Harbor's job result.json the arm reads
// (src/harbor/models/job/result.py, JobResult: stats.evals.<key>.metrics).
type harborJob struct {
	Stats struct {
		Evals map[string]struct {
			NErrors int              `json:"n_errors"`
			Metrics []map[string]any `json:"metrics"`
		} `json:"evals"`
	} `json:"stats"`
}

// score reads <jobs>/<job>/<trial>/result.json. It returns the verdict and
// what Harbor reported, or a reason the cell is errored: no trial (the
// reason quoted from stderr), more than one, an errored trial (its
// exception; an AgentTimeoutError with a verifier reward is a solver
// timeout, scored), no or a bad reward, or a job mean that disagrees with
// the trial's reward. Usage and cost go out as one Usage event with only
// the fields Harbor reported.
func (a harborArm) score(ctx context.Context, env Env, jobs string, r delegatedRun) (*events.VerdictData, map[string]any, string) {
	dirs, err := rolloutDirs(jobs)
	if err != nil {
		return nil, nil, err.Error()
	}
	switch {
	case len(dirs) == 0 && r.res.TimedOut:
		// Killed at the deadline before any trial result: a miss, as
		// every arm's timeout is.
		zero := 0.0
		return &events.VerdictData{Reward: &zero, Rewards: map[string]float64{"reward": 0}, ReturnCode: &r.res.ExitCode}, nil, ""
	case len(dirs) == 0:
		why := "no trial result.json under " + filepath.Base(jobs) + "/"
		if l := stderrReason(r.stderr); l != "" {
			why += "; stderr: " + l
		}
		return nil, nil, why
	case len(dirs) > 1:
		return nil, nil, fmt.Sprintf("%d trial directories (%s): expected exactly one attempt", len(dirs), strings.Join(baseNames(dirs), ", "))
	}
	b, err := readBounded(filepath.Join(dirs[0], "result.json"))
	if err != nil {
		return nil, nil, "trial result.json: " + err.Error()
	}
	var tr harborTrial
	if err := json.Unmarshal(b, &tr); err != nil {
		return nil, nil, "trial result.json: " + err.Error()
	}
	reported := map[string]any{"trial": filepath.Base(dirs[0])}
	if u, ok := harborUsage(tr.AgentResult); ok {
		if err := env.Emit(ctx, events.Usage, u, time.Time{}); err != nil {
			return nil, nil, err.Error()
		}
	}
	timedOut := false
	if e := tr.Exception; e != nil {
		reported["exception_type"] = e.Type
		if e.Type != "AgentTimeoutError" || tr.Verifier == nil || tr.Verifier.Rewards == nil {
			return nil, reported, fmt.Sprintf("errored trial: %s: %s", e.Type, boundMsg(e.Message))
		}
		timedOut = true
	}
	if tr.Verifier == nil || tr.Verifier.Rewards == nil {
		return nil, reported, "the trial has no verifier_result rewards"
	}
	rw, all, err := primaryReward(tr.Verifier.Rewards)
	if err != nil {
		return nil, reported, "trial result.json: " + err.Error()
	}
	if mean, ok := harborJobMean(filepath.Dir(dirs[0])); ok && mean != rw {
		return nil, reported, fmt.Sprintf("the job's eval mean %v disagrees with the trial's reward %v", mean, rw)
	}
	if r.res.TimedOut || timedOut {
		reported["agent_timeout"] = true
	}
	v := &events.VerdictData{Reward: &rw, Rewards: all, ReturnCode: &r.res.ExitCode}
	_ = env.Dir().WriteReward(rw)
	return v, reported, ""
}

// harborJobMean is the first metric mean of the job's result.json, when it
// has exactly one eval.
func harborJobMean(jobDir string) (float64, bool) {
	b, err := readBounded(filepath.Join(jobDir, "result.json"))
	if err != nil {
		return 0, false
	}
	var j harborJob
	if json.Unmarshal(b, &j) != nil || len(j.Stats.Evals) != 1 {
		return 0, false
	}
	for _, e := range j.Stats.Evals {
		if len(e.Metrics) > 0 {
			if m, ok := e.Metrics[0]["mean"].(float64); ok {
				return m, true
			}
		}
	}
	return 0, false
}

// harborUsage maps Harbor's AgentResult (n_input_tokens, n_cache_tokens,
// n_output_tokens, cost_usd; each null when the agent did not report it)
// onto a Usage event; ok is false when none was reported.
func harborUsage(ar map[string]any) (events.UsageData, bool) {
	u := events.UsageData{
		PromptTokens: jsonInt(ar["n_input_tokens"]), CompletionTokens: jsonInt(ar["n_output_tokens"]),
		CacheReadTokens: jsonInt(ar["n_cache_tokens"]), CostUSD: jsonFloat(ar["cost_usd"]),
	}
	return u, u.PromptTokens != nil || u.CompletionTokens != nil || u.CacheReadTokens != nil || u.CostUSD != nil
}

func baseNames(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = filepath.Base(d)
	}
	sort.Strings(out)
	return out
}

func boundMsg(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

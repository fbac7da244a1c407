package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// harborArm runs a cell through an installed Harbor (DESIGN §5.2): `codex`,
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

func (a harborArm) Ref() Ref                                { return a.ref }
func (a harborArm) Check(string, func(string) string) error { return nil }
func (a harborArm) Networks(*task.Task) Networks            { return Networks{} }

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
// exits 1, which would read as a fail), as Harbor 0.22's Task.is_valid_dir
// and _validate_tests decide (src/harbor/models/task/task.py): a task
// without task.toml or environment/; for a single-step task, no
// instruction.md, and no test script for its os (tests/test.sh; a Windows
// task's tests/test.bat) unless its verifier runs separately with its own
// tests; terminal-bench:oracle without the solve script for its os. A
// multi-step task ([[steps]]) is passed to Harbor with its step files left
// to Harbor. Proctor also refuses a test.sh or solve.sh that reads
// /verifier or /oracle (Harbor mounts the tests at /tests and the solution
// at /solution only), and a migrated task.md directory whose split files
// differ from task.md (task.Task.SplitDiffers), since Harbor would run the
// split files and the row would measure another task.
func (a harborArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	// Harbor resolves the env tables itself: every unresolved key errors
	// the cell, as before the tables were scoped by phase.
	if c, r := refusal(t, task.Needs{Steps: true, VerifierEnv: true, OracleEnv: true, SandboxEnv: true}); c != "" {
		return c, r
	}
	isFile := func(rel string) bool { return isRegular(filepath.Join(t.Dir, rel)) }
	windows, separate := t.OS == "windows", t.VerifierMode == task.VerifierSeparate
	test, solve := "tests/test.sh", "solution/solve.sh"
	if windows {
		test, solve = "tests/test.bat", "solution/solve.bat"
	}
	switch {
	case !isFile("task.toml"):
		return events.ClassRefused, "Harbor needs task.toml, which is missing"
	case !isDirectory(filepath.Join(t.Dir, "environment")):
		return events.ClassRefused, "Harbor needs environment/, which is missing"
	case len(t.Steps) > 0:
		// Harbor validates the steps' own files (steps/<name>/).
	case !isFile("instruction.md"):
		return events.ClassRefused, "Harbor needs instruction.md, which is missing"
	case !separate && !isFile(test) && windows:
		return events.ClassRefused, "Harbor needs tests/test.bat for a Windows task ([environment].os = \"windows\"), which is missing"
	case !separate && !isFile(test):
		return events.ClassRefused, "Harbor needs tests/test.sh, which is missing (only a Windows task runs tests/test.bat; a separate verifier environment brings its own tests)"
	case a.agent() == delegatedOracleAgent && !isFile(solve):
		return events.ClassRefused, fmt.Sprintf("terminal-bench:oracle needs %s, which is missing", solve)
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
	if len(t.SplitDiffers) > 0 {
		return events.ClassRefused, "task.md and its split files differ, and Harbor would run the split files: " + strings.Join(t.SplitDiffers, "; ")
	}
	return "", ""
}

// Prepare empties <cell>/jobs and places harbor on the host driver.
func (a harborArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	jobs, err := emptyJobs(env, "harbor")
	if err != nil {
		return Placement{}, err
	}
	st := harborState{jobs: jobs, cwd: filepath.Dir(env.Spec().TasksRoot)}
	return hostPlacement(env, st.cwd, st), nil
}

// emptyJobs empties and creates <cell>/jobs, the directory a delegated
// tool writes its results to; tool names it in the error.
func emptyJobs(env Env, tool string) (string, error) {
	jobs := env.Dir().Path("jobs")
	if err := os.RemoveAll(jobs); err != nil {
		return "", events.Classf(events.ClassInfra, "cannot empty %s: %w; %s was not run", jobs, err, tool)
	}
	if err := os.MkdirAll(jobs, 0o755); err != nil {
		return "", events.Classed(events.ClassInfra, err)
	}
	return jobs, nil
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
	r, err := runDelegated(ctx, env, p, h, argv, nil, harborBudget(t), DelegateGrace())
	if err != nil {
		return Outcome{}, err
	}
	return harborOutcome(ctx, env, "harbor", st.jobs, st.cwd, r)
}

// harborOutcome scores a finished harbor run (or a command that keeps
// Harbor's output contract) from its jobs directory: the Outcome, or a
// solver_error naming why the cell has no verdict.
func harborOutcome(ctx context.Context, env Env, tool, jobs, cwd string, r delegatedRun) (Outcome, error) {
	fin := r.finished(tool, cwd)
	v, reported, why := scoreHarbor(ctx, env, jobs, r)
	fin.AgentReported = reported
	if why != "" {
		return Outcome{}, events.Classf(events.ClassSolverError, "%s (exit %d): %s", tool, r.res.ExitCode, why)
	}
	return Outcome{Finished: fin, Verdict: v}, nil
}

// harborAgentContext is Harbor's AgentContext as a trial or step result
// holds it (src/harbor/models/agent/context.py): each count null when the
// agent did not report it.
type harborAgentContext struct {
	NInputTokens  *float64 `json:"n_input_tokens"`
	NCacheTokens  *float64 `json:"n_cache_tokens"`
	NOutputTokens *float64 `json:"n_output_tokens"`
	CostUSD       *float64 `json:"cost_usd"`
}

// harborTrial is the part of Harbor's trial result.json the arm reads
// (harbor 0.22, src/harbor/models/trial/result.py, TrialResult): a
// multi-step trial has no agent_result of its own but one per step, and
// its verifier_result is the steps' rolled up by the task's
// multi_step_reward_strategy.
type harborTrial struct {
	TrialName   string              `json:"trial_name"`
	AgentResult *harborAgentContext `json:"agent_result"`
	Verifier    *struct {
		Rewards map[string]any `json:"rewards"`
	} `json:"verifier_result"`
	Exception *struct {
		Type    string `json:"exception_type"`
		Message string `json:"exception_message"`
	} `json:"exception_info"`
	StepResults []struct {
		StepName    string              `json:"step_name"`
		AgentResult *harborAgentContext `json:"agent_result"`
	} `json:"step_results"`
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

// scoreHarbor reads <jobs>/<job>/<trial>/result.json. It returns the
// verdict and what Harbor reported, or a reason the cell is errored: no
// trial (the reason quoted from stderr), more than one, an errored trial
// (its exception; an AgentTimeoutError with a verifier reward is a solver
// timeout, scored), no or a bad reward, or a job mean that disagrees with
// the trial's reward. A run killed at its deadline before any trial
// result is a solver timeout (reward 0), as every arm's timeout is. Usage
// and cost go out as one Usage event with only the fields Harbor reported
// (a multi-step trial's summed over its steps, as Harbor's
// compute_token_cost_totals does).
func scoreHarbor(ctx context.Context, env Env, jobs string, r delegatedRun) (*events.VerdictData, map[string]any, string) {
	dirs, err := rolloutDirs(jobs)
	if err != nil {
		return nil, nil, err.Error()
	}
	switch {
	case len(dirs) == 0 && r.res.TimedOut:
		zero := 0.0
		return &events.VerdictData{Reward: &zero, Rewards: map[string]float64{"reward": 0}, ReturnCode: &r.res.ExitCode}, nil, ""
	case len(dirs) == 0:
		why := "no trial result.json under " + filepath.Base(jobs) + "/"
		if l := lastLine(r.stderr, nil); l != "" {
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
	if len(tr.StepResults) > 0 {
		reported["n_steps"] = len(tr.StepResults)
	}
	if u, ok := harborUsage(tr); ok {
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

// harborUsage maps a trial's AgentContext (n_input_tokens, n_cache_tokens,
// n_output_tokens, cost_usd; each null when the agent did not report it),
// or the sum of its steps' for a multi-step trial, onto a Usage event; ok
// is false when none was reported.
func harborUsage(tr harborTrial) (events.UsageData, bool) {
	ctxs := []*harborAgentContext{tr.AgentResult}
	if tr.AgentResult == nil {
		ctxs = nil
		for _, s := range tr.StepResults {
			ctxs = append(ctxs, s.AgentResult)
		}
	}
	var u events.UsageData
	add := func(sum **int64, v *float64) {
		if n := jsonInt(derefAny(v)); n != nil {
			if *sum == nil {
				*sum = new(int64)
			}
			**sum += *n
		}
	}
	for _, c := range ctxs {
		if c == nil {
			continue
		}
		add(&u.PromptTokens, c.NInputTokens)
		add(&u.CacheReadTokens, c.NCacheTokens)
		add(&u.CompletionTokens, c.NOutputTokens)
		if f := jsonFloat(derefAny(c.CostUSD)); f != nil {
			if u.CostUSD == nil {
				u.CostUSD = new(float64)
			}
			*u.CostUSD += *f
		}
	}
	return u, u.PromptTokens != nil || u.CompletionTokens != nil || u.CacheReadTokens != nil || u.CostUSD != nil
}

// derefAny is *p as an any, nil when p is nil.
func derefAny(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// BenchFlow skill modes (benchflow/skill_policy.py).
const (
	skillModeNone    = "no-skill"
	skillModeWith    = "with-skill"
	skillModeSelfGen = "self-gen"
)

// benchHardDeadlineMarginSec is BenchFlow's margin over the phase budgets
// of its host hard deadline (benchflow/rollout/_deadline.py, _MARGIN_SEC).
const benchHardDeadlineMarginSec = 1800

// benchflowArm runs a cell through an installed BenchFlow (DESIGN §5):
// `benchflow:<agent>` (skill mode no-skill), `benchflow-skill:<agent>[:<path>]`
// (with-skill; <path> an external skill directory) and
// `benchflow-selfgen:<agent>[:<dir>]` (self-gen; <dir> seed skills) run
//
//	bench eval run --tasks-dir <task> --agent <agent> [--model <model>]
//	  --sandbox docker --skill-mode <mode> [--skills-dir <cell>/skills]
//	  --jobs-dir <cell>/jobs --retry-attempts 0 --agent-idle-timeout 0 --quiet
//
// from the cell directory with absolute paths; an external skill is staged
// under <cell>/skills as a real copy (symlinks resolved, none followed out
// of it). BENCHFLOW_ROLLOUT_HARD_DEADLINE is set to the task's agent,
// verifier and build budgets plus BenchFlow's 1800 s margin, and the run
// is bounded by that deadline plus DelegateGrace.
type benchflowArm struct{ ref Ref }

type benchflowState struct{ jobs, cwd, skills string }

func (a benchflowArm) Ref() Ref                     { return a.ref }
func (a benchflowArm) Networks(*task.Task) Networks { return Networks{} }

// agentAndPath splits the argument into the agent and the optional skill
// path.
func (a benchflowArm) agentAndPath() (string, string) {
	agent, p, _ := strings.Cut(a.ref.Arg, ":")
	return agent, p
}

func (a benchflowArm) mode() string {
	switch a.ref.Kind {
	case BenchFlowSkill:
		return skillModeWith
	case BenchFlowSelfGen:
		return skillModeSelfGen
	}
	return skillModeNone
}

// SetupCheck: benchflow:oracle (any mode) runs the task's own solution.
func (a benchflowArm) SetupCheck() bool {
	agent, _ := a.agentAndPath()
	return agent == delegatedOracleAgent
}

// Check: the agent is named, and a skill path given exists as a directory
// (relative paths against baseDir).
func (a benchflowArm) Check(baseDir string) error {
	agent, p := a.agentAndPath()
	if agent == "" {
		return fmt.Errorf("no agent: write it as %s:<agent>", a.ref.Kind)
	}
	if p == "" {
		return nil
	}
	fi, err := os.Stat(a.skillPath(baseDir))
	if err != nil {
		return fmt.Errorf("skill path %s: %w", p, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("skill path %s is not a directory", p)
	}
	return nil
}

func (a benchflowArm) skillPath(baseDir string) string {
	_, p := a.agentAndPath()
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(baseDir, p)
}

// Refusal: what BenchFlow needs to score an agent (the verifier, the image,
// a prompt; the oracle also needs the solution).
func (a benchflowArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	n := task.Needs{TestScript: true, Image: true, Prompt: true}
	if a.SetupCheck() {
		n = task.NeedsOracle
	}
	// bench would start a compose environment itself, outside proctor's
	// network policy: refused (docs/decisions/2026-12-01-compose-which-arms.md).
	n.Compose = false
	return refusal(t, n)
}

// Prepare empties <cell>/jobs and stages the external skill.
func (a benchflowArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	dir := env.Dir()
	jobs, skills := dir.Path("jobs"), ""
	for _, p := range []string{jobs, dir.Path("skills")} {
		if err := os.RemoveAll(p); err != nil {
			return Placement{}, events.Classf(events.ClassInfra, "cannot empty %s: %w; bench was not run", p, err)
		}
	}
	if err := os.MkdirAll(jobs, 0o755); err != nil {
		return Placement{}, events.Classed(events.ClassInfra, err)
	}
	if src := a.skillPath(env.Spec().BaseDir); src != "" {
		skills = dir.Path("skills")
		if err := stageCopy(src, filepath.Join(skills, filepath.Base(src))); err != nil {
			return Placement{}, events.Classf(events.ClassInfra, "staging skill %s: %w", src, err)
		}
	}
	st := benchflowState{jobs: jobs, cwd: string(dir), skills: skills}
	return hostPlacement(env, st.cwd, st), nil
}

// stageCopy copies the tree src to dst as real files: a symlink inside it
// is copied as what it points to when that stays inside src, and is an
// error otherwise.
func stageCopy(src, dst string) error {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out := filepath.Join(dst, rel)
		real := p
		if d.Type()&fs.ModeSymlink != 0 {
			if real, err = filepath.EvalSymlinks(p); err != nil {
				return err
			}
			if r, _ := filepath.Rel(root, real); r == ".." || strings.HasPrefix(r, "../") {
				return fmt.Errorf("%s links outside the skill directory", rel)
			}
		}
		fi, err := os.Stat(real)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if d.Type()&fs.ModeSymlink != 0 {
				return stageCopy(real, out)
			}
			return os.MkdirAll(out, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", rel)
		}
		in, err := os.Open(real)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// benchHardDeadline is BENCHFLOW_ROLLOUT_HARD_DEADLINE for t, in seconds.
func benchHardDeadline(t *task.Task) float64 {
	return t.AgentTimeoutSec + t.VerifierTimeoutSec + t.BuildTimeoutSec + benchHardDeadlineMarginSec
}

// Solve runs bench and scores the cell from the rollout's result.json.
func (a benchflowArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(benchflowState)
	if !ok {
		return Outcome{}, errNoState
	}
	t, plan := env.Task(), env.Plan()
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: plan.Harness, Model: plan.Model}, time.Time{}); err != nil {
		return Outcome{}, err
	}
	agent, _ := a.agentAndPath()
	argv := []string{"bench", "eval", "run", "--tasks-dir", t.Dir, "--agent", agent}
	if plan.Model != "" && plan.Model != "default" {
		argv = append(argv, "--model", plan.Model)
	}
	argv = append(argv, "--sandbox", "docker", "--skill-mode", a.mode())
	if st.skills != "" {
		argv = append(argv, "--skills-dir", st.skills)
	}
	argv = append(argv, "--jobs-dir", st.jobs, "--retry-attempts", "0", "--agent-idle-timeout", "0", "--quiet")
	deadline := benchHardDeadline(t)
	extra := map[string]string{"BENCHFLOW_ROLLOUT_HARD_DEADLINE": strconv.FormatFloat(deadline, 'f', -1, 64)}
	r, err := runDelegated(ctx, env, p, h, argv, extra, seconds(deadline)+delegateGrace())
	if err != nil {
		return Outcome{}, err
	}
	fin := r.finished("bench", st.cwd)
	v, reported, why := a.score(ctx, env, st.jobs, r)
	fin.AgentReported = reported
	if why != "" {
		return Outcome{}, events.Classf(events.ClassSolverError, "bench (exit %d): %s", r.res.ExitCode, why)
	}
	return Outcome{Finished: fin, Verdict: v}, nil
}

// benchResult is the part of BenchFlow's rollout result.json the arm reads
// (benchflow 0.7, src/benchflow/rollout/_results.py, result_data).
type benchResult struct {
	Rewards       map[string]any `json:"rewards"`
	NToolCalls    *float64       `json:"n_tool_calls"`
	AgentResult   map[string]any `json:"agent_result"`
	Error         any            `json:"error"`
	ErrorCategory any            `json:"error_category"`
	VerifierError any            `json:"verifier_error"`
	SkillMode     string         `json:"skill_mode"`
}

// score applies the BenchFlow verdict rule: a verdict only when exactly
// one rollout ran and the agent attempted the task (a tool call,
// completion tokens, or a trajectory message that is not one of the CLI's
// synthetic provider-error replies; the oracle, which runs the task's
// solve.sh, is exempt); everything else is errored with the reason quoted
// from the result or from stderr.
func (a benchflowArm) score(ctx context.Context, env Env, jobs string, r delegatedRun) (*events.VerdictData, map[string]any, string) {
	dirs, err := rolloutDirs(jobs)
	if err != nil {
		return nil, nil, err.Error()
	}
	switch {
	case len(dirs) == 0:
		why := "no rollout result.json under " + filepath.Base(jobs) + "/"
		if r.res.TimedOut {
			why += " (killed at the hard deadline)"
		}
		if l := stderrReason(r.stderr); l != "" {
			why += "; stderr: " + l
		}
		return nil, nil, why
	case len(dirs) > 1:
		return nil, nil, fmt.Sprintf("%d rollout directories (%s): expected exactly one attempt (--retry-attempts 0)", len(dirs), strings.Join(baseNames(dirs), ", "))
	}
	b, err := readBounded(filepath.Join(dirs[0], "result.json"))
	if err != nil {
		return nil, nil, "rollout result.json: " + err.Error()
	}
	var res benchResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, nil, "rollout result.json: " + err.Error()
	}
	traj := readTrajectory(filepath.Join(dirs[0], "trajectory", "acp_trajectory.jsonl"))
	reported := map[string]any{"rollout": filepath.Base(dirs[0]), "skill_mode": a.mode(),
		"skills_loaded": traj.skills, "n_skill_invocations": traj.skillCalls}
	if res.NToolCalls != nil {
		reported["n_tool_calls"] = int(*res.NToolCalls)
	}
	if u, ok := benchUsage(res.AgentResult); ok {
		if err := env.Emit(ctx, events.Usage, u, time.Time{}); err != nil {
			return nil, nil, err.Error()
		}
	}
	for name, n := range traj.tools {
		for i := 0; i < n; i++ {
			if err := env.Emit(ctx, events.ToolCall, events.ToolCallData{Name: name}, time.Time{}); err != nil {
				return nil, nil, err.Error()
			}
		}
	}
	out := jsonInt(res.AgentResult["n_output_tokens"])
	attempted := (res.NToolCalls != nil && *res.NToolCalls > 0) || (out != nil && *out > 0) || traj.realMessages > 0 || len(traj.tools) > 0
	if !attempted && !a.SetupCheck() { // the oracle runs solve.sh: no model, no tool call
		why := "the agent made no attempt (no tool call, no completion tokens, no trajectory message but provider-error replies)"
		if !isErrorless(res.Error) {
			why += "; error: " + boundMsg(fmt.Sprint(res.Error))
		}
		return nil, reported, why
	}
	if res.Rewards == nil {
		why := "no rewards in result.json"
		for _, e := range []any{res.VerifierError, res.Error} {
			if !isErrorless(e) {
				why += ": " + boundMsg(fmt.Sprint(e))
				break
			}
		}
		return nil, reported, why
	}
	rw, all, err := primaryReward(res.Rewards)
	if err != nil {
		return nil, reported, "rollout result.json: " + err.Error()
	}
	if !isErrorless(res.Error) {
		reported["error"] = boundMsg(fmt.Sprint(res.Error))
	}
	_ = env.Dir().WriteReward(rw)
	return &events.VerdictData{Reward: &rw, Rewards: all, ReturnCode: &r.res.ExitCode}, reported, ""
}

// benchUsage maps BenchFlow's agent_result onto a Usage event, only when
// BenchFlow captured usage (usage_source not "unavailable"); each count
// stays nil when null.
func benchUsage(ar map[string]any) (events.UsageData, bool) {
	if ar == nil || ar["usage_source"] == "unavailable" {
		return events.UsageData{}, false
	}
	u := events.UsageData{
		PromptTokens: jsonInt(ar["n_input_tokens"]), CompletionTokens: jsonInt(ar["n_output_tokens"]),
		CacheReadTokens: jsonInt(ar["n_cache_read_tokens"]), CacheWriteTokens: jsonInt(ar["n_cache_creation_tokens"]),
		CostUSD: jsonFloat(ar["cost_usd"]),
	}
	return u, u.PromptTokens != nil || u.CompletionTokens != nil || u.CacheReadTokens != nil || u.CacheWriteTokens != nil || u.CostUSD != nil
}

// trajectory is what the arm reads of an ACP trajectory
// (trajectory/acp_trajectory.jsonl, one session-update object a line).
type trajectory struct {
	tools        map[string]int
	realMessages int
	skills       []string
	skillCalls   int
}

// providerErrorReply reports whether an agent message is one of the
// synthetic replies an agent CLI prints in place of a model answer when
// the provider call failed ("API Error: 401 …", "Invalid API key", "Credit
// balance is too low").
func providerErrorReply(text string) bool {
	s := strings.ToLower(strings.TrimSpace(text))
	for _, p := range []string{"api error", "invalid api key", "credit balance is too low", "authentication_error", "overloaded_error"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func readTrajectory(p string) trajectory {
	tr := trajectory{tools: map[string]int{}, skills: []string{}}
	b, err := readBounded(p)
	if err != nil {
		return tr
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev["type"] {
		case "tool_call":
			name, _ := ev["title"].(string)
			if name == "" {
				name, _ = ev["tool"].(string)
			}
			if name == "" {
				name = "unnamed"
			}
			if ev["kind"] == "skill" {
				tr.skillCalls++
				if !seen[name] {
					seen[name] = true
					tr.skills = append(tr.skills, name)
				}
			}
			tr.tools[name]++
		case "agent_message":
			text, _ := ev["text"].(string)
			if strings.TrimSpace(text) != "" && !providerErrorReply(text) {
				tr.realMessages++
			}
		}
	}
	sort.Strings(tr.skills)
	return tr
}

// Preflight checks once per run that BenchFlow can run here: `bench
// --help` and `docker compose version` must both succeed (bench starts
// task sandboxes with Docker Compose). It is skipped by --dry-run.
func (a benchflowArm) Preflight(ctx context.Context) error {
	for _, argv := range [][]string{{"bench", "--help"}, {"docker", "compose", "version"}} {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			msg := lastLine(string(out), nil)
			if msg != "" {
				msg = ": " + msg
			}
			return fmt.Errorf("BenchFlow arms need `%s` to work, and it failed (%v%s); install BenchFlow (the bench CLI) and Docker Compose v2", strings.Join(argv, " "), err, msg)
		}
	}
	return nil
}

// PreflightKey: one pre-flight for every BenchFlow arm of a run.
func (a benchflowArm) PreflightKey() string { return "benchflow" }

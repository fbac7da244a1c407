package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// BenchFlow's error categories the verdict rules read
// (benchflow/_utils/scoring.py: classify_error, classify_verifier_error).
const (
	benchAgentTimeout    = "timeout"
	benchVerifierTimeout = "verifier_timeout"
)

// benchResult is the part of BenchFlow's rollout result.json the arm reads
// (benchflow 0.7, src/benchflow/rollout/_results.py,
// _build_rollout_result's result_data, with skill_policy.py's
// config_metadata).
type benchResult struct {
	Rewards               map[string]any `json:"rewards"`
	NToolCalls            *float64       `json:"n_tool_calls"`
	NSkillInvocations     *float64       `json:"n_skill_invocations"`
	AgentResult           map[string]any `json:"agent_result"`
	Error                 any            `json:"error"`
	ErrorCategory         any            `json:"error_category"`
	VerifierError         any            `json:"verifier_error"`
	VerifierErrorCategory any            `json:"verifier_error_category"`
	PartialTrajectory     bool           `json:"partial_trajectory"`
	SkillMode             string         `json:"skill_mode"`
	SkillSource           string         `json:"skill_source"`
	StartedAt             string         `json:"started_at"`
}

// outcome scores a finished bench run from <jobs>/<job>/<rollout>/: the
// Outcome, or a solver_error naming why the cell has no verdict.
//
// The scored attempt is the latest rollout that wrote a result.json
// (BenchFlow retries an errored attempt in a new rollout directory and
// counts the latest, as its resume does); metrics.agent_reported.n_attempts
// counts them. The rules, in order:
//
//  1. No result.json: a bench killed at proctor's outer deadline after the
//     agent attempted the task (its live trajectory shows it) is a solver
//     timeout, reward 0 (agent_reported.timed_out, exit 124); otherwise
//     the cell is errored with the reason quoted from bench's stderr
//     (benchStderrReason).
//  2. The agent made no attempt (attempted): errored with BenchFlow's
//     error or the stderr reason; the oracle, which runs solve.sh, is
//     exempt.
//  3. An agent timeout (error_category "timeout", or the trajectory's
//     agent_timeout marker) after an attempt is reward 0 whatever the
//     verifier then gave (a non-zero reward kept as
//     agent_reported.reward_after_timeout): a solver timeout.
//  4. A verifier timeout (verifier_error_category "verifier_timeout") is
//     reward 0 with metrics.verifier_timeout.
//  5. No rewards: errored with BenchFlow's verifier error or error.
//  6. Otherwise the primary reward (primaryReward) is the verdict.
func (a benchflowArm) outcome(ctx context.Context, env Env, st benchflowState, r delegatedRun) (Outcome, error) {
	fin := r.finished("bench", st.cwd)
	fail := func(reported map[string]any, format string, args ...any) (Outcome, error) {
		fin.AgentReported = reported
		return Outcome{}, events.Classf(events.ClassSolverError, "bench (exit %d): %s", r.res.ExitCode, fmt.Sprintf(format, args...))
	}
	reported := map[string]any{"skill_mode": a.mode()}
	if st.defaulted > 0 {
		reported["agent_timeout_defaulted_sec"] = st.defaulted
	}
	if r.res.TimedOut {
		reported["timed_out"] = true
	}
	dirs, err := rolloutDirs(st.jobs)
	if err != nil {
		return fail(reported, "%v", err)
	}
	if len(dirs) == 0 {
		why := benchStderrReason(r.head, r.stderr)
		if !r.res.TimedOut {
			return fail(reported, "no rollout result.json under %s/%s", filepath.Base(st.jobs), quoted(why))
		}
		// Killed at the outer deadline: the live trajectory says whether
		// the agent got to work.
		live, _ := filepath.Glob(filepath.Join(st.jobs, "*", "*", "trajectory", "acp_trajectory.jsonl"))
		var tr trajectory
		for _, p := range live {
			tr = readTrajectory(p)
			if tr.attempted() {
				break
			}
		}
		if !tr.attempted() && !a.SetupCheck() {
			return fail(reported, "bench was killed %gs past its hard deadline of %gs before the agent made an attempt%s", delegateTimes.benchOuterMargin.Seconds(), st.deadline, quoted(why))
		}
		reported["partial_trajectory"] = true
		if err := a.emitTrajectory(ctx, env, tr, st, reported); err != nil {
			return Outcome{}, err
		}
		zero := 0.0
		fin.AgentReported = reported
		return Outcome{Finished: fin, Verdict: &events.VerdictData{Reward: &zero, Rewards: map[string]float64{"reward": 0}, ReturnCode: &r.res.ExitCode}}, nil
	}
	dir, res, err := latestRollout(dirs)
	reported["n_attempts"] = len(dirs)
	if err != nil {
		return fail(reported, "rollout result.json: %v", err)
	}
	reported["rollout"] = filepath.Base(dir)
	tr := readTrajectory(filepath.Join(dir, "trajectory", "acp_trajectory.jsonl"))
	res.report(reported)
	if u, ok := benchUsage(res.AgentResult); ok {
		if err := env.Emit(ctx, events.Usage, u, time.Time{}); err != nil {
			return Outcome{}, err
		}
	}
	if err := a.emitTrajectory(ctx, env, tr, st, reported); err != nil {
		return Outcome{}, err
	}
	out := jsonInt(res.AgentResult["n_output_tokens"])
	attempted := (res.NToolCalls != nil && *res.NToolCalls > 0) || (out != nil && *out > 0) || tr.attempted()
	if !attempted && !a.SetupCheck() { // the oracle runs solve.sh: no model, no tool call
		why := "the agent made no attempt (no tool call, no completion tokens, no trajectory message or thought but provider-error replies)"
		switch {
		case !isErrorless(res.Error):
			why += "; error: " + boundMsg(fmt.Sprint(res.Error))
		case benchStderrReason(r.head, r.stderr) != "":
			why += quoted(benchStderrReason(r.head, r.stderr))
		}
		return fail(reported, "%s", why)
	}
	zero := 0.0
	verdict := func(rw float64, all map[string]float64) *events.VerdictData {
		_ = env.Dir().WriteReward(rw)
		return &events.VerdictData{Reward: &rw, Rewards: all, ReturnCode: &r.res.ExitCode}
	}
	if res.ErrorCategory == benchAgentTimeout || tr.agentTimeout {
		reported["agent_timeout"] = true
		if res.Rewards != nil {
			if rw, _, err := primaryReward(res.Rewards); err == nil && rw != 0 {
				reported["reward_after_timeout"] = rw
			}
		}
		fin.TimedOut, fin.Reason = true, "agent timeout"
		fin.AgentReported = reported
		return Outcome{Finished: fin, Verdict: verdict(zero, map[string]float64{"reward": 0})}, nil
	}
	if res.VerifierErrorCategory == benchVerifierTimeout {
		fin.AgentReported = reported
		v := verdict(zero, map[string]float64{"reward": 0})
		v.TimedOut = true
		return Outcome{Finished: fin, Verdict: v}, nil
	}
	if res.Rewards == nil {
		why := "no rewards in result.json"
		for _, e := range []any{res.VerifierError, res.Error} {
			if !isErrorless(e) {
				why += ": " + boundMsg(fmt.Sprint(e))
				break
			}
		}
		return fail(reported, "%s", why)
	}
	rw, all, err := primaryReward(res.Rewards)
	if err != nil {
		return fail(reported, "rollout result.json: %v", err)
	}
	fin.AgentReported = reported
	return Outcome{Finished: fin, Verdict: verdict(rw, all)}, nil
}

// report copies what BenchFlow reported into the row's
// metrics.agent_reported: its own skill-invocation count, the skill
// source, the usage source, the errors and their categories, and a
// partial trajectory. Token counts and cost go out as a Usage event
// (benchUsage), never here.
func (res benchResult) report(m map[string]any) {
	if res.NToolCalls != nil {
		m["n_tool_calls"] = int(*res.NToolCalls)
	}
	if res.NSkillInvocations != nil {
		m["n_skill_invocations_benchflow"] = int(*res.NSkillInvocations)
	}
	if res.SkillSource != "" {
		m["skill_source"] = res.SkillSource
	}
	if us, ok := res.AgentResult["usage_source"].(string); ok && us != "" {
		m["usage_source"] = us
	}
	for k, v := range map[string]any{
		"benchflow_error": res.Error, "benchflow_error_category": res.ErrorCategory,
		"verifier_error": res.VerifierError, "verifier_error_category": res.VerifierErrorCategory,
	} {
		if !isErrorless(v) {
			m[k] = boundMsg(fmt.Sprint(v))
		}
	}
	if res.PartialTrajectory {
		m["partial_trajectory"] = true
	}
}

// latestRollout reads the result.json of every rollout directory and
// returns the latest (by started_at, then directory name).
func latestRollout(dirs []string) (string, benchResult, error) {
	type one struct {
		dir string
		res benchResult
	}
	var all []one
	for _, d := range dirs {
		b, err := readBounded(filepath.Join(d, "result.json"))
		if err != nil {
			return d, benchResult{}, fmt.Errorf("%s: %w", filepath.Base(d), err)
		}
		var res benchResult
		if err := json.Unmarshal(b, &res); err != nil {
			return d, benchResult{}, fmt.Errorf("%s: %w", filepath.Base(d), err)
		}
		all = append(all, one{d, res})
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].res.StartedAt != all[j].res.StartedAt {
			return all[i].res.StartedAt < all[j].res.StartedAt
		}
		return all[i].dir < all[j].dir
	})
	last := all[len(all)-1]
	return last.dir, last.res, nil
}

// emitTrajectory records the trajectory's tool calls as ToolCall events
// (by ACP tool kind) and its skill loads: skills_loaded (one entry per
// tool_call_id) and, on a with-skill arm, n_skill_invocations, the loads
// of the deployed treatment packs only (st.packs: directory and
// frontmatter names). The no-skill and self-gen arms have no treatment
// packs and no n_skill_invocations.
func (a benchflowArm) emitTrajectory(ctx context.Context, env Env, tr trajectory, st benchflowState, reported map[string]any) error {
	for _, name := range tr.tools {
		if err := env.Emit(ctx, events.ToolCall, events.ToolCallData{Name: name}, time.Time{}); err != nil {
			return err
		}
	}
	reported["skills_loaded"] = tr.skills
	if a.mode() == skillModeWith {
		n := 0
		for _, s := range tr.skills {
			if st.packs[s] {
				n++
			}
		}
		reported["n_skill_invocations"] = n
	}
	return nil
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
// (trajectory/acp_trajectory.jsonl, one event a line, as BenchFlow's
// trajectories/_capture.py writes them: tool_call with tool_call_id, kind,
// title, status and content; user_message, agent_message and
// agent_thought with text; agent_timeout).
type trajectory struct {
	tools        []string // one ACP tool kind per tool call
	realMessages int      // agent messages and thoughts that are not synthetic replies
	skills       []string // the skill each skill load named, one per tool call
	agentTimeout bool
}

func (tr trajectory) attempted() bool { return len(tr.tools) > 0 || tr.realMessages > 0 }

// syntheticReplies open the messages Claude Code prints in place of a
// model answer when the provider call failed or was refused (strings of
// its CLI): they are no attempt.
var syntheticReplies = []string{
	"api error", "failed to authenticate", "credit balance is too low", "invalid api key",
	"oauth token has expired", "oauth token revoked", "prompt is too long", "request timed out",
	"repeated 529 overloaded errors", "your organization has been disabled", "claude ai usage limit reached",
	"authentication_error", "overloaded_error",
}

// syntheticReply reports whether an agent message or thought is one of
// the synthetic replies.
func syntheticReply(text string) bool {
	s := strings.ToLower(strings.TrimSpace(text))
	for _, p := range syntheticReplies {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// readTrajectory reads an ACP trajectory; a missing or unreadable file is
// an empty one. A tool call is counted once per tool_call_id (a call
// without an id each time it appears).
func readTrajectory(p string) trajectory {
	tr := trajectory{skills: []string{}}
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
			if id, _ := ev["tool_call_id"].(string); id != "" {
				if seen[id] {
					continue
				}
				seen[id] = true
			}
			kind, _ := ev["kind"].(string)
			if kind == "" {
				kind, _ = ev["title"].(string)
			}
			if kind == "" {
				kind = "other"
			}
			tr.tools = append(tr.tools, cellBound(kind))
			if name, ok := skillLoad(ev); ok {
				tr.skills = append(tr.skills, name)
			}
		case "agent_message", "agent_thought":
			text, _ := ev["text"].(string)
			if strings.TrimSpace(text) != "" && !syntheticReply(text) {
				tr.realMessages++
			}
		case "agent_timeout":
			tr.agentTimeout = true
		}
	}
	return tr
}

func cellBound(s string) string {
	s = strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// Skill-load shapes BenchFlow recognises (benchflow/trajectories/
// metrics.py, is_skill_invocation_event): the skill kind or tool name, an
// invoke_skill/activate_skill title, or, for an unclassified kind
// ("", other, tool), a title "skill" or a result opening with
// "Launching skill: <name>" (claude-agent-acp), "## Skill: <name>" or
// <skill_content name="<name>"> (opencode), "Tool: invoke_skill ...
// [skill: <name>]" (OpenHands).
var (
	skillEnvelopeRe = regexp.MustCompile(`(?i)\A\s*(?:<skill_content\s+name\s*=\s*"([^"]+)"|#{1,6}\s*Skill:\s*(\S+)|Launching\s+skill:\s*(\S+))`)
	skillHeaderRe   = regexp.MustCompile(`(?i)\A\s*Tool:\s*(?:invoke_skill|activate_skill)\b`)
	skillMarkerRe   = regexp.MustCompile(`(?i)\[skill:\s*([^\]\s]+)`)
	skillTitleArgRe = regexp.MustCompile(`\{.*\}`)
)

// skillLoad reports whether the tool_call event ev loads a skill, and the
// skill's name ("unknown" when the event does not say).
func skillLoad(ev map[string]any) (string, bool) {
	norm := func(v any) string {
		s, _ := v.(string)
		return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	}
	kind, title := norm(ev["kind"]), norm(ev["title"])
	tool := norm(ev["tool_name"])
	if tool == "" {
		tool = norm(ev["name"])
	}
	isSkill := func(s string) bool { return s == "skill" || s == "invoke_skill" || s == "activate_skill" }
	titleWord, _, _ := strings.Cut(title, " ")
	var found bool
	switch {
	case isSkill(kind) || isSkill(tool):
		found = true
	case titleWord == "invoke_skill" || titleWord == "activate_skill":
		found = true
	case kind == "" || kind == "other" || kind == "tool":
		found = titleWord == "skill"
	default:
		return "", false // a real ACP kind is never a skill load
	}
	name := ""
	for _, text := range toolResultTexts(ev["content"]) {
		if m := skillEnvelopeRe.FindStringSubmatch(text); m != nil {
			name, found = firstNonEmpty(m[1:]...), true
			break
		}
		if skillHeaderRe.MatchString(text) {
			if m := skillMarkerRe.FindStringSubmatch(text); m != nil {
				name, found = m[1], true
				break
			}
		}
	}
	if !found {
		return "", false
	}
	if name == "" {
		raw, _ := ev["title"].(string)
		if j := skillTitleArgRe.FindString(raw); j != "" {
			var args map[string]any
			if json.Unmarshal([]byte(j), &args) == nil {
				for _, k := range []string{"name", "skill", "skill_name"} {
					if s, ok := args[k].(string); ok && s != "" {
						name = s
						break
					}
				}
			}
		}
	}
	if name == "" && isSkill(kind) && !isSkill(title) {
		name, _ = ev["title"].(string) // the canonical kind titles the call with the skill
	}
	if name = strings.TrimSpace(name); name == "" {
		name = "unknown"
	}
	return name, true
}

// toolResultTexts are the texts of an ACP tool call's content blocks
// ({"type":"content","content":{"type":"text","text":...}} or an inline
// text block).
func toolResultTexts(content any) []string {
	blocks, _ := content.([]any)
	var out []string
	for _, b := range blocks {
		m, _ := b.(map[string]any)
		if inner, ok := m["content"].(map[string]any); ok && inner["type"] == "text" {
			if s, ok := inner["text"].(string); ok {
				out = append(out, s)
			}
		} else if m["type"] == "text" {
			if s, ok := m["text"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// benchBanners open the stderr lines bench prints on every run before and
// while it works (logging's "%(message)s" lines from the CLI, the agent
// registry and the rollout's progress; benchflow/cli/main.py,
// agents/remote_manifests.py, rollout/, sandbox/, evaluation.py): they
// are never the reason a run failed.
var benchBanners = []string{
	"Agent manifest auto-load:", "Starting environment:", "Reusing caller-owned environment:",
	"Installing ", "Deploying skills", "Skills deployed", "Skills already injected", "Skills distributed",
	"Waiting for environment setup host lock", "Acquired environment setup host lock", "Released environment setup host lock",
	"Resuming into existing job directory", "Retry backoff:", "Oracle mode:", "Running verifier", "Rewards:",
	"Prompt ", "→ ", "… ", "[soft_verify]", "[User]", "[Loop]", "Snapshot ", "session-factory agent",
}

// benchStderrReason is the reason quoted from bench's stderr when the run
// has no verdict: its last [HARD-DEADLINE] or [ERR] line (BenchFlow's host
// backstop, benchflow/rollout/_deadline.py, and the eval's per-task error
// line, evaluation.py), else the first line of head that is not one of
// BenchFlow's progress and registry banners (benchBanners), else "".
func benchStderrReason(head, tail string) string {
	if l := lastLine(tail, func(l string) bool {
		return strings.Contains(l, "[HARD-DEADLINE]") || strings.HasPrefix(l, "[ERR]")
	}); l != "" {
		return l
	}
	for _, l := range strings.Split(head, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		banner := false
		for _, b := range benchBanners {
			if strings.HasPrefix(l, b) {
				banner = true
				break
			}
		}
		if !banner {
			return boundMsg(l)
		}
	}
	return ""
}

// quoted is "; stderr: why", or "" when why is empty.
func quoted(why string) string {
	if why == "" {
		return ""
	}
	return "; stderr: " + why
}

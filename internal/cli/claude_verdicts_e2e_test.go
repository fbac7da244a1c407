package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/harness"
)

// claudeVerdictsScript plays the endings of TestClaudeVerdicts, each task
// told apart by a CASE string of its prompt. Output counts of 0 are what a
// provider may report; they must not make real work "no attempt".
const claudeVerdictsScript = `
cases:
  - when: "CASE-TURNS"
    replies:
      - tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 100, output_tokens: 0}
      - tool_use: [{name: Bash, input: {command: "cat /app/out.txt"}}]
        usage: {input_tokens: 110, output_tokens: 0}
      - tool_use: [{name: Bash, input: {command: "ls /app"}}]
        usage: {input_tokens: 120, output_tokens: 0}
      - tool_use: [{name: Bash, input: {command: "ls /"}}]
        usage: {input_tokens: 130, output_tokens: 0}
  - when: "CASE-RATE"
    replies:
      - error: {status: 429, times: 1}
        tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 100, output_tokens: 10}
      - {text: "Done.", usage: {input_tokens: 110, output_tokens: 5}}
  - when: "CASE-LINGER"
    replies:
      - tool_use:
          - {name: Bash, input: {command: "echo hello > /app/out.txt"}}
          - {name: Bash, input: {command: "sleep 600", run_in_background: true, description: "a server"}}
        usage: {input_tokens: 100, output_tokens: 10}
      - {text: "Done; the server keeps running.", usage: {input_tokens: 110, output_tokens: 5}}
  - when: "CASE-NOTIFY"
    replies:
      - tool_use: [{name: Bash, input: {command: "sleep 1; echo hello > /app/out.txt", run_in_background: true, description: "bg"}}]
        usage: {input_tokens: 1000, output_tokens: 10}
      - {text: "Waiting for it.", usage: {input_tokens: 2000, output_tokens: 20}}
      - {text: "Background finished.", usage: {input_tokens: 3000, output_tokens: 30}}
  - when: "CASE-KILL"
    replies:
      - text: "Writing the file."
        tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 100, output_tokens: 10, cache_read_input_tokens: 7}
      - text: "Now the CLI goes."
        tool_use: [{name: Bash, input: {command: "kill -9 $PPID"}}]
        usage: {input_tokens: 200, output_tokens: 20}
  - when: "CASE-SKILL"
    replies:
      - tool_use: [{name: Skill, input: {skill: "abskill:My_Skill-v2"}}]
        usage: {input_tokens: 100, output_tokens: 10}
      - tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 110, output_tokens: 10}
      - {text: "Done.", usage: {input_tokens: 120, output_tokens: 5}}
`

// streamResults reads the result events of a cell's claude.stream.jsonl.
func streamResults(t *testing.T, dir string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "claude.stream.jsonl"))
	if err != nil {
		t.Error(err)
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["type"] == "result" {
			out = append(out, m)
		}
	}
	return out
}

// TestClaudeVerdicts runs the real CLI against the scripted model over the
// endings that gave wrong verdicts or records (CLAUDE_CODE_MAX_TURNS=3,
// --retries 1):
//   - a max-turns ending after a turn that did the work, the model
//     reporting 0 output tokens: verified and passed, the limit its
//     recorded reason (it was errored "no attempt");
//   - a 429 on the first request: a provider error, run again by
//     --retries, passed on attempt 2 (it was a final solver_error);
//   - a CLI that stays alive after its result (a background server): killed
//     ResultGrace after the result, passed, its solve time ending at the
//     result (it was solver_timeout after the whole budget);
//   - a background task whose notification makes a second result: tokens
//     and calls of both results, the cost the last cumulative one (the
//     second was dropped);
//   - an agent that kills its own CLI before any result: verified, its
//     usage kept from the assistant events once per message, marked
//     partial with the reason (it was dropped);
//   - a skill My_Skill.v2, offered as abskill:My_Skill-v2 and invoked by
//     that name: one invocation (it counted 0).
func TestClaudeVerdicts(t *testing.T) {
	t.Parallel()
	cli := claudeSetup(t)
	fakeModel(t, cli, claudeVerdictsScript)
	setenv(t, "CLAUDE_CODE_MAX_TURNS", "3")
	root, skillRoot, skills := t.TempDir(), t.TempDir(), t.TempDir()
	claudeTask(t, root, "max-turns", "CASE-TURNS", 300)
	claudeTask(t, root, "rate-limited", "CASE-RATE", 300)
	claudeTask(t, root, "linger", "CASE-LINGER", 120)
	claudeTask(t, root, "notify", "CASE-NOTIFY", 300)
	claudeTask(t, root, "kills-cli", "CASE-KILL", 300)
	claudeTask(t, skillRoot, "skill-v2", "CASE-SKILL", 300)
	skill := writeSkill(t, skills, "My_Skill.v2")
	skillArm := "docker-claude-skill:" + skill
	start := time.Now()
	arts, _ := runMainsAtOnce(t,
		[]string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude",
			"--concurrency", "3", "--retries", "1", "--agent-grace", "2"},
		[]string{"tasks", "run", "--tasks-root", skillRoot, "--all", "--harnesses", skillArm, "--agent-grace", "2"})
	a, b := arts[0], arts[1]
	t.Logf("6 cells in %s", time.Since(start).Round(time.Millisecond))
	rows := byCell(a)
	maps.Copy(rows, byCell(b))
	show := func(r artifact.Result) string {
		m := r.Metrics
		return fmt.Sprintf("outcome=%s class=%s error=%q attempt=%d prompt=%v completion=%v cache_read=%v calls=%v cost=%v solve=%v partial=%v %q isolation=%v reported=%v",
			r.Outcome, r.ErrorClass, r.Error, r.Attempt, deref(m.PromptTokens), deref(m.CompletionTokens), deref(m.CacheReadTokens), deref(m.NCalls),
			deref(m.CostUSD), deref(m.SolveSec), m.UsagePartial, m.UsagePartialReason, m.Isolation, m.AgentReported)
	}

	for _, k := range slices.Sorted(maps.Keys(rows)) {
		t.Logf("%s: %s", k, show(rows[k]))
	}
	if r := rows["max-turns docker-claude"]; r.Outcome != "passed" || r.Metrics.AgentReported["terminal_reason"] != "max_turns" ||
		r.Metrics.AgentReported["subtype"] != "error_max_turns" || !strings.Contains(fmt.Sprint(r.Metrics.AgentReported["error_message"]), "maximum number of turns") {
		t.Errorf("max turns after the work: %s", show(r))
	}
	if r := rows["rate-limited docker-claude"]; r.Outcome != "passed" || r.Attempt != 2 || r.Attempts != 2 {
		t.Errorf("a 429 before any turn, then a retry: %s", show(r))
	}
	r := rows["linger docker-claude"]
	killed, _ := r.Metrics.Isolation["killed_after_result_sec"].(float64)
	if r.Outcome != "passed" || r.Metrics.SolverTimeout || killed < harness.ResultGrace.Seconds()-0.5 || killed > harness.ResultGrace.Seconds()+5 ||
		r.Metrics.SolveSec == nil || *r.Metrics.SolveSec > 100 || r.Metrics.AgentReported["terminal_reason"] != "completed" ||
		deref(r.Metrics.VerifierLeftoverProcesses) != 0 {
		t.Errorf("a CLI lingering after its result: %s", show(r))
	}
	r = rows["notify docker-claude"]
	res := streamResults(t, r.OutputDir)
	if len(res) != 2 {
		t.Errorf("notify: %d result events in the stream, want 2 (the scripted background task's notification)", len(res))
	} else {
		last, _ := res[1]["total_cost_usd"].(float64)
		first, _ := res[0]["total_cost_usd"].(float64)
		if r.Outcome != "passed" || deref(r.Metrics.PromptTokens) != int64(6000) || deref(r.Metrics.CompletionTokens) != int64(60) ||
			deref(r.Metrics.NCalls) != int64(3) || r.Metrics.CostUSD == nil || *r.Metrics.CostUSD != last || last <= first ||
			r.Metrics.AgentReported["n_results"] != 2.0 || r.Metrics.UsagePartial {
			t.Errorf("two results (costs %g then %g): %s", first, last, show(r))
		}
	}
	r = rows["kills-cli docker-claude"]
	if r.Outcome != "passed" || !r.Metrics.UsagePartial || !strings.Contains(r.Metrics.UsagePartialReason, "no result event") ||
		deref(r.Metrics.PromptTokens) != int64(300) || deref(r.Metrics.CacheReadTokens) != int64(7) || deref(r.Metrics.NCalls) != int64(2) ||
		r.Metrics.CostUSD != nil {
		t.Errorf("a CLI killed by its agent before any result: %s", show(r))
	}
	s := rows["skill-v2 "+skillArm]
	if ar := s.Metrics.AgentReported; s.Outcome != "passed" || ar["n_skill_invocations"] != 1.0 || ar["treatment"] != "My_Skill.v2" ||
		!strings.Contains(fmt.Sprint(ar["offered_skills"]), "abskill:My_Skill-v2") || fmt.Sprint(ar["unexpected_skills"]) != "[]" {
		t.Errorf("a skill offered as abskill:My_Skill-v2: %s", show(s))
	}
	for _, run := range []string{a.Run.ID, b.Run.ID} {
		if c, n := leftovers(t, cli, run); c+n != 0 {
			t.Errorf("%d containers and %d networks of run %s remain", c, n, run)
		}
	}
}

// TestClaudeSkillNotOfferedRefused: a skill the CLI would load and never
// offer (no frontmatter, or no description) fails the run before anything
// starts, naming the file and why.
func TestClaudeSkillNotOfferedRefused(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	setenv(t, "ANTHROPIC_API_KEY", claudeTestKey)
	setenv(t, "ANTHROPIC_BASE_URL", "http://192.0.2.1:8080")
	setenv(t, harness.ClaudeBinEnv, "/bin/sh") // only its presence is checked before the run
	root, skills := t.TempDir(), t.TempDir()
	claudeTask(t, root, "greet", "CASE-GREET", 120)
	for name, c := range map[string]struct{ md, want string }{
		"plain":  {"Write hello.\n", "no frontmatter"},
		"nodesc": {"---\nname: nodesc\n---\nWrite hello.\n", "no description"},
	} {
		dir := filepath.Join(skills, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(c.md), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		code := mainT(t, []string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude-skill:" + dir, "--output-dir", t.TempDir()}, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), filepath.Join(dir, "SKILL.md")) || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %s", name, code, stderr.String())
		}
	}
}

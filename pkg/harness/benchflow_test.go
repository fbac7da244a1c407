package harness_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// benchArgv is the argv the fake bench got, without the key=value lines.
func benchArgv(args []string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, "cwd=") {
			return args[:i]
		}
	}
	return args
}

// flag is the value following name in argv, and whether name is there.
func flag(argv []string, name string) (string, bool) {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1], true
		}
	}
	return "", false
}

// TestBenchflowPass: the command line from the cell directory, the hard
// deadline, the usage and tool calls (by ACP kind), the fields BenchFlow
// reported, and no n_skill_invocations on a no-skill arm.
func TestBenchflowPass(t *testing.T) {
	tk := benchflowTask(t, nil)
	env, out, err, args := delegatedRun(t, tk, "benchflow:claude-agent-acp", "pass")
	wantVerdict(t, out, err, 1)
	jobs := env.DirV.Path("jobs")
	want := []string{"eval", "run", "--tasks-dir", tk.Dir, "--agent", "claude-agent-acp", "--model", "m", "--sandbox", "docker",
		"--skill-mode", "no-skill", "--jobs-dir", jobs, "--retry-attempts", "0", "--agent-idle-timeout", "0", "--quiet"}
	if got := benchArgv(args); !reflect.DeepEqual(got, want) {
		t.Errorf("bench got\n%q\nwant\n%q", got, want)
	}
	if cwd, _ := argValue(args, "cwd"); cwd != string(env.DirV) {
		t.Errorf("bench ran in %s, want the cell directory", cwd)
	}
	if d, _ := argValue(args, "deadline"); d != strconv.FormatFloat(30+30+600+900+1800, 'f', -1, 64) {
		t.Errorf("BENCHFLOW_ROLLOUT_HARD_DEADLINE %s", d)
	}
	u := usageEvents(env)
	if len(u) != 1 || *u[0].PromptTokens != 900 || *u[0].CompletionTokens != 150 || *u[0].CostUSD != 0.004 || u[0].CacheReadTokens != nil {
		t.Errorf("usage %+v", u)
	}
	tools := map[string]int{}
	for _, e := range env.Events() {
		if tc, ok := e.Data.(events.ToolCallData); ok {
			tools[tc.Name]++
		}
	}
	if !reflect.DeepEqual(tools, map[string]int{"execute": 1, "edit": 1}) {
		t.Errorf("tool calls %v", tools)
	}
	r := out.Finished.AgentReported
	for k, v := range map[string]any{"skill_mode": "no-skill", "skill_source": "none", "usage_source": "provider_response", "n_attempts": 1, "n_skill_invocations_benchflow": 0, "n_tool_calls": 2} {
		if r[k] != v {
			t.Errorf("agent_reported[%s] = %v, want %v", k, r[k], v)
		}
	}
	if _, ok := r["n_skill_invocations"]; ok {
		t.Errorf("a no-skill arm reports n_skill_invocations: %+v", r)
	}
	for _, k := range []string{"benchflow_error", "verifier_error", "agent_timeout_defaulted_sec", "timed_out"} {
		if _, ok := r[k]; ok {
			t.Errorf("agent_reported has %s: %+v", k, r)
		}
	}
}

// TestBenchflowGrammar: a benchflow name's agent is its rest
// (benchflow:acp:pi is the agent acp:pi), and in the skill and self-gen
// forms a BenchFlow namespace takes the next field with it.
func TestBenchflowGrammar(t *testing.T) {
	tk := benchflowTask(t, nil)
	base := t.TempDir()
	pack := filepath.Join(base, "skills", "csv")
	writeFiles(t, pack, map[string]string{"SKILL.md": "---\nname: csv\n---\n"})
	for name, wantAgent := range map[string]string{
		"benchflow:acp:pi": "acp:pi", "benchflow:ai-sdk:codex": "ai-sdk:codex", "benchflow:claude-agent-acp": "claude-agent-acp",
		"benchflow-skill:acp:pi:" + pack: "acp:pi", "benchflow-skill:codex-acp:" + pack: "codex-acp",
		"benchflow-skill:ai-sdk:codex": "ai-sdk:codex", "benchflow-selfgen:omnigent:pi": "omnigent:pi",
	} {
		if err := arm(t, name).Check(base, nil); err != nil {
			t.Errorf("Check(%s): %v", name, err)
			continue
		}
		_, out, err, args := delegatedRun(t, benchflowTask(t, harnesstest.Files{"environment/skills/x/SKILL.md": "---\nname: x\n---\n"}), name, "pass")
		wantVerdict(t, out, err, 1)
		if a, _ := flag(benchArgv(args), "--agent"); a != wantAgent {
			t.Errorf("%s: bench --agent %q, want %q", name, a, wantAgent)
		}
		if d, ok := flag(benchArgv(args), "--skills-dir"); strings.Contains(name, pack) != ok || (ok && filepath.Base(d) != "skills") {
			t.Errorf("%s: --skills-dir %q", name, d)
		}
	}
	if c, why := arm(t, "benchflow:acp:pi").Refusal(tk); c != "" {
		t.Errorf("benchflow:acp:pi refuses a runnable task: %s", why)
	}
	for name, want := range map[string]string{
		"benchflow-skill:acp":     "BenchFlow namespace",
		"benchflow-selfgen:acp":   "BenchFlow namespace",
		"benchflow:vendor:thing":  "only after a BenchFlow namespace",
		"benchflow-skill:codex:":  "empty path",
		"benchflow-skill::skills": "no agent",
	} {
		if err := arm(t, name).Check(base, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%s) = %v, want an error saying %q", name, err, want)
		}
	}
}

// writeFiles writes files (relative path -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, body := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBenchflowSkillPaths: benchflow-skill's path is a skill directory,
// its SKILL.md, or a root whose children hold SKILL.md (only those are
// staged); a root holding none is refused. Packs are staged as real
// copies (a link inside read through; one leaving refused).
func TestBenchflowSkillPaths(t *testing.T) {
	base := t.TempDir()
	writeFiles(t, base, map[string]string{
		"lib/csv-tools/real.md":        "---\nname: tabular-tools\n---\nUse stats.py.\n",
		"lib/csv-tools/scripts/s.py":   "print(1)\n",
		"lib/pdf/SKILL.md":             "---\nname: pdf\n---\n",
		"lib/notes/README.md":          "not a skill\n",
		"empty/notes/README.md":        "no skill here\n",
		"single/SKILL.md-not-it/x.txt": "x",
	})
	if err := os.Symlink("real.md", filepath.Join(base, "lib/csv-tools/SKILL.md")); err != nil {
		t.Fatal(err)
	}
	tk := benchflowTask(t, nil)
	for path, want := range map[string][]string{
		"lib/csv-tools":          {"./csv-tools/SKILL.md"},
		"lib/csv-tools/SKILL.md": {"./csv-tools/SKILL.md"},
		"lib":                    {"./csv-tools/SKILL.md", "./pdf/SKILL.md"},
	} {
		name := "benchflow-skill:claude-agent-acp:" + path
		if err := arm(t, name).Check(base, nil); err != nil {
			t.Errorf("Check(%s): %v", path, err)
			continue
		}
		env, out, err, _ := delegatedRunIn(t, tk, name, "skill", func(e *harnesstest.Env) { e.SpecV.BaseDir = base })
		wantVerdict(t, out, err, 1)
		if !strings.Contains(out.Finished.StdoutTail, "staged skills: "+strings.Join(want, " ")+" ") {
			t.Errorf("%s: bench found %q, want %q", path, out.Finished.StdoutTail, want)
		}
		if fi, err := os.Lstat(env.DirV.Path("skills", "csv-tools", "SKILL.md")); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: staged SKILL.md: %v %v, want a regular file", path, fi, err)
		}
	}
	for path, want := range map[string]string{
		"empty":               "holds no SKILL.md",
		"missing":             "no such file",
		"lib/notes/README.md": "not a SKILL.md",
	} {
		if err := arm(t, "benchflow-skill:x:"+path).Check(base, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%s) = %v, want %q", path, err, want)
		}
	}
	// A link out of a pack is not staged.
	if err := os.Symlink("/etc/passwd", filepath.Join(base, "lib/pdf/leak")); err != nil {
		t.Fatal(err)
	}
	_, _, err, _ := delegatedRunIn(t, tk, "benchflow-skill:claude-agent-acp:lib", "skill", func(e *harnesstest.Env) { e.SpecV.BaseDir = base })
	if err == nil || !strings.Contains(err.Error(), "leak links outside pdf") {
		t.Errorf("a pack linking out was staged: %v", err)
	}
}

// TestBenchflowSkillMetrics: skills_loaded has one entry per
// tool_call_id; n_skill_invocations counts only the loads of the deployed
// treatment packs, by directory or frontmatter name; BenchFlow's own count
// is kept beside it; the self-gen arm has no n_skill_invocations.
func TestBenchflowSkillMetrics(t *testing.T) {
	base := t.TempDir()
	writeFiles(t, base, map[string]string{"csv-tools/SKILL.md": "---\nname: tabular-tools\n---\n"})
	tk := benchflowTask(t, nil)
	_, out, err, _ := delegatedRunIn(t, tk, "benchflow-skill:claude-agent-acp:csv-tools", "skill", func(e *harnesstest.Env) { e.SpecV.BaseDir = base })
	wantVerdict(t, out, err, 1)
	r := out.Finished.AgentReported
	if !reflect.DeepEqual(r["skills_loaded"], []string{"csv-tools", "tabular-tools", "pdf"}) {
		t.Errorf("skills_loaded %v, want one entry per tool_call_id", r["skills_loaded"])
	}
	if r["n_skill_invocations"] != 2 || r["n_skill_invocations_benchflow"] != 4 || r["skill_source"] != "custom_runtime" || r["skill_mode"] != "with-skill" {
		t.Errorf("reported %+v, want 2 treatment loads (pdf is not a treatment pack), BenchFlow's 4", r)
	}
	// The task's own packs are the treatment of benchflow-skill:<agent>.
	bundled := benchflowTask(t, harnesstest.Files{"environment/skills/csv-tools/SKILL.md": "---\nname: csv-tools\n---\n"})
	_, out, err, args := delegatedRun(t, bundled, "benchflow-skill:claude-agent-acp", "skill")
	wantVerdict(t, out, err, 1)
	if _, ok := flag(benchArgv(args), "--skills-dir"); ok {
		t.Errorf("bundled skills passed as --skills-dir: %q", args)
	}
	if r := out.Finished.AgentReported; r["n_skill_invocations"] != 1 || r["skill_source"] != "task_bundled" {
		t.Errorf("bundled: reported %+v", r)
	}
	_, out, err, _ = delegatedRun(t, tk, "benchflow-selfgen:claude-agent-acp", "selfgen")
	wantVerdict(t, out, err, 1)
	if r := out.Finished.AgentReported; r["n_skill_invocations"] != nil || !reflect.DeepEqual(r["skills_loaded"], []string{"skill-creator", "t-skill"}) || r["n_skill_invocations_benchflow"] != 2 {
		t.Errorf("self-gen: reported %+v", r)
	}
}

// TestBenchflowSelfGenCreator: benchflow-selfgen's dir names the
// skill-creator (a creator directory or a root holding one, read through
// a link); only the creator is staged, to <cell>/creator/<name>, and
// passed as --skill-creator-dir, so the root BenchFlow mounts holds it
// alone, never its neighbours. A dir without a creator is refused.
func TestBenchflowSelfGenCreator(t *testing.T) {
	base := t.TempDir()
	writeFiles(t, base, map[string]string{
		"vendor/skill-creator/SKILL.md":        "---\nname: skill-creator\n---\n",
		"vendor/skill-creator/scripts/init.py": "print('init')\n",
		"home/skills/secret-notes/SKILL.md":    "---\nname: secret-notes\n---\nThe answer is 42.\n",
		"nothing/README.md":                    "x",
	})
	if err := os.Symlink("../../vendor/skill-creator", filepath.Join(base, "home/skills/skill-creator")); err != nil {
		t.Fatal(err)
	}
	tk := benchflowTask(t, nil)
	for _, dir := range []string{"home/skills", "home/skills/skill-creator", "vendor/skill-creator"} {
		name := "benchflow-selfgen:claude-agent-acp:" + dir
		if err := arm(t, name).Check(base, nil); err != nil {
			t.Errorf("Check(%s): %v", dir, err)
			continue
		}
		env, out, err, args := delegatedRunIn(t, tk, name, "selfgen", func(e *harnesstest.Env) { e.SpecV.BaseDir = base })
		wantVerdict(t, out, err, 1)
		staged := env.DirV.Path("creator", "skill-creator")
		if c, _ := flag(benchArgv(args), "--skill-creator-dir"); c != staged {
			t.Errorf("%s: --skill-creator-dir %q, want %s", dir, c, staged)
		}
		if _, ok := flag(benchArgv(args), "--skills-dir"); ok {
			t.Errorf("%s: self-gen got --skills-dir", dir)
		}
		if !strings.Contains(out.Finished.StdoutTail, "creator root: ./skill-creator/SKILL.md \n") {
			t.Errorf("%s: the mounted creator root holds %q, want the creator alone", dir, out.Finished.StdoutTail)
		}
		if fi, err := os.Lstat(filepath.Join(staged, "scripts", "init.py")); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: the creator's files are not staged: %v", dir, err)
		}
	}
	for dir, want := range map[string]string{"nothing": "holds no skill-creator", "missing": "no such file"} {
		if err := arm(t, "benchflow-selfgen:x:"+dir).Check(base, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%s) = %v, want %q", dir, err, want)
		}
	}
}

// TestBenchflowEnvironment: bench runs from the cell directory (the
// caller's ./.env is never read); relative path variables are anchored at
// the caller's directory (an owner/repo agents source is not a path and
// stays); behind a proxy, the engine's bridge gateway (a custom bip),
// 172.17.0.1 and host.docker.internal join no_proxy and NO_PROXY.
func TestBenchflowEnvironment(t *testing.T) {
	caller := t.TempDir()
	writeFiles(t, caller, map[string]string{".env": "ANTHROPIC_API_KEY=from-caller\n", "agents/mimo.toml": "name = \"mimo\"\n"})
	t.Chdir(caller)
	t.Setenv("DOCKER_CONFIG", "dockercfg")
	t.Setenv("BENCHFLOW_SKILL_CREATOR_DIR", "./creators/sc")
	t.Setenv("BENCHFLOW_AGENTS_SOURCE", "agents")
	t.Setenv("BENCHFLOW_DOTENV_PATH", "/etc/bench.env")
	t.Setenv("HTTPS_PROXY", "http://proxy.internal:3128")
	t.Setenv("no_proxy", "localhost,127.0.0.1")
	t.Setenv("FAKE_BRIDGE_GATEWAY", "10.99.0.1")
	tk := benchflowTask(t, nil)
	env, out, err, args := delegatedRunIn(t, tk, "benchflow:claude-agent-acp", "pass", func(e *harnesstest.Env) { e.SpecV.BaseDir = caller })
	wantVerdict(t, out, err, 1)
	for k, want := range map[string]string{
		"cwd": string(env.DirV), "dotenv": "none",
		"DOCKER_CONFIG": filepath.Join(caller, "dockercfg"), "BENCHFLOW_SKILL_CREATOR_DIR": filepath.Join(caller, "creators/sc"),
		"BENCHFLOW_AGENTS_SOURCE": filepath.Join(caller, "agents"), "BENCHFLOW_DOTENV_PATH": "/etc/bench.env",
		"no_proxy": "localhost,127.0.0.1,10.99.0.1,172.17.0.1,host.docker.internal",
		"NO_PROXY": "localhost,127.0.0.1,10.99.0.1,172.17.0.1,host.docker.internal",
	} {
		if got, _ := argValue(args, k); got != want {
			t.Errorf("bench saw %s=%q, want %q", k, got, want)
		}
	}
	t.Setenv("BENCHFLOW_AGENTS_SOURCE", "benchflow-ai/agents@main")
	os.Unsetenv("HTTPS_PROXY")
	_, out, err, args = delegatedRunIn(t, tk, "benchflow:claude-agent-acp", "pass", func(e *harnesstest.Env) { e.SpecV.BaseDir = caller })
	wantVerdict(t, out, err, 1)
	if got, _ := argValue(args, "BENCHFLOW_AGENTS_SOURCE"); got != "benchflow-ai/agents@main" {
		t.Errorf("an owner/repo agents source became %q", got)
	}
	if got, _ := argValue(args, "no_proxy"); got != "localhost,127.0.0.1" {
		t.Errorf("no proxy, yet no_proxy %q", got)
	}
}

// TestBenchflowBudgets: a task without agent.timeout_sec gets the 600 s
// budget declared (--config-override, agent_timeout_defaulted_sec); the
// hard deadline is agent budget x turns (2 for self-gen; undeclared
// counts 900) + verifier + build + install (900; 1200 for mimo and
// prime-agent; none for the oracle) + 1800, unless the caller exported
// one; the oracle is never given a budget.
func TestBenchflowBudgets(t *testing.T) {
	undeclared := benchflowTask(t, harnesstest.Files{"task.md": "---\nverifier:\n  timeout_sec: 120\n---\nWrite hello.\n"})
	declared := benchflowTask(t, harnesstest.Files{"task.md": "---\nagent:\n  timeout_sec: 300\nverifier:\n  timeout_sec: 120\nsandbox:\n  build_timeout_sec: 200\n---\nWrite hello.\n"})
	for _, c := range []struct {
		tk         *task.Task
		name       string
		deadline   float64
		overridden bool
	}{
		{undeclared, "benchflow:claude-agent-acp", 900 + 120 + 600 + 900 + 1800, true},
		{undeclared, "benchflow:oracle", 900 + 120 + 600 + 0 + 1800, false},
		{declared, "benchflow:claude-agent-acp", 300 + 120 + 200 + 900 + 1800, false},
		{declared, "benchflow:acp:mimo", 300 + 120 + 200 + 1200 + 1800, false},
		{declared, "benchflow:prime-agent", 300 + 120 + 200 + 1200 + 1800, false},
		{declared, "benchflow-selfgen:codex-acp", 2*300 + 120 + 200 + 900 + 1800, false},
		{undeclared, "benchflow-selfgen:codex-acp", 2*900 + 120 + 600 + 900 + 1800, true},
	} {
		if got := harness.BenchHardDeadline(c.tk, arm(t, c.name).Ref().Arg, map[bool]string{true: "self-gen", false: "no-skill"}[strings.HasPrefix(c.name, "benchflow-selfgen")]); got != c.deadline {
			t.Errorf("%s: deadline %v, want %v", c.name, got, c.deadline)
		}
		_, out, err, args := delegatedRun(t, c.tk, c.name, map[bool]string{true: "oracle", false: "pass"}[c.name == "benchflow:oracle"])
		wantVerdict(t, out, err, 1)
		if d, _ := argValue(args, "deadline"); d != strconv.FormatFloat(c.deadline, 'f', -1, 64) {
			t.Errorf("%s: BENCHFLOW_ROLLOUT_HARD_DEADLINE %s, want %v", c.name, d, c.deadline)
		}
		o, ok := flag(benchArgv(args), "--config-override")
		if ok != c.overridden || (ok && o != `{"agent":{"timeout_sec":600}}`) {
			t.Errorf("%s: --config-override %q (%v), want %v", c.name, o, ok, c.overridden)
		}
		if got := out.Finished.AgentReported["agent_timeout_defaulted_sec"]; (got == 600.0) != c.overridden {
			t.Errorf("%s: agent_timeout_defaulted_sec %v", c.name, got)
		}
	}
	t.Setenv("BENCHFLOW_ROLLOUT_HARD_DEADLINE", "5400")
	_, out, err, args := delegatedRun(t, declared, "benchflow:claude-agent-acp", "pass")
	wantVerdict(t, out, err, 1)
	if d, _ := argValue(args, "deadline"); d != "5400" {
		t.Errorf("the caller's deadline became %s", d)
	}
	if m, g := harness.BenchKill(); m != 600*time.Second || g != 15*time.Second {
		t.Errorf("outer margin %s, kill grace %s, want 600 s and 15 s", m, g)
	}
}

// TestBenchflowOuterKill: bench wedged past its hard deadline (here an
// exported 1 s, with the margin and kill grace shrunk to 1 s each) gets
// SIGTERM to its process group at deadline + margin and SIGKILL a grace
// later (a background child dies too); the row says timed_out with exit
// 124, a solver timeout (reward 0) when the live trajectory shows an
// attempt, errored when it does not; the cell's rollout container is
// removed, another one is not.
func TestBenchflowOuterKill(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	label := dockerScope(t) // the fake docker's view (fakes)
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+label).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
		}
	})
	// Another sweep's container, in another project: never touched.
	other, err := exec.Command("docker", "run", "-d", "--label", "benchflow.owned=true", "--label", "com.docker.compose.project=other__bbbbbbbb", "--label", label, "debian:bookworm-slim", "sleep", "600").Output()
	if err != nil {
		t.Fatal(err)
	}
	harness.SetBenchKill(t, time.Second, time.Second)
	t.Setenv("BENCHFLOW_ROLLOUT_HARD_DEADLINE", "1")
	t.Setenv("FAKE_CONTAINER_LABEL", label)
	for _, c := range []struct {
		name    string
		attempt bool
	}{{"wedged", true}, {"wedged-noattempt", false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			termFile, childPid, ready := filepath.Join(dir, "term"), filepath.Join(dir, "child"), filepath.Join(dir, "ready")
			t.Setenv("FAKE_TERM_FILE", termFile)
			t.Setenv("FAKE_CHILD_PID", childPid)
			t.Setenv("FAKE_READY_FILE", ready)
			// The rollout's sandbox, started before bench as its compose
			// file would label it: an engine slow to start a container
			// must not delay bench's SIGTERM handler past the deadline.
			sb, err := exec.Command("docker", "run", "-d", "--label", "benchflow.owned=true", "--label", "com.docker.compose.project=bf__aaaaaaaa",
				"--label", "com.docker.compose.service=main", "--label", label, "debian:bookworm-slim", "sleep", "600").Output()
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("FAKE_CONTAINER_ID", strings.TrimSpace(string(sb)))
			tk := benchflowTask(t, nil)
			start := time.Now()
			env, out, err, _ := delegatedRun(t, tk, "benchflow:claude-agent-acp", c.name)
			elapsed := time.Since(start)
			if c.attempt {
				wantVerdict(t, out, err, 0)
				if !out.Finished.TimedOut || out.Finished.ExitCode != 124 || out.Finished.AgentReported["timed_out"] != true || out.Finished.AgentReported["partial_trajectory"] != true {
					t.Errorf("finished %+v", out.Finished)
				}
			} else {
				wantErrored(t, out, err, "exit 124", "killed 1s past its hard deadline of 1s before the agent made an attempt")
			}
			// SIGTERM comes at the exported 1 s deadline + 1 s margin (1.7-2.1
			// s after bench was up beside CPU burners: bash runs its trap once
			// the command in hand ends); the wrong deadline, the computed
			// one, is over 1800 s. SIGKILL comes the 1 s grace later, the
			// rollout container's removal on a loaded engine after it (2-5
			// s); bench itself never ends. Both bounds sit far from both.
			termAt := readStamp(t, termFile)
			t.Logf("SIGTERM %s after bench was up, SIGKILL %s after it", termAt.Sub(readStamp(t, ready)), start.Add(elapsed).Sub(termAt))
			if d := termAt.Sub(readStamp(t, ready)); d > 10*time.Second {
				t.Errorf("SIGTERM %s after bench was up, want at the 1 s deadline + 1 s margin", d)
			}
			if d := start.Add(elapsed).Sub(termAt); d < 900*time.Millisecond || d > time.Minute {
				t.Errorf("killed %s after SIGTERM, want the 1 s grace", d)
			}
			waitDead(t, childPid)
			cid, err := os.ReadFile(filepath.Join(env.DirV.Path("jobs"), "2026-01-01__00-00-00", "bf__aaaaaaaa", ".container"))
			if err != nil {
				t.Fatal(err)
			}
			if out, _ := exec.Command("docker", "container", "inspect", strings.TrimSpace(string(cid))).CombinedOutput(); !strings.Contains(string(out), "No such container") {
				t.Errorf("the cell's rollout container is left: %s", out)
			}
		})
	}
	if out, err := exec.Command("docker", "container", "inspect", "-f", "{{.State.Running}}", strings.TrimSpace(string(other))).Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Errorf("another sweep's container was touched: %s %v", out, err)
	}
}

// TestBenchflowVerdicts: partial; a retried attempt (the latest counts,
// n_attempts); the oracle's rollout without model activity (an agent's
// would be no attempt); a thought alone is an attempt; Claude Code's
// synthetic replies are not; an agent timeout after an attempt is 0
// whatever the verifier gave (reward_after_timeout kept), before any
// attempt errored; a verifier timeout is 0 with verifier_timeout; a
// crashed verifier is errored with its error.
func TestBenchflowVerdicts(t *testing.T) {
	tk := benchflowTask(t, nil)
	_, out, err, _ := delegatedRun(t, tk, "benchflow:codex-acp", "partial")
	wantVerdict(t, out, err, 0.25)

	_, out, err, _ = delegatedRun(t, tk, "benchflow:codex-acp", "retried")
	wantVerdict(t, out, err, 0.5)
	if r := out.Finished.AgentReported; r["n_attempts"] != 2 || r["rollout"] != "bf__aaaaaaaa" {
		t.Errorf("retried: reported %+v", r)
	}

	_, out, err, _ = delegatedRun(t, tk, "benchflow:oracle", "oracle")
	wantVerdict(t, out, err, 1)
	_, out, err, _ = delegatedRun(t, tk, "benchflow:codex-acp", "oracle")
	wantErrored(t, out, err, "made no attempt")

	_, out, err, _ = delegatedRun(t, tk, "benchflow:claude-agent-acp", "thought")
	wantVerdict(t, out, err, 0)

	_, out, err, _ = delegatedRun(t, tk, "benchflow:claude-agent-acp", "synthetic")
	wantErrored(t, out, err, "made no attempt")

	_, out, err, _ = delegatedRun(t, tk, "benchflow:claude-agent-acp", "agent-timeout")
	wantVerdict(t, out, err, 0)
	if r := out.Finished.AgentReported; r["reward_after_timeout"] != 1.0 || r["partial_trajectory"] != true || r["agent_timeout"] != true || r["benchflow_error_category"] != "timeout" {
		t.Errorf("agent timeout: reported %+v", r)
	}
	if !out.Finished.TimedOut || out.Verdict.TimedOut {
		t.Errorf("agent timeout: finished timed out %v, verdict timed out %v; want a solver timeout", out.Finished.TimedOut, out.Verdict.TimedOut)
	}

	_, out, err, _ = delegatedRun(t, tk, "benchflow:claude-agent-acp", "agent-timeout-noattempt")
	wantErrored(t, out, err, "made no attempt", "Agent timed out")

	_, out, err, _ = delegatedRun(t, tk, "benchflow:claude-agent-acp", "verifier-timeout")
	wantVerdict(t, out, err, 0)
	if !out.Verdict.TimedOut || out.Finished.TimedOut || out.Finished.AgentReported["verifier_error_category"] != "verifier_timeout" {
		t.Errorf("verifier timeout: verdict %+v, finished %+v", out.Verdict, out.Finished)
	}

	_, out, err, _ = delegatedRun(t, tk, "benchflow:claude-agent-acp", "verifier-crash")
	wantErrored(t, out, err, "exit 1", "no rewards", "verifier crashed: test.sh exited 2")
}

// TestBenchflowErrored: a provider error before any attempt and a bench
// that left no result.json are errored, quoting its [HARD-DEADLINE] or
// [ERR] line, else the first stderr line after BenchFlow's progress and
// registry banners.
func TestBenchflowErrored(t *testing.T) {
	tk := benchflowTask(t, nil)
	for c, parts := range map[string][]string{
		"provider": {"made no attempt", "suspected provider api error"},
		"deadline": {"exit 1", "no rollout result.json", "stderr: [HARD-DEADLINE] rollout cleanup wedged too"},
		"err-line": {"exit 1", "stderr: [ERR] bf: unexpected exception: RuntimeError('sandbox startup failed"},
		"banners":  {"exit 1", "stderr: Docker compose command failed: failed to create network"},
	} {
		t.Run(c, func(t *testing.T) {
			_, out, err, _ := delegatedRun(t, tk, "benchflow:claude-agent-acp", c)
			wantErrored(t, out, err, parts...)
		})
	}
	if got := harness.BenchStderrReason("Agent manifest auto-load: registered 1 agent(s)\nStarting environment: t\n  → ls\nPrompt 1/1: Write hello...\nboom\n", "boom\n"); got != "boom" {
		t.Errorf("reason %q", got)
	}
}

// TestBenchflowUsageUnavailable: usage BenchFlow did not capture is
// omitted (no Usage event), never 0, and the row says usage_source.
func TestBenchflowUsageUnavailable(t *testing.T) {
	env, out, err, _ := delegatedRun(t, benchflowTask(t, nil), "benchflow:codex-acp", "nousage")
	wantVerdict(t, out, err, 1)
	if u := usageEvents(env); len(u) != 0 {
		t.Errorf("usage unavailable, yet %+v", u)
	}
	if out.Finished.AgentReported["usage_source"] != "unavailable" {
		t.Errorf("reported %+v", out.Finished.AgentReported)
	}
}

// TestBenchflowRefusals: BenchFlow arms need the verifier, the image and a
// prompt (the oracle also the solution); a compose or multi-step task is
// refused; so is a task whose review rubric BenchFlow rejects (it would
// not discover the task), and benchflow-skill without a path on a task
// without skills of its own.
func TestBenchflowRefusals(t *testing.T) {
	refused := func(name string, tk *task.Task, want string) {
		t.Helper()
		if c, why := arm(t, name).Refusal(tk); c != events.ClassRefused || !strings.Contains(why, want) {
			t.Errorf("%s: (%q, %q), want refused naming %q", name, c, why, want)
		}
	}
	runs := func(name string, tk *task.Task) {
		t.Helper()
		if c, why := arm(t, name).Refusal(tk); c != "" {
			t.Errorf("%s refused a runnable task: %s", name, why)
		}
	}
	refused("benchflow:codex-acp", benchflowTask(t, harnesstest.Files{"verifier/test.sh": ""}), "test.sh")
	refused("benchflow:oracle", benchflowTask(t, harnesstest.Files{"oracle/solve.sh": ""}), "solve.sh")
	runs("benchflow:codex-acp", benchflowTask(t, nil))
	refused("benchflow:oracle", harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "[[steps]]\nname = \"one\"\n", "steps/one/instruction.md": "One.\n", "steps/one/tests/test.sh": "echo 1\n", "steps/one/solution/solve.sh": "true\n"}), "multi-step")
	refused("benchflow:codex-acp", benchflowTask(t, harnesstest.Files{"verifier/rubric.json": `{"criteria": [{"name": "correct", "description": "d", "guidance": "g", "blocker": 1, "weight": 3}]}`}),
		"verifier/rubric.json invalid: weighted v0.2 rubrics require at least one scored (blocker: 0) criterion")
	refused("benchflow-skill:codex-acp:x", harnesstest.Task(t, "t", harnesstest.Files{"tests/rubric.json": `{"criteria": "all"}`}), "tests/rubric.json invalid: criteria must be a list")
	runs("benchflow:codex-acp", benchflowTask(t, harnesstest.Files{"verifier/rubric.json": `{"criteria": [{"name": "correct", "description": "d", "guidance": "g"}]}`}))
	runs("benchflow:codex-acp", benchflowTask(t, harnesstest.Files{"verifier/rubric.json": `{"criteria": [{"id": "c1", "match_criteria": "output matches"}]}`}))
	refused("benchflow-skill:codex-acp", benchflowTask(t, nil), "environment/skills")
	runs("benchflow-skill:codex-acp", benchflowTask(t, harnesstest.Files{"environment/skills/csv/SKILL.md": "---\nname: csv\n---\n"}))
}

// TestReviewRubric: BenchFlow's review-rubric contract, rule by rule.
func TestReviewRubric(t *testing.T) {
	ok := `{"name": "correct", "description": "d", "guidance": "g"}`
	for rubric, want := range map[string]string{
		`{"criteria": [` + ok + `]}`: "",
		`{"criteria": [{"name": "a", "description": "d", "guidance": "g", "blocker": 0, "weight": 2}, {"name": "b", "description": "d", "guidance": "g", "blocker": 1, "weight": 1}]}`: "",
		`{"criteria": [{"id": "x", "match_criteria": "y"}]}`: "",
		`not json`:                               "not valid JSON",
		`[]`:                                     "not a JSON object",
		`{"criteria": []}`:                       "at least one criterion",
		`{"criteria": [` + ok + `], "extra": 1}`: `unexpected key "extra"`,
		`{"criteria": [{"name": "class", "description": "d", "guidance": "g"}]}`:                                    "non-keyword Python identifier",
		`{"criteria": [{"name": "model_x", "description": "d", "guidance": "g"}]}`:                                  "must not start with 'model_'",
		`{"criteria": [` + ok + `, ` + ok + `]}`:                                                                    "unique",
		`{"criteria": [{"name": "a", "description": "d", "guidance": "g", "blocker": 0}]}`:                          "both blocker and weight",
		`{"criteria": [{"name": "a", "description": "d", "guidance": "g", "blocker": 0, "weight": 1.0}]}`:           "weight must be an integer",
		`{"criteria": [{"name": "a", "description": "d", "guidance": "g", "blocker": 0, "weight": 11}]}`:            "weight must be an integer from 1 to 10",
		`{"criteria": [` + ok + `, {"name": "b", "description": "d", "guidance": "g", "blocker": 0, "weight": 1}]}`: "cannot be mixed",
	} {
		got := harness.ReviewRubricError([]byte(rubric))
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", rubric, got, want)
		}
	}
}

// TestBenchflowPreflight: once per run for every BenchFlow arm; a missing
// bench, a docker without compose, and another BenchFlow sweep running on
// the engine are each one clear error.
func TestBenchflowPreflight(t *testing.T) {
	fakes(t)
	count := filepath.Join(t.TempDir(), "count")
	t.Setenv("FAKE_HELP_COUNT", count)
	names := []string{"oracle", "benchflow:a", "benchflow-skill:b", "codex"}
	if err := harness.Preflight(context.Background(), names); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "x") != 1 {
		t.Errorf("bench --help ran %d times, want once", strings.Count(string(b), "x"))
	}
	if err := harness.Preflight(context.Background(), []string{"codex", "oracle"}); err != nil {
		t.Errorf("no BenchFlow arm, yet %v", err)
	}
	t.Setenv("FAKE_NO_COMPOSE", "1")
	if err := harness.Preflight(context.Background(), names); err == nil || !strings.Contains(err.Error(), "docker compose version") || !strings.Contains(err.Error(), "not a docker command") {
		t.Errorf("no compose: %v", err)
	}
	os.Unsetenv("FAKE_NO_COMPOSE")
	// No bench on PATH: only the fake docker and the system's shell tools.
	only := t.TempDir()
	src, _ := filepath.Abs("testdata/fakes/docker")
	if err := os.Symlink(src, filepath.Join(only, "docker")); err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("PATH")
	t.Setenv("PATH", only)
	if err := harness.Preflight(context.Background(), names); err == nil || !strings.Contains(err.Error(), "bench --help") {
		t.Errorf("no bench: %v", err)
	}
	t.Setenv("PATH", path)
}

// TestBenchflowConcurrentSweep: a BenchFlow sweep already running on the
// engine (a running container labelled benchflow.owned=true) stops the run
// before it starts, with the reason.
func TestBenchflowConcurrentSweep(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	fakes(t)
	out, err := exec.Command("docker", "run", "-d", "--label", "benchflow.owned=true", "--label", dockerScope(t), "debian:bookworm-slim", "sleep", "600").Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
	err = harness.Preflight(context.Background(), []string{"benchflow:claude-agent-acp"})
	if err == nil || !strings.Contains(err.Error(), "another BenchFlow sweep is running on this Docker engine") || !strings.Contains(err.Error(), id[:12]) || !strings.Contains(err.Error(), "removes every benchflow.owned container") {
		t.Errorf("a concurrent sweep: %v", err)
	}
	if err := exec.Command("docker", "rm", "-f", id).Run(); err != nil {
		t.Fatal(err)
	}
	if err := harness.Preflight(context.Background(), []string{"benchflow:claude-agent-acp"}); err != nil {
		t.Errorf("no sweep left, yet %v", err)
	}
}

// TestDelegatedCoverageColumns: every delegated arm's coverage column is
// its Refusal, so `tasks coverage` and --dry-run agree.
func TestDelegatedCoverageColumns(t *testing.T) {
	cols := harness.CoverageRefusers()
	tk := harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": ""})
	for col, name := range map[string]string{"codex": "codex", "terminal-bench:<agent>": "terminal-bench:x", "benchflow:<agent>": "benchflow:x"} {
		_, want := arm(t, name).Refusal(tk)
		if got := cols[col](tk); got != want || got == "" {
			t.Errorf("%s: coverage %q, refusal %q", col, got, want)
		}
	}
	env := harnesstest.Task(t, "env", harnesstest.Files{"task.toml": "version = \"1.0\"\n\n[verifier.env]\nTOKEN = \"${TOKEN}\"\n"})
	if got := cols["codex"](env); got != "" {
		t.Errorf("unresolved env is listed on its own, yet the column says %q", got)
	}
}

// TestBenchflowOneAtATime: two BenchFlow cells of one process never run
// bench at once (BenchFlow removes every benchflow.owned container at each
// job's start and end): the second waits.
func TestBenchflowOneAtATime(t *testing.T) {
	fakes(t)
	t.Setenv("FAKE_BENCH_CASE", "slow")
	spans := filepath.Join(t.TempDir(), "spans")
	t.Setenv("FAKE_SPAN_FILE", spans)
	type result struct {
		out harness.Outcome
		err error
	}
	done := make(chan result, 2)
	for i := 0; i < 2; i++ {
		env := harnesstest.NewEnv(t, benchflowTask(t, nil), "benchflow:claude-agent-acp", &process.Driver{Host: true})
		go func() {
			_, out, err := harnesstest.Run(context.Background(), arm(t, "benchflow:claude-agent-acp"), env)
			done <- result{out, err}
		}()
	}
	for i := 0; i < 2; i++ {
		r := <-done
		wantVerdict(t, r.out, r.err, 1)
	}
	b, err := os.ReadFile(spans)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		kinds = append(kinds, strings.Fields(l)[0])
	}
	if !reflect.DeepEqual(kinds, []string{"start", "end", "start", "end"}) {
		t.Errorf("bench runs overlapped: %q", b)
	}
}

// TestBenchflowSkillFetchedOnAWorker: benchflow-skill's skill directory
// is gone on the worker; the arm stages its stored tree, fetched into the
// node's cache, under the planned directory's name (bench finds
// ./csv-tools/SKILL.md, not the cache's digest).
func TestBenchflowSkillFetchedOnAWorker(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	writeFiles(t, base, map[string]string{"csv-tools/SKILL.md": "---\nname: tabular-tools\n---\nUse stats.py.\n", "csv-tools/scripts/s.py": "print(1)\n"})
	b, _ := bustest.Bus(t)
	store, err := trees.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	planned := filepath.Join(base, "csv-tools")
	digest, err := trees.Put(ctx, b, store, planned)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(planned); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	tk := benchflowTask(t, nil)
	env, out, err, _ := delegatedRunIn(t, tk, "benchflow-skill:claude-agent-acp:csv-tools", "skill", func(e *harnesstest.Env) {
		e.SpecV.BaseDir = base
		e.PlanV.Trees = []events.InputTree{{Name: "skill dir", Path: planned, Digest: digest}}
		e.Trees = func(ctx context.Context, d string) (string, error) { return trees.Fetch(ctx, store, d, cache) }
	})
	wantVerdict(t, out, err, 1)
	if !strings.Contains(out.Finished.StdoutTail, "staged skills: ./csv-tools/SKILL.md ") {
		t.Errorf("bench found %q, want ./csv-tools/SKILL.md", out.Finished.StdoutTail)
	}
	if data, err := os.ReadFile(env.DirV.Path("skills", "csv-tools", "scripts", "s.py")); err != nil || string(data) != "print(1)\n" {
		t.Errorf("staged scripts/s.py: %q, %v", data, err)
	}
}

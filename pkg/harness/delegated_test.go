package harness_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
	"github.com/proctor-eval/proctor/pkg/task"
)

// fakes puts the fake harbor, bench and docker of testdata/fakes first on
// PATH (the host driver runs with the caller's environment).
func fakes(t *testing.T) {
	t.Helper()
	dir, err := filepath.Abs("testdata/fakes")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// delegatedRun runs harness name on tk with the fake tools, case c, and
// returns the env, the outcome, the error and the argv the tool got.
func delegatedRun(t *testing.T, tk *task.Task, name, c string) (*harnesstest.Env, harness.Outcome, error, []string) {
	t.Helper()
	fakes(t)
	t.Setenv("FAKE_HARBOR_CASE", c)
	t.Setenv("FAKE_BENCH_CASE", c)
	argsFile := filepath.Join(t.TempDir(), "args")
	t.Setenv("FAKE_ARGS_FILE", argsFile)
	env := harnesstest.NewEnv(t, tk, name, &process.Driver{Host: true})
	_, out, err := harnesstest.Run(context.Background(), arm(t, name), env)
	b, _ := os.ReadFile(argsFile)
	return env, out, err, strings.Split(strings.TrimSpace(string(b)), "\n")
}

func usageEvents(env *harnesstest.Env) []events.UsageData {
	var out []events.UsageData
	for _, e := range env.Events() {
		if u, ok := e.Data.(events.UsageData); ok {
			out = append(out, u)
		}
	}
	return out
}

func wantVerdict(t *testing.T, out harness.Outcome, err error, reward float64) {
	t.Helper()
	if err != nil {
		t.Fatalf("errored: %v", err)
	}
	if out.Verdict == nil || out.Verdict.Reward == nil || *out.Verdict.Reward != reward {
		t.Fatalf("verdict %+v, want reward %v", out.Verdict, reward)
	}
}

// wantErrored: the cell is errored (solver_error) with a reason containing
// every part.
func wantErrored(t *testing.T, out harness.Outcome, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("a verdict (%+v), want errored", out.Verdict)
	}
	var ce *events.ClassError
	if !errors.As(err, &ce) || ce.Class != events.ClassSolverError {
		t.Fatalf("error %v is not solver_error", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("reason %q does not say %q", err, p)
		}
	}
}

// TestDelegatedRegistry: the delegated kinds parse, are listed, and their
// oracle rows are setup checks, never compared.
func TestDelegatedRegistry(t *testing.T) {
	listed := map[harness.Kind]bool{}
	for _, in := range harness.Registry() {
		listed[in.Kind] = in.Available
	}
	for _, k := range []harness.Kind{harness.Codex, harness.ClaudeCode, harness.TerminalBench, harness.BenchFlow, harness.BenchFlowSkill, harness.BenchFlowSelfGen} {
		if !listed[k] {
			t.Errorf("%s not listed as available", k)
		}
	}
	for name, setup := range map[string]bool{
		"codex": false, "claude-code": false, "terminal-bench:terminus-2": false, "terminal-bench:oracle": true,
		"benchflow:claude-agent-acp": false, "benchflow:oracle": true, "benchflow-skill:codex-acp": false,
		"benchflow-skill:oracle:skills/x": true, "benchflow-selfgen:codex-acp:seed": false,
	} {
		if _, err := harness.Parse(name); err != nil {
			t.Errorf("Parse(%q): %v", name, err)
		}
		if got := harness.IsSetupCheck(name); got != setup {
			t.Errorf("IsSetupCheck(%q) = %v, want %v", name, got, setup)
		}
	}
	for _, bad := range []string{"benchflow", "terminal-bench", "codex:x", "claude-code:y"} {
		if _, err := harness.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// benchflowTask writes a BenchFlow task (task.md, oracle/, verifier/) plus
// extra files (an empty value deletes) and loads it.
func benchflowTask(t *testing.T, extra harnesstest.Files) *task.Task {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bf")
	files := harnesstest.Files{
		"task.md":                "---\nagent:\n  timeout_sec: 30\nverifier:\n  timeout_sec: 30\n---\n## prompt\n\nWrite hello.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"oracle/solve.sh":        "echo hello > /app/out.txt\n",
		"verifier/test.sh":       "echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	for rel, body := range files {
		if body == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestHarborRefusals: what Harbor itself would reject is refused before any
// work, never run (it exits 1, which would read as a fail).
func TestHarborRefusals(t *testing.T) {
	migrated := harnesstest.Files{
		"task.toml": "version = \"1.0\"\n", "instruction.md": "Write hello.\n",
		"tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n", "solution/solve.sh": "echo hello > /app/out.txt\n",
	}
	with := func(base harnesstest.Files, k, v string) harnesstest.Files {
		out := harnesstest.Files{}
		for a, b := range base {
			out[a] = b
		}
		out[k] = v
		return out
	}
	cases := []struct {
		name, harness string
		tk            *task.Task
		want          string
	}{
		{"no task.toml (a BenchFlow task)", "codex", benchflowTask(t, nil), "task.toml"},
		{"no environment/", "codex", harnesstest.Task(t, "t", harnesstest.Files{"environment/Dockerfile": "", "task.toml": "version = \"1.0\"\n[environment]\ndocker_image = \"debian:bookworm-slim\"\n"}), "environment/"},
		{"no instruction.md", "claude-code", harnesstest.Task(t, "t", harnesstest.Files{"instruction.md": ""}), "instruction.md"},
		{"no tests/test.sh", "terminal-bench:terminus-2", harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": ""}), "tests/test.sh"},
		{"oracle without solve.sh", "terminal-bench:oracle", harnesstest.Task(t, "t", harnesstest.Files{"solution/solve.sh": ""}), "solution/solve.sh"},
		{"test.sh reads /verifier", "codex", harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": "python3 /verifier/check.py\n"}), "tests/test.sh reads /verifier"},
		{"solve.sh reads /oracle", "terminal-bench:oracle", harnesstest.Task(t, "t", harnesstest.Files{"solution/solve.sh": "cp \"/oracle/answer.txt\" /app/\n"}), "solution/solve.sh reads /oracle"},
		{"migrated: instruction.md disagrees", "codex", benchflowTask(t, with(migrated, "instruction.md", "Write goodbye.\n")), "instruction.md disagrees"},
		{"migrated: test.sh disagrees", "codex", benchflowTask(t, with(migrated, "tests/test.sh", "echo 1 > /logs/verifier/reward.txt # always\n")), "tests/test.sh disagrees with verifier/test.sh"},
	}
	for _, c := range cases {
		class, why := arm(t, c.harness).Refusal(c.tk)
		if class != events.ClassRefused || !strings.Contains(why, c.want) {
			t.Errorf("%s: refusal (%q, %q), want refused naming %q", c.name, class, why, c.want)
		}
	}
	// What Harbor runs is not refused: a Windows verifier, a path that
	// only contains "verifier", a migrated directory that agrees.
	for name, tk := range map[string]*task.Task{
		"test.bat":  harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": "", "tests/test.bat": "echo 1 > C:\\logs\\verifier\\reward.txt\r\n"}),
		"mentions":  harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": "cd /tests/verifier_helpers && echo 1 > /logs/verifier/reward.txt\n"}),
		"migrated":  benchflowTask(t, migrated),
		"plain":     harnesstest.Task(t, "t", nil),
		"oracle ok": harnesstest.Task(t, "t", nil),
	} {
		if class, why := arm(t, "terminal-bench:oracle").Refusal(tk); class != "" {
			t.Errorf("%s: refused: %s", name, why)
		}
	}
}

// TestHarborPass: the command line, the working directory, the verdict
// from result.json and the usage Harbor reported.
func TestHarborPass(t *testing.T) {
	tk := harnesstest.Task(t, "t", nil)
	env, out, err, args := delegatedRun(t, tk, "terminal-bench:terminus-2", "pass")
	wantVerdict(t, out, err, 1)
	want := []string{"run", "-p", tk.Dir, "-a", "terminus-2", "-m", "m", "--jobs-dir", env.DirV.Path("jobs"), "cwd=" + filepath.Dir(env.SpecV.TasksRoot)}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("harbor got %q, want %q", args, want)
	}
	u := usageEvents(env)
	if len(u) != 1 || *u[0].PromptTokens != 1200 || *u[0].CompletionTokens != 240 || *u[0].CacheReadTokens != 300 || *u[0].CostUSD != 0.0123 || u[0].CacheWriteTokens != nil {
		t.Errorf("usage %+v", u)
	}
	if got := env.Types(); len(got) < 2 || got[0] != events.Started || got[1] != events.Usage {
		t.Errorf("events %v", got)
	}
	if out.Finished.ExitCode != 0 || out.Finished.TimedOut {
		t.Errorf("finished %+v", out.Finished)
	}
}

// TestHarborVerdicts: partial, missing usage (no Usage event: null, never
// 0), and an agent timeout Harbor still verified.
func TestHarborVerdicts(t *testing.T) {
	tk := harnesstest.Task(t, "t", nil)
	_, out, err, _ := delegatedRun(t, tk, "codex", "partial")
	wantVerdict(t, out, err, 0.5)

	env, out, err, _ := delegatedRun(t, tk, "claude-code", "nousage")
	wantVerdict(t, out, err, 1)
	if u := usageEvents(env); len(u) != 0 {
		t.Errorf("Harbor reported no usage, yet %+v", u)
	}

	_, out, err, _ = delegatedRun(t, tk, "codex", "agent-timeout")
	wantVerdict(t, out, err, 0)
	if out.Finished.AgentReported["agent_timeout"] != true {
		t.Errorf("agent timeout not reported: %+v", out.Finished.AgentReported)
	}
}

// TestHarborErrored: Harbor exits 0 for an errored trial; the cell is
// errored from result.json, never a fail. Two trials, a hostile reward (out
// of range, a string, a result.json linked to a passing one elsewhere), a
// job mean that disagrees and an exit 1 without result are errored too.
func TestHarborErrored(t *testing.T) {
	tk := harnesstest.Task(t, "t", nil)
	for c, parts := range map[string][]string{
		"errored":       {"exit 0", "errored trial: RuntimeError: Docker compose up failed"},
		"two":           {"2 trial directories", "t__aaaa, t__bbbb", "exactly one attempt"},
		"bad-reward":    {"reward 1.5 is not a number in [0,1]"},
		"mean-mismatch": {"eval mean 0 disagrees with the trial's reward 1"},
		"string-reward": {`rewards["reward"] is 1, not a number`},
		"symlink":       {"no trial result.json"},
		"reject":        {"exit 1", "no trial result.json", "stderr: Error: task t is missing tests/test.sh"},
	} {
		t.Run(c, func(t *testing.T) {
			_, out, err, _ := delegatedRun(t, tk, "codex", c)
			wantErrored(t, out, err, parts...)
		})
	}
}

// TestHarborTimeout: at the budget (agent + verifier + build) harbor gets
// SIGTERM, the grace, then its process group is killed, background child
// included; the cell is a solver timeout (a miss), not errored.
func TestHarborTimeout(t *testing.T) {
	tk := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "version = \"1.0\"\n[agent]\ntimeout_sec = 1\n[verifier]\ntimeout_sec = 0.5\n[environment]\nbuild_timeout_sec = 0.5\n"})
	dir := t.TempDir()
	termFile, childPid := filepath.Join(dir, "term"), filepath.Join(dir, "child")
	t.Setenv("FAKE_TERM_FILE", termFile)
	t.Setenv("FAKE_CHILD_PID", childPid)
	t.Setenv("PROCTOR_DELEGATE_GRACE_SEC", "1.5")
	start := time.Now()
	_, out, err, _ := delegatedRun(t, tk, "codex", "timeout")
	elapsed := time.Since(start)
	wantVerdict(t, out, err, 0)
	if !out.Finished.TimedOut || out.Finished.Reason != "timeout" {
		t.Errorf("finished %+v, want timed out", out.Finished)
	}
	b, err := os.ReadFile(termFile)
	if err != nil {
		t.Fatalf("harbor never got SIGTERM: %v", err)
	}
	termAt, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if sinceStart := termAt - float64(start.UnixNano())/1e9; sinceStart < 1.9 || sinceStart > 6 {
		t.Errorf("SIGTERM %.2fs after the start, want at the 2 s budget", sinceStart)
	}
	if elapsed < 3400*time.Millisecond || elapsed > 15*time.Second {
		t.Errorf("killed after %s, want the 2 s budget plus the 1.5 s grace", elapsed)
	}
	pb, err := os.ReadFile(childPid)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pb)))
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("harbor's background child %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBenchflowPass: the command line from the cell directory, the hard
// deadline, the usage and tool calls, skills fields from the trajectory.
func TestBenchflowPass(t *testing.T) {
	tk := benchflowTask(t, nil)
	env, out, err, args := delegatedRun(t, tk, "benchflow:claude-agent-acp", "pass")
	wantVerdict(t, out, err, 1)
	jobs := env.DirV.Path("jobs")
	want := []string{"eval", "run", "--tasks-dir", tk.Dir, "--agent", "claude-agent-acp", "--model", "m", "--sandbox", "docker",
		"--skill-mode", "no-skill", "--jobs-dir", jobs, "--retry-attempts", "0", "--agent-idle-timeout", "0", "--quiet",
		"cwd=" + string(env.DirV), "deadline=" + strconv.FormatFloat(30+30+tk.BuildTimeoutSec+1800, 'f', -1, 64)}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("bench got\n%q\nwant\n%q", args, want)
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
	if !reflect.DeepEqual(tools, map[string]int{"bash": 1, "edit": 1}) {
		t.Errorf("tool calls %v", tools)
	}
	if r := out.Finished.AgentReported; r["n_skill_invocations"] != 0 || len(r["skills_loaded"].([]string)) != 0 || r["skill_mode"] != "no-skill" {
		t.Errorf("reported %+v", r)
	}
}

// TestBenchflowVerdicts: partial; the oracle's rollout without any model
// activity (an agent's would be no attempt); usage BenchFlow did not
// capture is omitted, never 0.
func TestBenchflowVerdicts(t *testing.T) {
	tk := benchflowTask(t, nil)
	_, out, err, _ := delegatedRun(t, tk, "benchflow:codex-acp", "partial")
	wantVerdict(t, out, err, 0.25)
	// The oracle runs solve.sh: no tool call and no tokens is not "no attempt".
	_, out, err, _ = delegatedRun(t, tk, "benchflow:oracle", "oracle")
	wantVerdict(t, out, err, 1)
	_, out, err, _ = delegatedRun(t, tk, "benchflow:codex-acp", "oracle")
	wantErrored(t, out, err, "made no attempt")
	env, out, err, _ := delegatedRun(t, tk, "benchflow:codex-acp", "nousage")
	wantVerdict(t, out, err, 1)
	if u := usageEvents(env); len(u) != 0 {
		t.Errorf("usage unavailable, yet %+v", u)
	}
}

// TestBenchflowErrored: a provider error before any attempt (the CLI's
// synthetic "API Error" reply is not an attempt), two rollout directories,
// and no result.json with a [HARD-DEADLINE] stderr line are errored with
// the reason quoted.
func TestBenchflowErrored(t *testing.T) {
	tk := benchflowTask(t, nil)
	for c, parts := range map[string][]string{
		"provider": {"made no attempt", "suspected provider api error"},
		"two":      {"2 rollout directories", "exactly one attempt"},
		"deadline": {"exit 1", "no rollout result.json", "[HARD-DEADLINE] rollout cleanup wedged too"},
	} {
		t.Run(c, func(t *testing.T) {
			_, out, err, _ := delegatedRun(t, tk, "benchflow:claude-agent-acp", c)
			wantErrored(t, out, err, parts...)
		})
	}
}

// TestBenchflowSkillStaged: an external skill is staged as a real copy
// (a symlink inside it copied as its target; one leaving it refused), passed
// with --skills-dir, and the skill fields come from the trajectory.
func TestBenchflowSkillStaged(t *testing.T) {
	base := t.TempDir()
	skill := filepath.Join(base, "csv-tools")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "real.md"), []byte("---\nname: csv-tools\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.md", filepath.Join(skill, "SKILL.md")); err != nil {
		t.Fatal(err)
	}
	tk := benchflowTask(t, nil)
	fakes(t)
	t.Setenv("FAKE_BENCH_CASE", "skill")
	name := "benchflow-skill:claude-agent-acp:csv-tools"
	env := harnesstest.NewEnv(t, tk, name, &process.Driver{Host: true})
	env.SpecV.BaseDir = base
	if err := arm(t, name).Check(base); err != nil {
		t.Fatal(err)
	}
	_, out, err := harnesstest.Run(context.Background(), arm(t, name), env)
	wantVerdict(t, out, err, 1)
	staged := env.DirV.Path("skills", "csv-tools", "SKILL.md")
	if fi, err := os.Lstat(staged); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("staged SKILL.md: %v %v, want a regular file", fi, err)
	}
	if !strings.Contains(out.Finished.StdoutTail, "staged skills: ./csv-tools/SKILL.md") {
		t.Errorf("bench did not find the staged skill: %q", out.Finished.StdoutTail)
	}
	r := out.Finished.AgentReported
	if r["n_skill_invocations"] != 2 || !reflect.DeepEqual(r["skills_loaded"], []string{"csv-tools"}) || r["skill_mode"] != "with-skill" {
		t.Errorf("reported %+v", r)
	}

	// A symlink out of the skill directory is not staged.
	if err := os.Symlink("/etc/passwd", filepath.Join(skill, "leak")); err != nil {
		t.Fatal(err)
	}
	env = harnesstest.NewEnv(t, tk, name, &process.Driver{Host: true})
	env.SpecV.BaseDir = base
	if _, _, err := harnesstest.Run(context.Background(), arm(t, name), env); err == nil || !strings.Contains(err.Error(), "links outside the skill directory") {
		t.Errorf("a skill linking out was staged: %v", err)
	}
	if err := arm(t, "benchflow-skill:x:missing").Check(base); err == nil {
		t.Error("a missing skill path passed Check")
	}
}

// TestBenchflowRefusals: BenchFlow arms need the verifier, the image and a
// prompt; the oracle also the solution.
func TestBenchflowRefusals(t *testing.T) {
	if c, why := arm(t, "benchflow:codex-acp").Refusal(benchflowTask(t, harnesstest.Files{"verifier/test.sh": ""})); c != events.ClassRefused || !strings.Contains(why, "test.sh") {
		t.Errorf("no verifier: (%q, %q)", c, why)
	}
	if c, why := arm(t, "benchflow:oracle").Refusal(benchflowTask(t, harnesstest.Files{"oracle/solve.sh": ""})); c != events.ClassRefused || !strings.Contains(why, "solve.sh") {
		t.Errorf("oracle without solution: (%q, %q)", c, why)
	}
	if c, why := arm(t, "benchflow:codex-acp").Refusal(benchflowTask(t, nil)); c != "" {
		t.Errorf("refused a runnable task: %s", why)
	}
}

// TestBenchflowPreflight: once per run for every BenchFlow arm; a missing
// bench or a docker without compose is one clear error.
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
	// No bench on PATH: only the fake docker and the system's shell tools.
	only := t.TempDir()
	src, _ := filepath.Abs("testdata/fakes/docker")
	if err := os.Symlink(src, filepath.Join(only, "docker")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", only)
	if err := harness.Preflight(context.Background(), names); err == nil || !strings.Contains(err.Error(), "bench --help") {
		t.Errorf("no bench: %v", err)
	}
}

// TestDelegatedRealTools runs the installed harbor / bench on a small task
// when PROCTOR_TEST_HARBOR=1 / PROCTOR_TEST_BENCH=1 (they are not installed
// where the project's tests usually run). It asserts a verdict for the
// oracle, which must pass.
func TestDelegatedRealTools(t *testing.T) {
	for _, c := range []struct{ env, name string }{{"PROCTOR_TEST_HARBOR", "terminal-bench:oracle"}, {"PROCTOR_TEST_BENCH", "benchflow:oracle"}} {
		t.Run(c.name, func(t *testing.T) {
			if os.Getenv(c.env) != "1" {
				t.Skipf("set %s=1 to run the installed tool", c.env)
			}
			if c.env == "PROCTOR_TEST_BENCH" {
				if err := harness.Preflight(context.Background(), []string{c.name}); err != nil {
					t.Fatal(err)
				}
			}
			tk := harnesstest.Task(t, "hello", harnesstest.Files{"tests/test.sh": "#!/bin/bash\nif [ \"$(cat /app/out.txt)\" = hello ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"})
			env := harnesstest.NewEnv(t, tk, c.name, &process.Driver{Host: true})
			_, out, err := harnesstest.Run(context.Background(), arm(t, c.name), env)
			wantVerdict(t, out, err, 1)
		})
	}
}

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

// fakesDir is testdata/fakes, absolute (read before any test changes
// directory).
var fakesDir, _ = filepath.Abs("testdata/fakes")

// fakes puts the fake harbor, bench and docker of testdata/fakes first on
// PATH (the host driver runs with the caller's environment), the fake
// docker scoped to the test's own containers (dockerScope).
func fakes(t *testing.T) {
	t.Helper()
	t.Setenv("PATH", fakesDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_DOCKER_SCOPE", dockerScope(t))
}

// dockerScope is the label of a test's containers on the shared engine
// (one for a test and its subtests, in this process). Through the fake
// docker (FAKE_DOCKER_SCOPE) a test starts containers with it and lists
// only those: the BenchFlow arms' preflight refuses to run beside any
// running benchflow.owned container, and the stand-ins for another sweep
// that one test starts would otherwise stop the runs of tests in other
// packages running at the same time (internal/cli's BenchFlow rows).
func dockerScope(t *testing.T) string {
	top, _, _ := strings.Cut(t.Name(), "/")
	return "proctor.test=" + top + "-" + strconv.Itoa(os.Getpid())
}

// delegatedRun runs harness name on tk with the fake tools, case c, and
// returns the env, the outcome, the error and the argv the tool got
// (followed by the key=value lines the fake adds).
func delegatedRun(t *testing.T, tk *task.Task, name, c string) (*harnesstest.Env, harness.Outcome, error, []string) {
	t.Helper()
	return delegatedRunIn(t, tk, name, c, nil)
}

// delegatedRunIn is delegatedRun with the env adjusted by edit first.
func delegatedRunIn(t *testing.T, tk *task.Task, name, c string, edit func(*harnesstest.Env)) (*harnesstest.Env, harness.Outcome, error, []string) {
	t.Helper()
	fakes(t)
	t.Setenv("FAKE_HARBOR_CASE", c)
	t.Setenv("FAKE_BENCH_CASE", c)
	argsFile := filepath.Join(t.TempDir(), "args")
	t.Setenv("FAKE_ARGS_FILE", argsFile)
	env := harnesstest.NewEnv(t, tk, name, &process.Driver{Host: true})
	if edit != nil {
		edit(env)
	}
	_, out, err := harnesstest.Run(context.Background(), arm(t, name), env)
	b, _ := os.ReadFile(argsFile)
	return env, out, err, strings.Split(strings.TrimSpace(string(b)), "\n")
}

// argValue is the value of the key=value line key in args, and whether
// there is one.
func argValue(args []string, key string) (string, bool) {
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
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
		"benchflow-skill:oracle:skills/x": true, "benchflow-selfgen:codex-acp:seed": false, "benchflow:acp:pi": false,
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

// TestHarborRefusals: what Harbor 0.22 itself would reject is refused
// before any work, never run (it exits 1, which would read as a fail);
// what it runs is not.
func TestHarborRefusals(t *testing.T) {
	migrated := harnesstest.Files{
		"task.toml": "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n", "instruction.md": "Write hello.\n",
		"tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n", "solution/solve.sh": "echo hello > /app/out.txt\n",
	}
	with := func(base harnesstest.Files, kv ...string) harnesstest.Files {
		out := harnesstest.Files{}
		for a, b := range base {
			out[a] = b
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	windows := "[environment]\nos = \"windows\"\n"
	cases := []struct {
		name, harness string
		tk            *task.Task
		want          string
	}{
		{"no task.toml (a BenchFlow task)", "codex", benchflowTask(t, nil), "task.toml"},
		{"no environment/", "codex", harnesstest.Task(t, "t", harnesstest.Files{"environment/Dockerfile": "", "task.toml": "version = \"1.0\"\n[environment]\ndocker_image = \"debian:bookworm-slim\"\n"}), "environment/"},
		{"no instruction.md", "claude-code", harnesstest.Task(t, "t", harnesstest.Files{"instruction.md": ""}), "instruction.md"},
		{"no tests/test.sh", "terminal-bench:terminus-2", harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": ""}), "tests/test.sh"},
		{"a Linux task with only test.bat", "codex", harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": "", "tests/test.bat": "echo 1\r\n"}), "Harbor needs tests/test.sh"},
		{"a Windows task with only test.sh", "codex", harnesstest.Task(t, "t", harnesstest.Files{"task.toml": windows}), "tests/test.bat for a Windows task"},
		{"oracle without solve.sh", "terminal-bench:oracle", harnesstest.Task(t, "t", harnesstest.Files{"solution/solve.sh": ""}), "solution/solve.sh"},
		{"Windows oracle without solve.bat", "terminal-bench:oracle", harnesstest.Task(t, "t", harnesstest.Files{"task.toml": windows, "tests/test.bat": "echo 1\r\n"}), "solution/solve.bat"},
		{"test.sh reads /verifier", "codex", harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": "python3 /verifier/check.py\n"}), "tests/test.sh reads /verifier"},
		{"solve.sh reads /oracle", "terminal-bench:oracle", harnesstest.Task(t, "t", harnesstest.Files{"solution/solve.sh": "cp \"/oracle/answer.txt\" /app/\n"}), "solution/solve.sh reads /oracle"},
		{"migrated: instruction.md differs", "codex", benchflowTask(t, with(migrated, "instruction.md", "Write goodbye.\n")), "prompt: the task.md prompt differs from instruction.md"},
		{"migrated: test.sh differs", "codex", benchflowTask(t, with(migrated, "tests/test.sh", "echo 1 > /logs/verifier/reward.txt # always\n")), "tests/test.sh differs from verifier/test.sh"},
		{"migrated: a budget differs", "codex", benchflowTask(t, with(migrated, "task.toml", "[agent]\ntimeout_sec = 900\n[verifier]\ntimeout_sec = 30\n")), "agent.timeout_sec: 30 in task.md, 900 in task.toml"},
	}
	for _, c := range cases {
		class, why := arm(t, c.harness).Refusal(c.tk)
		if class != events.ClassRefused || !strings.Contains(why, c.want) {
			t.Errorf("%s: refusal (%q, %q), want refused naming %q", c.name, class, why, c.want)
		}
	}
	// What Harbor runs is not refused: a Windows task with its .bat
	// scripts, a separate verifier environment bringing its own tests, a
	// multi-step task (its step files are Harbor's to check), a path that
	// only contains "verifier", a migrated directory that agrees.
	for name, tk := range map[string]*task.Task{
		"windows":              harnesstest.Task(t, "t", harnesstest.Files{"task.toml": windows, "tests/test.sh": "", "solution/solve.sh": "", "tests/test.bat": "echo 1 > C:\\logs\\verifier\\reward.txt\r\n", "solution/solve.bat": "echo hello\r\n"}),
		"separate verifier":    harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "[verifier]\nenvironment_mode = \"separate\"\n", "tests/test.sh": "", "tests/Dockerfile": "FROM debian:bookworm-slim\nCOPY . /tests\n"}),
		"verifier environment": harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "[verifier.environment]\ndocker_image = \"graders:1\"\n", "tests/test.sh": ""}),
		"multi-step": harnesstest.Task(t, "t", harnesstest.Files{
			"task.toml": "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n", "instruction.md": "", "tests/test.sh": "", "solution/solve.sh": "",
			"steps/one/instruction.md": "One.\n", "steps/two/instruction.md": "Two.\n", "steps/one/tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
		}),
		"mentions": harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": "cd /tests/verifier_helpers && echo 1 > /logs/verifier/reward.txt\n"}),
		"migrated": benchflowTask(t, migrated),
		"plain":    harnesstest.Task(t, "t", nil),
	} {
		if class, why := arm(t, "terminal-bench:oracle").Refusal(tk); class != "" {
			t.Errorf("%s: refused: %s", name, why)
		}
	}
	if c, why := arm(t, "codex").Refusal(harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "[verifier]\nenvironment_mode = \"shared\"\n", "tests/test.sh": ""})); c != events.ClassRefused {
		t.Errorf("a shared verifier without tests/test.sh: (%q, %q)", c, why)
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

// TestHarborMultiStep: a multi-step task goes to Harbor whole; the trial's
// rolled-up reward is the verdict and the usage is its steps' summed, as
// Harbor's compute_token_cost_totals does (the trial has no agent_result
// of its own).
func TestHarborMultiStep(t *testing.T) {
	tk := harnesstest.Task(t, "t", harnesstest.Files{
		"task.toml": "[[steps]]\nname = \"scaffold\"\n[[steps]]\nname = \"extend\"\n", "instruction.md": "", "solution/solve.sh": "",
		"steps/scaffold/instruction.md": "Scaffold.\n", "steps/extend/instruction.md": "Extend.\n",
	})
	if c, why := arm(t, "codex").Refusal(tk); c != "" {
		t.Fatalf("a multi-step task is refused: %s", why)
	}
	env, out, err, _ := delegatedRun(t, tk, "codex", "multistep")
	wantVerdict(t, out, err, 0.5)
	u := usageEvents(env)
	if len(u) != 1 || *u[0].PromptTokens != 1500 || *u[0].CompletionTokens != 300 || *u[0].CostUSD != 0.015 || u[0].CacheReadTokens != nil {
		t.Errorf("usage %+v, want the steps' summed", u)
	}
	if out.Finished.AgentReported["n_steps"] != 2 {
		t.Errorf("reported %+v", out.Finished.AgentReported)
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
	termAt := readStamp(t, termFile)
	if sinceStart := termAt.Sub(start); sinceStart < 1900*time.Millisecond || sinceStart > 6*time.Second {
		t.Errorf("SIGTERM %s after the start, want at the 2 s budget", sinceStart)
	}
	if elapsed < 3400*time.Millisecond || elapsed > 15*time.Second {
		t.Errorf("killed after %s, want the 2 s budget plus the 1.5 s grace", elapsed)
	}
	waitDead(t, childPid)
}

// TestHarborGraceLetsCleanupFinish (30 s; the only slow delegated test,
// run by `make test`, skipped by -short): a timed-out harbor gets SIGTERM
// and the full 60 s grace (no PROCTOR_DELEGATE_GRACE_SEC) to remove its
// trial container and image; a fake whose cleanup takes 30 s finishes it
// and exits on its own, never SIGKILLed.
func TestHarborGraceLetsCleanupFinish(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s: the harbor grace against a 30 s cleanup (runs without -short)")
	}
	if g := harness.DelegateGrace(); g != 60*time.Second {
		t.Fatalf("the default grace is %s, want 60 s", g)
	}
	tk := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "version = \"1.0\"\n[agent]\ntimeout_sec = 1\n[verifier]\ntimeout_sec = 0.5\n[environment]\nbuild_timeout_sec = 0.5\n"})
	dir := t.TempDir()
	termFile, cleanupFile := filepath.Join(dir, "term"), filepath.Join(dir, "cleanup")
	t.Setenv("FAKE_TERM_FILE", termFile)
	t.Setenv("FAKE_CLEANUP_FILE", cleanupFile)
	t.Setenv("FAKE_CLEANUP_SEC", "30")
	start := time.Now()
	_, out, err, _ := delegatedRun(t, tk, "codex", "grace")
	elapsed := time.Since(start)
	wantVerdict(t, out, err, 0)
	termAt, doneAt := readStamp(t, termFile), readStamp(t, cleanupFile)
	if d := doneAt.Sub(termAt); d < 29*time.Second {
		t.Errorf("cleanup took %s after SIGTERM, want its 30 s", d)
	}
	if elapsed > 45*time.Second || elapsed < 31*time.Second {
		t.Errorf("harbor ended %s after the start, want the 2 s budget plus its 30 s cleanup, well inside the 60 s grace", elapsed)
	}
	if !out.Finished.TimedOut {
		t.Errorf("finished %+v, want timed out", out.Finished)
	}
}

// TestCommandTemplateJobsDir: a command template that names {jobs_dir}
// (a local Harbor with other flags) keeps Harbor's output contract: the
// trial result.json it wrote there is scored, not its exit code.
func TestCommandTemplateJobsDir(t *testing.T) {
	tk := harnesstest.Task(t, "t", nil)
	name := "command:harbor run -p {task_path} -a terminus-2 -m {model} -o {jobs_dir}"
	env, out, err, args := delegatedRun(t, tk, name, "partial")
	wantVerdict(t, out, err, 0.5)
	if v, _ := argValue(args, "cwd"); v != filepath.Dir(env.SpecV.TasksRoot) || !reflect.DeepEqual(args[:8], []string{"run", "-p", tk.Dir, "-a", "terminus-2", "-m", "m", "-o"}) || args[8] != env.DirV.Path("jobs") {
		t.Errorf("harbor got %q", args)
	}
	if u := usageEvents(env); len(u) != 1 || *u[0].CostUSD != 0.0123 {
		t.Errorf("usage %+v", u)
	}
	// Harbor exits 0 for an errored trial: still errored.
	_, out, err, _ = delegatedRun(t, tk, name, "errored")
	wantErrored(t, out, err, "exit 0", "errored trial: RuntimeError")
	// Without {jobs_dir} a command scores itself: exit 0 passes.
	_, out, err, _ = delegatedRun(t, tk, "command:harbor run -p {task_path} -a x --jobs-dir "+t.TempDir(), "errored")
	wantVerdict(t, out, err, 1)
}

// readStamp reads a `date +%s.%N` stamp file.
func readStamp(t *testing.T, p string) time.Time {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("no stamp %s: %v", filepath.Base(p), err)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, int64(f*1e9))
}

// waitDead polls until the process whose pid is in file is gone.
func waitDead(t *testing.T, file string) {
	t.Helper()
	pb, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pb)))
	// Far from the failure (a child left out of the kill lives 300 s),
	// and room for a loaded machine to reap the killed one.
	deadline := time.Now().Add(time.Minute)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the tool's background child %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
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

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
)

// TestSeedNamesDryRun: the task-runs seed's spellings plan as the seed
// says: docker-oracle is the oracle under its own name, a bare command
// takes --command-template, and a --baseline-harness that --harnesses
// does not name is added with the seed's line.
func TestSeedNamesDryRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeRoot(t, harborTask("t", "version = \"1.0\"\n", nil))
	for _, c := range []struct {
		name   string
		args   []string
		stdout string
		stderr string
	}{
		{"docker-oracle", []string{"--harnesses", "docker-oracle"}, "t/docker-oracle/default/1\trun\n", ""},
		{"bare command", []string{"--harnesses", "oracle,command", "--command-template", "my-agent --task {task_path}"},
			"t/oracle/default/1\trun\nt/command:my-agent --task {task_path}/default/1\trun\n", ""},
		{"the baseline added", []string{"--harnesses", "docker-oracle", "--baseline-harness", "command:true"},
			"t/docker-oracle/default/1\trun\nt/command:true/default/1\trun\n", "will also run the baseline harness command:true\n"},
		{"a bare command baseline", []string{"--harnesses", "oracle", "--command-template", "true", "--baseline-harness", "command"},
			"t/oracle/default/1\trun\nt/command:true/default/1\trun\n", ""},
		{"the baseline listed", []string{"--harnesses", "oracle,command:true", "--baseline-harness", "command:true"},
			"t/oracle/default/1\trun\nt/command:true/default/1\trun\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--output-dir", t.TempDir()}, c.args...)
			out, errOut, code := proctor(t, args...)
			if code != 0 || !strings.HasPrefix(out, c.stdout) {
				t.Fatalf("exit %d\nstdout %q\nwant prefix %q\nstderr %s", code, out, c.stdout, errOut)
			}
			if c.stderr != "" && !strings.Contains(errOut, c.stderr) {
				t.Errorf("stderr %q lacks %q", errOut, c.stderr)
			}
			if c.stderr == "" && strings.Contains(errOut, "will also run") {
				t.Errorf("stderr %q announces a baseline that was listed", errOut)
			}
		})
	}
	_, errOut, code := proctor(t, "tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--harnesses", "command")
	if code != ExitUsage || !strings.Contains(errOut, "--command-template") {
		t.Errorf("bare command without a template: exit %d, stderr %s", code, errOut)
	}
	// A misspelt baseline is refused with the closest name, before any
	// line says it will run.
	_, errOut, code = proctor(t, "tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--harnesses", "oracle", "--baseline-harness", "docker-claud")
	if code != ExitUsage || !strings.Contains(errOut, "--baseline-harness: harness: unknown harness \"docker-claud\": did you mean docker-claude?") || strings.Contains(errOut, "will also run") {
		t.Errorf("misspelt baseline: exit %d, stderr %s", code, errOut)
	}
}

// TestDryRunArtifact: --dry-run with --out-json writes the schema-valid
// artifact the run would start from: every cell that would run planned
// (neither scored nor errored, in no comparison), every refused one
// errored as the run writes it; each row keeps the harness as typed with
// its canonical harness_kind.
func TestDryRunArtifact(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	files := harborTask("ok", "version = \"1.0\"\n", nil)
	files = harborTask("nosolution", "version = \"1.0\"\n", files)
	delete(files, "nosolution/solution/solve.sh")
	root := writeRoot(t, files)
	out := filepath.Join(t.TempDir(), "plan.json")
	mustProctor(t, "tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--output-dir", t.TempDir(),
		"--harnesses", "docker-oracle", "--baseline-harness", "command:true", "--out-json", out)
	a, err := artifact.Read(out) // validates against the schema
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range a.Results {
		got[r.CellID] = r.Outcome + "/" + r.ErrorClass + "/" + r.HarnessKind
	}
	want := map[string]string{
		"ok/docker-oracle/default/1":         "planned//oracle",
		"ok/command:true/default/1":          "planned//command",
		"nosolution/docker-oracle/default/1": "errored/refused/oracle",
		"nosolution/command:true/default/1":  "planned//command",
	}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: %s, want %s", id, got[id], w)
		}
	}
	s := a.Summary.PerHarness["docker-oracle"]
	if s.N != 2 || s.Planned != 1 || s.Errored != 1 || s.Scored != 0 || s.PassRate != nil {
		t.Errorf("docker-oracle summary %+v", s)
	}
	if a.Run.BaselineHarness != "command:true" || len(a.Run.Harnesses) != 2 {
		t.Errorf("run %+v", a.Run)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "plan.md")); err == nil {
		t.Log("a report was written beside the plan")
	}
}

// TestCoverageAgreesWithDryRun: `tasks coverage` has a column per harness
// family a run can use (oracle, agent, docker-claude, probe, command; the
// Harbor- and BenchFlow-backed ones: TestDelegatedCoverageAgreesWithDryRun)
// and, on the example tasks and the acceptance suite's shapes, each
// refuses exactly the tasks --dry-run errors as refused, with the same
// reason. Each column is run under a name the seed spells (docker-oracle,
// probe) where it has one.
func TestCoverageAgreesWithDryRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	setenv(t, "ANTHROPIC_API_KEY", "sk-test-coverage")
	setenv(t, "ANTHROPIC_BASE_URL", "")
	agent, err := filepath.Abs("../../examples/agents/scripted")
	if err != nil {
		t.Fatal(err)
	}
	arms := map[string]string{"oracle": "docker-oracle", "agent:<dir>": "agent:" + agent, "docker-probe": "probe", "command:<template>": "command:true", "docker-claude": "docker-claude"}
	for _, root := range []string{"../../examples/tasks", "../../examples/check-tasks", "../../examples/qc-set", "../../pkg/task/testdata/golden/acceptance-tasks/root"} {
		var cov task.CoverageReport
		if err := json.Unmarshal([]byte(mustProctor(t, "tasks", "coverage", "--tasks-root", root, "--json")), &cov); err != nil {
			t.Fatal(err)
		}
		for col, name := range arms {
			if _, ok := cov.Refusals[col]; !ok {
				t.Errorf("%s: coverage has no %s column", root, col)
				continue
			}
			refused := map[string]string{}
			for _, tr := range cov.Refusals[col] {
				refused[tr.Task] = tr.Reason
			}
			out := mustProctor(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", name, "--dry-run", "--output-dir", t.TempDir())
			for _, tk := range cov.Tasks {
				prefix := tk + "/" + name + "/default/1\t"
				state := ""
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, prefix) {
						state = strings.TrimPrefix(l, prefix)
					}
				}
				why, isRefused := refused[tk]
				switch {
				case isRefused && state != "errored (refused): "+why:
					t.Errorf("%s %s %s: coverage refuses (%s), dry run says %q", root, tk, name, why, state)
				case !isRefused && strings.HasPrefix(state, "errored (refused)"):
					t.Errorf("%s %s %s: coverage runs it, dry run says %q", root, tk, name, state)
				case state == "":
					t.Errorf("%s %s %s: no dry-run line", root, tk, name)
				}
			}
		}
	}
}

// TestResumeReadsSeedNames: a resume's flags compare with the run's spec
// as harnesses, so the seed's alias of the run's harness and a baseline
// the run added are the run's own values; another harness is still a
// conflict.
func TestResumeReadsSeedNames(t *testing.T) {
	rec := bus.RunRecord{ID: "r", Spec: events.RunSpec{Harnesses: []string{"oracle", "command:true"}, BaselineHarness: "command:true"}}
	flags := func(harnesses ...string) *runFlags {
		f := &runFlags{harnesses: harnessList{vals: harnesses, set: true}, baseline: "command:true"}
		f.changed = func(flag string) bool { return flag == "harnesses" || flag == "baseline-harness" }
		return f
	}
	if c := flags("docker-oracle").resumeConflicts(rec); len(c) != 0 {
		t.Errorf("docker-oracle for oracle, the baseline added: %v", c)
	}
	if c := flags("docker-oracle", "command:true").resumeConflicts(rec); len(c) != 0 {
		t.Errorf("docker-oracle for oracle, the baseline listed: %v", c)
	}
	if c := flags("probe").resumeConflicts(rec); len(c) != 1 || !strings.Contains(c[0], "--harnesses probe,command:true (the run has oracle,command:true)") {
		t.Errorf("another harness: %v", c)
	}
}

// TestDryRunShowsAnArmThatCannotRun: a dry run whose arm cannot run here
// (docker-claude without any provider credential) still prints the whole
// matrix, that arm's cells refused, and exits non-zero saying the run
// itself would stop before any cell: the reason once for the arm, with
// the number of its cells, not once a cell.
func TestDryRunShowsAnArmThatCannotRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	empty := t.TempDir()
	setenv(t, "HOME", empty)
	setenv(t, "CLAUDE_CONFIG_DIR", empty)
	for _, k := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY", "ANTHROPIC_BASE_URL"} {
		setenv(t, k, "")
	}
	root := writeRoot(t, harborTask("ok", "version = \"1.0\"\n", harborTask("other", "version = \"1.0\"\n", nil)))
	stdout, stderr, code := proctor(t, "tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--output-dir", t.TempDir(),
		"--harnesses", "oracle,docker-claude", "--repeats", "2")
	if code == 0 {
		t.Fatalf("dry run of an arm that cannot run exited 0:\n%s", stdout)
	}
	for _, want := range []string{"ok/oracle/default/1\trun", "ok/docker-claude/default/2\terrored (refused): harness docker-claude cannot run here (why: below)",
		"other/docker-claude/default/1\terrored (refused): harness docker-claude cannot run here", "8 cells, 4 would run, 4 errored before any build"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "tasks run would stop before any cell: harness docker-claude: ") || !strings.Contains(stderr, "(4 cells refused)") {
		t.Errorf("stderr: %s", stderr)
	}
	if n := strings.Count(stdout+stderr, "harness docker-claude: "); n != 1 {
		t.Errorf("the arm's reason is said %d times, want once:\n%s\n%s", n, stdout, stderr)
	}
}

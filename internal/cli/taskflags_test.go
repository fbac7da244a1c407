package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// writeRoot writes files (relative path -> content) under a new tasks
// root and returns it.
func writeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tasks")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// harborTask is the files of a minimal Harbor task named name whose
// task.toml is toml.
func harborTask(name, toml string, into map[string]string) map[string]string {
	if into == nil {
		into = map[string]string{}
	}
	into[name+"/task.toml"] = toml
	into[name+"/instruction.md"] = "Do it.\n"
	into[name+"/environment/Dockerfile"] = "FROM debian:bookworm-slim\nWORKDIR /app\n"
	into[name+"/solution/solve.sh"] = "true\n"
	into[name+"/tests/test.sh"] = "echo 1 > /logs/verifier/reward.txt\n"
	return into
}

const misspelledTOML = "version = \"1.0\"\n\n[enviroment]\nnetwork_mode = \"no-network\"\n"

// TestSplitHarnesses: a command: entry keeps its commas and quotes to the
// end of the flag value; an entry after it that reads as a harness is
// refused with a pointer to --command-template.
func TestSplitHarnesses(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"oracle", []string{"oracle"}},
		{" oracle , agent:x ,", []string{"oracle", "agent:x"}},
		{"oracle,command:echo a,b", []string{"oracle", "command:echo a,b"}},
		{`command:printf '%s\n' "a,b" 'c,d'`, []string{`command:printf '%s\n' "a,b" 'c,d'`}},
		{`agent:x, command:test "a,b" = "a,b"`, []string{"agent:x", `command:test "a,b" = "a,b"`}},
	} {
		got, err := splitHarnesses(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"command:echo a,oracle", "command:echo a, agent:x", "oracle,command:x,command:y", "command:x,probe"} {
		if got, err := splitHarnesses(in); err == nil || !strings.Contains(err.Error(), "--command-template") {
			t.Errorf("%q: %q %v, want a refusal pointing to --command-template", in, got, err)
		}
	}
}

// TestHarnessesFlagDryRun drives the flag through the command line:
// --harnesses repeats, a command template with commas and quotes is one
// arm, and the reported input (command:echo a,oracle) is refused with exit
// 2 instead of becoming two arms.
func TestHarnessesFlagDryRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeRoot(t, harborTask("t", "version = \"1.0\"\n", nil))
	out := mustProctor(t, "tasks", "run", "--tasks-root", root, "--all", "--dry-run",
		"--harnesses", "oracle", "--harnesses", `command:test "a,b" = 'a,b'`)
	want := "t/oracle/default/1\trun\nt/command:test \"a,b\" = 'a,b'/default/1\trun\n2 cells, 2 would run, 0 errored before any build\n"
	if out != want {
		t.Errorf("dry run:\n%s\nwant:\n%s", out, want)
	}
	_, errOut, code := proctor(t, "tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--harnesses", "command:echo a,oracle")
	if code != ExitUsage || !strings.Contains(errOut, `"oracle" would be part of the command`) || !strings.Contains(errOut, "--command-template") {
		t.Errorf("command:echo a,oracle: exit %d, stderr %s", code, errOut)
	}
}

// TestNothingToRun: a run that would have no task is an error naming the
// root, exit 2, before anything starts: an empty root, a root holding only
// author's notes, a root that does not exist, --tasks naming nothing. A
// non-finite --agent-grace is refused the same way.
func TestNothingToRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	empty := writeRoot(t, map[string]string{"README.md": "no tasks here\n"})
	notes := writeRoot(t, map[string]string{
		"ideas/task.md": "# Ideas\nnot a task yet\n",
		"hugo/task.md":  "+++\ntitle = \"x\"\n+++\nbody\n",
	})
	real := writeRoot(t, harborTask("t", "version = \"1.0\"\n", nil))
	for _, c := range []struct {
		name     string
		args     []string
		mentions []string
	}{
		{"empty root", []string{"--tasks-root", empty, "--all"}, []string{"no tasks under " + empty, "no directory there holds a task.toml or a task.md"}},
		{"only notes", []string{"--tasks-root", notes, "--all"}, []string{"no tasks under " + notes, "ideas: task.md has no YAML frontmatter", "hugo: task.md opens with +++"}},
		{"missing root", []string{"--tasks-root", filepath.Join(empty, "nope"), "--all"}, []string{"--tasks-root " + filepath.Join(empty, "nope")}},
		{"--tasks of blanks", []string{"--tasks-root", real, "--tasks", " , "}, []string{"names no task"}},
		{"--tasks unknown", []string{"--tasks-root", real, "--tasks", "nope"}, []string{`task not found under`, `"nope"`}},
		{"--agent-grace nan", []string{"--tasks-root", real, "--all", "--agent-grace", "nan"}, []string{"--agent-grace must be a finite number > 0 (seconds), not NaN"}},
	} {
		for _, dry := range []bool{false, true} {
			args := append([]string{"tasks", "run", "--harnesses", "command:true"}, c.args...)
			if dry {
				args = append(args, "--dry-run")
			}
			out, errOut, code := proctor(t, args...)
			if code != ExitUsage || out != "" {
				t.Errorf("%s (dry run %v): exit %d, stdout %q", c.name, dry, code, out)
			}
			for _, m := range c.mentions {
				if !strings.Contains(errOut, m) {
					t.Errorf("%s (dry run %v): stderr %q does not mention %q", c.name, dry, errOut, m)
				}
			}
		}
	}
}

// TestStrictListAndCoverage: tasks list warns about a misspelled table with
// the closest known name; --strict makes it fail (exit 2) naming the file,
// line and key; coverage lists it, and under --strict counts it malformed.
func TestStrictListAndCoverage(t *testing.T) {
	root := writeRoot(t, harborTask("good", "version = \"1.0\"\n", harborTask("typo", misspelledTOML, nil)))
	out := mustProctor(t, "tasks", "list", "--tasks-root", root)
	if !strings.Contains(out, "unknown table enviroment (line 3; did you mean environment?): ignored") {
		t.Errorf("list:\n%s", out)
	}
	_, errOut, code := proctor(t, "tasks", "list", "--tasks-root", root, "--strict")
	if code != ExitUsage || !strings.Contains(errOut, "typo/task.toml:3: key enviroment: unknown table enviroment (line 3; did you mean environment?)") {
		t.Errorf("list --strict: exit %d, stderr %s", code, errOut)
	}
	out = mustProctor(t, "tasks", "coverage", "--tasks-root", root)
	if !strings.Contains(out, "unknown keys (ignored; refused with --strict):\n  typo: unknown table enviroment") {
		t.Errorf("coverage:\n%s", out)
	}
	out = mustProctor(t, "tasks", "coverage", "--tasks-root", root, "--strict")
	if !strings.Contains(out, "tasks: 1 (harbor 1)") || !strings.Contains(out, "malformed (skipped): 1\n  typo/task.toml:3: key enviroment") {
		t.Errorf("coverage --strict:\n%s", out)
	}
}

// TestListGoesOnPastMalformedTasks: tasks list lists every task that
// loads and names each malformed definition on stderr with its file, line
// and key, then exits 1; under --strict a task with an unknown table is
// one more, and only those make it exit 2.
func TestListGoesOnPastMalformedTasks(t *testing.T) {
	files := harborTask("a-good", "version = \"1.0\"\n", nil)
	harborTask("b-broken", "version = \"1.0\"\n[verifier]\ntimeout_sec = \"soon\"\n", files)
	harborTask("c-bad-syntax", "version = \"1.0\"\n[agent\n", files)
	harborTask("d-good", "version = \"1.0\"\n", files)
	harborTask("e-typo", misspelledTOML, files)
	root := writeRoot(t, files)
	out, errOut, code := proctor(t, "tasks", "list", "--tasks-root", root)
	if code != ExitError {
		t.Errorf("exit %d, want %d", code, ExitError)
	}
	for _, name := range []string{"a-good", "d-good", "e-typo"} {
		if !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("stdout does not list %s:\n%s", name, out)
		}
	}
	for _, want := range []string{"malformed: b-broken/task.toml:3: key verifier.timeout_sec: ", "malformed: c-bad-syntax/task.toml:2: ",
		"2 task definitions under " + root + " malformed (each named above); the other 3 listed"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out, "broken") || strings.Contains(out, "bad-syntax") {
		t.Errorf("a malformed task is listed:\n%s", out)
	}

	out, errOut, code = proctor(t, "tasks", "list", "--tasks-root", root, "--strict")
	if code != ExitError || strings.Contains(out, "e-typo") || !strings.Contains(errOut, "malformed: e-typo/task.toml:3: key enviroment: ") ||
		!strings.Contains(errOut, "3 task definitions") {
		t.Errorf("--strict: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestUnknownKeysAndPlanFirstInARun runs a small real matrix of command
// arms: the misspelled [enviroment] table is warned about on stderr and
// listed in every row of its task (metrics.unknown_keys); --strict refuses
// the run with exit 2 before it starts; a repeated --harnesses with a
// template holding commas and quotes runs as one arm; the progress prints
// "planned N cells" before every cell line, with no [i/?]; and an
// unresolved [verifier.env] key leaves command arms alone (they never run
// the task's verifier; docs/decisions/2026-12-02-env-and-network-scopes.md).
func TestUnknownKeysAndPlanFirstInARun(t *testing.T) {
	t.Parallel()
	testutil.Docker(t) // the in-process stack's launcher talks to the engine
	setenv(t, "PROCTOR_HOME", t.TempDir())
	files := harborTask("typo", misspelledTOML, nil)
	harborTask("needs-env", "version = \"1.0\"\n\n[verifier.env]\nTOKEN = \"${TOKEN}\"\n", files)
	root := writeRoot(t, files)
	quoted := `command:test "a,b" = 'a,b'`
	args := []string{"tasks", "run", "--tasks-root", root, "--all", "--output-dir", t.TempDir(),
		"--harnesses", quoted, "--harnesses", "command:false"}

	_, errOut, code := proctor(t, append(args, "--strict")...)
	if code != ExitUsage || !strings.Contains(errOut, "typo/task.toml:3: key enviroment") || strings.Contains(errOut, "run ") {
		t.Fatalf("--strict: exit %d, stderr %s", code, errOut)
	}

	js := filepath.Join(t.TempDir(), "a.json")
	_, errOut, code = proctor(t, append(args, "--out-json", js)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "warning: typo/task.toml: unknown table enviroment (line 3; did you mean environment?): ignored") {
		t.Errorf("no unknown-key warning on stderr:\n%s", errOut)
	}
	if n := strings.Count(errOut, "unknown table enviroment"); n != 1 {
		t.Errorf("the unknown-key warning is printed %d times, want once:\n%s", n, errOut)
	}
	plan := strings.Index(errOut, "planned 4 cells\n")
	first := strings.Index(errOut, "[1/")
	if plan < 0 || first < plan || strings.Contains(errOut, "/?]") {
		t.Errorf("the plan line must come before every cell line:\n%s", errOut)
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range a.Results {
		got[r.CellID] = r.Outcome + " " + strings.Join(r.Metrics.UnknownKeys, ",")
	}
	want := map[string]string{
		"typo/" + quoted + "/default/1":      "passed enviroment",
		"typo/command:false/default/1":       "failed enviroment",
		"needs-env/" + quoted + "/default/1": "passed ",
		"needs-env/command:false/default/1":  "failed ",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// TestRetriesFlagRejectsNegative: --retries below 0 is a usage error
// naming the flag, before anything runs.
func TestRetriesFlagRejectsNegative(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	_, errOut, code := proctor(t, "tasks", "run", "--tasks-root", "testdata/true-root", "--all", "--retries", "-1", "--dry-run")
	if code != ExitUsage || !strings.Contains(errOut, "--retries must be 0 or more") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// TestConcurrencyAndBaselineFlags: --concurrency below 1 is a usage error
// (it was taken silently), for a run and a resume; a baseline that checks
// the setup (the oracle) is refused, since its rows are never compared,
// where it used to give a run with no comparison and no word of why.
func TestConcurrencyAndBaselineFlags(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	for _, c := range []string{"0", "-3"} {
		_, errOut, code := proctor(t, "tasks", "run", "--tasks-root", "testdata/true-root", "--all", "--concurrency", c, "--dry-run")
		if code != ExitUsage || !strings.Contains(errOut, "--concurrency must be at least 1, not "+c) {
			t.Fatalf("--concurrency %s: exit %d: %s", c, code, errOut)
		}
	}
	_, errOut, code := proctor(t, "runs", "resume", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--concurrency", "0")
	if code != ExitUsage || !strings.Contains(errOut, "--concurrency must be at least 1") {
		t.Fatalf("resume --concurrency 0: exit %d: %s", code, errOut)
	}
	_, errOut, code = proctor(t, "tasks", "run", "--tasks-root", "testdata/true-root", "--all", "--harnesses", "oracle", "--baseline-harness", "oracle", "--dry-run")
	if code == 0 || !strings.Contains(errOut, `baseline harness "oracle" checks the setup`) {
		t.Fatalf("--baseline-harness oracle: exit %d: %s", code, errOut)
	}
}

// TestComposeWarningsNameTheTask: a compose file that uses a variable its
// .env does not set is warned about on stderr as one of proctor's
// warnings, the task named, saying where compose variables come from
// (the compose library's raw log line named no task and called HOME
// unset; pkg/task TestLoadComposeUnsetVariables checks it is gone).
func TestComposeWarningsNameTheTask(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	files := harborTask("sidecar-home", "version = \"1.0\"\n", nil)
	files["sidecar-home/environment/docker-compose.yaml"] = "services:\n  main:\n    environment: {CACHE: \"${HOME}/cache\"}\n"
	root := writeRoot(t, files)
	_, errOut, code := proctor(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "warning: sidecar-home: docker-compose.yaml: ${HOME} is blank: environment/.env does not set it") {
		t.Errorf("stderr:\n%s", errOut)
	}
}

// TestRunSaysWhatAllSkipped: `tasks run --all` and `tasks check --all`
// say, as `tasks list` does, each directory of the root they leave out
// (a task.md without frontmatter, a symbolic link to a directory), so a
// task whose task.md lost its frontmatter is not dropped from the run in
// silence; a run of named tasks does not.
func TestRunSaysWhatAllSkipped(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	files := harborTask("t", "version = \"1.0\"\n", nil)
	files["lost/task.md"] = "# Lost its frontmatter\n\n## prompt\n\nDo it.\n"
	files["hugo/task.md"] = "+++\ntitle = \"x\"\n+++\nbody\n"
	root := writeRoot(t, files)
	if err := os.Symlink(filepath.Join(root, "t"), filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"warning: skipped hugo: task.md opens with +++ (Hugo TOML frontmatter), not YAML frontmatter: an author's note, not a task (not run)",
		"warning: skipped linked: symbolic link to a directory: not followed (not run)",
		"warning: skipped lost: task.md has no YAML frontmatter: an author's note, not a task (not run)",
	}
	for _, args := range [][]string{
		{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "command:true", "--dry-run"},
		{"tasks", "check", "--tasks-root", root, "--all", "--checks", "static", "--output-dir", t.TempDir()},
	} {
		_, errOut, code := proctor(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		for _, w := range want {
			if !strings.Contains(errOut, w+"\n") {
				t.Errorf("%v: stderr %q lacks %q", args[:2], errOut, w)
			}
		}
	}
	_, errOut, code := proctor(t, "tasks", "run", "--tasks-root", root, "--tasks", "t", "--harnesses", "command:true", "--dry-run")
	if code != 0 || strings.Contains(errOut, "skipped") {
		t.Errorf("--tasks t: exit %d, stderr %q: a run of named tasks says nothing of the others", code, errOut)
	}
}

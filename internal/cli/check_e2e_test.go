package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/taskcheck"
)

// checkRun is one `proctor tasks check` over examples/check-tasks.
type checkRun struct {
	rep            taskcheck.Report
	md             []byte
	out            string
	stdout, stderr string
	runID          string
}

func runCheck(t *testing.T, tasks []string, checks string) checkRun {
	t.Helper()
	root, err := filepath.Abs("../../examples/check-tasks")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	js, md := filepath.Join(out, "check.json"), filepath.Join(out, "check.md")
	args := []string{"tasks", "check", "--tasks-root", root, "--tasks", strings.Join(tasks, ","), "--concurrency", "2",
		"--output-dir", out, "--out-json", js, "--out-md", md}
	if checks != "" {
		args = append(args, "--checks", checks)
	}
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	r := checkRun{out: out, stdout: stdout.String(), stderr: stderr.String()}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatalf("exit %d: %v\nstdout: %s\nstderr: %s", code, err, r.stdout, r.stderr)
	}
	if err := json.Unmarshal(b, &r.rep); err != nil {
		t.Fatal(err)
	}
	if r.md, err = os.ReadFile(md); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: ExitError, false: 0}[r.rep.Failed()]; code != want {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, want, r.stdout, r.stderr)
	}
	if m := runIDRe.FindStringSubmatch(r.stdout); m != nil {
		r.runID = m[1]
	}
	if r.rep.RunID != r.runID {
		t.Errorf("report run_id %q, stdout run %q", r.rep.RunID, r.runID)
	}
	return r
}

// flagged is the checks of tr's findings that are neither PASS nor SKIP,
// sorted, without repeats.
func flagged(tr taskcheck.TaskResult) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range tr.Findings {
		if f.Verdict != taskcheck.Pass && f.Verdict != taskcheck.Skip && !seen[f.Check] {
			seen[f.Check] = true
			out = append(out, f.Check)
		}
	}
	sort.Strings(out)
	return out
}

func findingOf(tr taskcheck.TaskResult, check string) taskcheck.Finding {
	for _, f := range tr.Findings {
		if f.Check == check {
			return f
		}
	}
	return taskcheck.Finding{}
}

// TestTasksCheck runs `proctor tasks check` over examples/check-tasks
// against a real Docker engine. The clean near misses get every check
// (the oracle, the no-op agent, every cheat of the registry, the
// isolation probe) and PASS: a cheat that gets through there is a false
// alarm. Every fixture made to fail one check is run with the oracle and
// the check it targets only (--checks; Evaluate's own test covers how
// the checks combine) and is flagged by exactly that check, FAIL, the
// other checks reported SKIP "not selected". The check runs are ordinary
// runs of the event log (replay reproduces the artifact) and leave
// nothing behind.
func TestTasksCheck(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	// The probe runs the static proctor and aims at a host of the test's
	// own, on a network the sandbox is not on.
	t.Setenv(harness.ProbeBinaryEnv, testutil.ProctorBinary(t))
	tnet := testutil.TestNetwork(t, cli)
	ip := testutil.HTTPHost(t, cli, tnet, "probe-target.test", "target")
	t.Setenv(harness.ProbeTargetsEnv, "url=http://"+ip+"/,tcp="+ip+":80,dns=probe-target.test")

	var runs []checkRun
	check := func(tasks []string, checks string, want map[string]string) checkRun {
		t.Helper()
		failedBefore := t.Failed()
		r := runCheck(t, tasks, checks)
		runs = append(runs, r)
		got := map[string]taskcheck.TaskResult{}
		for _, tr := range r.rep.Tasks {
			got[tr.Task] = tr
		}
		for _, name := range tasks {
			tr, ok := got[name]
			if !ok {
				t.Errorf("%s: no result", name)
				continue
			}
			wantV, by := taskcheck.Pass, want[name]
			if by != "" {
				wantV = taskcheck.Fail
			}
			if fl := strings.Join(flagged(tr), ","); fl != by || tr.Verdict != wantV || tr.DecidedBy != by {
				t.Errorf("%s: verdict %s decided by %q, flagged by [%s]; want %s by %q\nfindings: %+v", name, tr.Verdict, tr.DecidedBy, fl, wantV, by, tr.Findings)
			}
		}
		if t.Failed() && !failedBefore {
			t.Logf("stderr: %s", r.stderr)
		}
		return r
	}

	clean := []string{"clean-answer-in-tests", "clean-recompute", "clean-server"}
	full := check(clean, "", map[string]string{})
	for _, tr := range full.rep.Tasks {
		if f := findingOf(tr, taskcheck.CheckIsolation); f.Verdict != taskcheck.Pass {
			t.Errorf("%s isolation %+v, want PASS (the probe ran)", tr.Task, f)
		}
		for _, c := range taskcheck.Cheats() {
			if f := findingOf(tr, c.Check()); f.Verdict != taskcheck.Pass {
				t.Errorf("%s %s %+v, want PASS", tr.Task, c.Check(), f)
			}
		}
	}
	if !bytes.Contains(full.md, []byte("| clean-server | PASS | every check |")) {
		t.Errorf("check.md:\n%s", full.md)
	}

	oracle := check([]string{"oracle-wrong", "verifier-over-budget", "static-solve-reads-tests", "oracle-no-tests"}, "oracle", map[string]string{
		"oracle-wrong": "oracle", "verifier-over-budget": "oracle", "static-solve-reads-tests": "static", "oracle-no-tests": "oracle",
	})
	for _, s := range []string{"| oracle-wrong | FAIL | oracle: the reference solution does not pass",
		"| oracle-no-tests | FAIL | oracle: the oracle's verifier executed no tests: unittest: Ran 0 tests",
		"| verifier-over-budget | FAIL | oracle: verifier over budget", "SKIP no-op: not run: not selected by --checks"} {
		if !bytes.Contains(oracle.md, []byte(s)) {
			t.Errorf("check.md lacks %q:\n%s", s, oracle.md)
		}
	}
	check([]string{"noop-passes"}, "oracle,no-op", map[string]string{"noop-passes": "no-op"})
	for _, c := range taskcheck.Cheats() {
		check([]string{"cheat-" + c.Name}, "oracle,"+c.Check(), map[string]string{"cheat-" + c.Name: c.Check()})
	}
	iso := check([]string{"isolation-treatment"}, "oracle,isolation", map[string]string{"isolation-treatment": "isolation"})
	if f := findingOf(iso.rep.Tasks[0], taskcheck.CheckIsolation); !strings.Contains(f.Detail, "treatment=open") || strings.Contains(f.Detail, "network") {
		t.Errorf("isolation finding %+v, want treatment=open alone", f)
	}

	// The check run is a run of the log: replay reproduces its artifact.
	art, err := os.ReadFile(filepath.Join(full.out, full.runID, "task_runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	replayed := filepath.Join(full.out, "replayed.json")
	var rout, rerr bytes.Buffer
	if c := Main([]string{"replay", full.runID, "--out-json", replayed, "--out-md", filepath.Join(full.out, "replayed.md")}, &rout, &rerr); c != 0 {
		t.Fatalf("replay exit %d: %s", c, rerr.String())
	}
	if b, _ := os.ReadFile(replayed); !bytes.Equal(b, art) {
		t.Errorf("replay of the check run differs from its artifact")
	}
	for _, r := range runs {
		if nc, nn := leftovers(t, cli, r.runID); nc+nn > 0 {
			t.Errorf("%d containers and %d networks of the check run %s remain", nc, nn, r.runID)
		}
	}
}

// TestTasksCheckStaticOnly: --checks static runs no cell and records no
// run; an unknown check is a usage error naming it.
func TestTasksCheckStaticOnly(t *testing.T) {
	t.Setenv("PROCTOR_HOME", t.TempDir())
	r := runCheck(t, []string{"static-solve-reads-tests", "clean-server"}, "static")
	if r.runID != "" || len(r.rep.Tasks) != 2 || r.rep.Tasks[0].Verdict != taskcheck.Fail || r.rep.Tasks[1].Verdict != taskcheck.Pass ||
		findingOf(r.rep.Tasks[1], taskcheck.CheckOracle).Verdict != taskcheck.Skip {
		t.Fatalf("%+v\nstdout: %s", r.rep, r.stdout)
	}
	root, _ := filepath.Abs("../../examples/check-tasks")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"tasks", "check", "--tasks-root", root, "--all", "--checks", "oracle,cheat:nope"}, &stdout, &stderr)
	if code != ExitUsage || !strings.Contains(stderr.String(), `unknown check "cheat:nope"`) {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

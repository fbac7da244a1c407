package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
	home           string // the store of a check run as a process ("" in process)
}

func runCheck(t *testing.T, tasks []string, checks string) checkRun {
	t.Helper()
	return finishCheck(t, startCheck(t, tasks, checks, nil))
}

// checkCall is one `proctor tasks check` started by startCheck: in this
// process (Main, under $PROCTOR_HOME) or, with proc, as a process of the
// proctor binary on a store of its own, so that several run at once.
type checkCall struct {
	tasks          []string
	out, js, md    string
	home           string
	code           int
	stdout, stderr bytes.Buffer
	done           chan struct{}
}

// checkProc runs check calls as processes of bin, at most len(slots) at
// once.
type checkProc struct {
	bin   string
	slots chan struct{}
	// env is added to the processes' environment (KEY=value).
	env []string
}

// startCheck starts the check of tasks (checks "" for every check). In
// process it has ended when startCheck returns; with p it runs in the
// background until finishCheck.
func startCheck(t *testing.T, tasks []string, checks string, p *checkProc) *checkCall {
	t.Helper()
	root, err := filepath.Abs("../../examples/check-tasks")
	if err != nil {
		t.Fatal(err)
	}
	c := &checkCall{tasks: tasks, out: t.TempDir(), done: make(chan struct{})}
	c.js, c.md = filepath.Join(c.out, "check.json"), filepath.Join(c.out, "check.md")
	args := []string{"tasks", "check", "--tasks-root", root, "--tasks", strings.Join(tasks, ","), "--concurrency", "2",
		"--output-dir", c.out, "--out-json", c.js, "--out-md", c.md}
	if checks != "" {
		args = append(args, "--checks", checks)
	}
	if p == nil {
		c.code = mainT(t, args, &c.stdout, &c.stderr)
		close(c.done)
		return c
	}
	c.home = t.TempDir()
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(append(os.Environ(), p.env...), "PROCTOR_HOME="+c.home)
	cmd.Stdout, cmd.Stderr = &c.stdout, &c.stderr
	t.Cleanup(func() { <-c.done }) // no process outlives the test's directories
	go func() {
		defer close(c.done)
		p.slots <- struct{}{}
		defer func() { <-p.slots }()
		c.code = -1
		if err := cmd.Run(); err == nil {
			c.code = 0
		} else if ee, ok := err.(*exec.ExitError); ok {
			c.code = ee.ExitCode()
		} else {
			fmt.Fprintf(&c.stderr, "start %s: %v", p.bin, err)
		}
	}()
	return c
}

// finishCheck waits for c and reads its report, failing t when the exit
// code does not match the report's verdict.
func finishCheck(t *testing.T, c *checkCall) checkRun {
	t.Helper()
	<-c.done
	r := checkRun{out: c.out, stdout: c.stdout.String(), stderr: c.stderr.String(), home: c.home}
	b, err := os.ReadFile(c.js)
	if err != nil {
		t.Fatalf("exit %d: %v\nstdout: %s\nstderr: %s", c.code, err, r.stdout, r.stderr)
	}
	if err := json.Unmarshal(b, &r.rep); err != nil {
		t.Fatal(err)
	}
	if r.md, err = os.ReadFile(c.md); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: ExitError, false: 0}[r.rep.Failed()]; c.code != want {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", c.code, want, r.stdout, r.stderr)
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
// against a real Docker engine, each check run a process of its own, two
// at a time. The clean near misses (clean-server; all three under
// `make e2e`) get every check (the oracle, the no-op agent, every cheat of
// the registry, the isolation probe) and PASS: a cheat that gets through
// there is a false alarm. Every fixture made to fail one check is run with the oracle and
// the check it targets only (--checks; Evaluate's own test covers how
// the checks combine) and is flagged by exactly that check, FAIL, the
// other checks reported SKIP "not selected". The check runs are ordinary
// runs of the event log (replay reproduces the artifact) and leave
// nothing behind.
func TestTasksCheck(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	// The probe runs the static proctor and aims at a host of the test's
	// own, on a network the sandbox is not on; the check processes get
	// the variables, the process of the test keeps its own.
	tnet := testutil.TestNetwork(t, cli)
	ip := testutil.HTTPHost(t, cli, tnet, "probe-target.test", "target")
	env := []string{
		harness.ProbeBinaryEnv + "=" + testutil.ProctorBinary(t),
		EnvProxyBinary + "=" + testutil.ProctorBinary(t), // the probe gets docker-claude's sidecar
		harness.ProbeTargetsEnv + "=url=http://" + ip + "/,tcp=" + ip + ":80,dns=probe-target.test",
	}

	// Every check run is a process of its own, on a store of its own,
	// two at a time: they share nothing but the engine, and a run of two
	// cells leaves most of the machine idle. Not more: each runs two cells
	// at once, and a busy engine answers a container start late.
	procs := &checkProc{bin: testutil.ProctorBinary(t), slots: make(chan struct{}, 2), env: env}
	type pending struct {
		call *checkCall
		want map[string]string
	}
	var started []pending
	start := func(tasks []string, checks string, want map[string]string) int {
		started = append(started, pending{startCheck(t, tasks, checks, procs), want})
		return len(started) - 1
	}
	// The clean near misses first, a run each: every check on each is
	// the longest of the runs. clean-server is last; the other two near
	// misses run under `make e2e` only.
	clean := []string{"clean-server"}
	if testutil.Long() {
		clean = []string{"clean-answer-in-tests", "clean-recompute", "clean-server"}
	}
	var iFull []int
	for _, name := range clean {
		iFull = append(iFull, start([]string{name}, "", map[string]string{}))
	}
	iOracle := start([]string{"oracle-wrong", "verifier-over-budget", "static-solve-reads-tests", "oracle-no-tests"}, "oracle", map[string]string{
		"oracle-wrong": "oracle", "verifier-over-budget": "oracle", "static-solve-reads-tests": "static", "oracle-no-tests": "oracle",
	})
	start([]string{"noop-passes"}, "oracle,no-op", map[string]string{"noop-passes": "no-op"})
	for _, c := range taskcheck.Cheats() {
		start([]string{"cheat-" + c.Name}, "oracle,"+c.Check(), map[string]string{"cheat-" + c.Name: c.Check()})
	}
	iIso := start([]string{"isolation-treatment"}, "oracle,isolation", map[string]string{"isolation-treatment": "isolation"})

	runs := make([]checkRun, len(started))
	for i, p := range started {
		failedBefore := t.Failed()
		r := finishCheck(t, p.call)
		runs[i] = r
		got := map[string]taskcheck.TaskResult{}
		for _, tr := range r.rep.Tasks {
			got[tr.Task] = tr
		}
		for _, name := range p.call.tasks {
			tr, ok := got[name]
			if !ok {
				t.Errorf("%s: no result", name)
				continue
			}
			wantV, by := taskcheck.Pass, p.want[name]
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
	}

	for _, i := range iFull {
		for _, tr := range runs[i].rep.Tasks {
			if f := findingOf(tr, taskcheck.CheckIsolation); f.Verdict != taskcheck.Pass {
				t.Errorf("%s isolation %+v, want PASS (the probe ran)", tr.Task, f)
			}
			for _, c := range taskcheck.Cheats() {
				if f := findingOf(tr, c.Check()); f.Verdict != taskcheck.Pass {
					t.Errorf("%s %s %+v, want PASS", tr.Task, c.Check(), f)
				}
			}
		}
	}
	full := runs[iFull[len(iFull)-1]]
	if !bytes.Contains(full.md, []byte("| clean-server | PASS | every check passed |")) {
		t.Errorf("check.md:\n%s", full.md)
	}
	for _, s := range []string{"| oracle-wrong | FAIL | oracle: the reference solution does not pass",
		"| oracle-no-tests | FAIL | oracle: the oracle's verifier executed no tests: unittest: Ran 0 tests",
		"| verifier-over-budget | FAIL | oracle: verifier over budget", "SKIP no-op: not run: not selected by --checks"} {
		if !bytes.Contains(runs[iOracle].md, []byte(s)) {
			t.Errorf("check.md lacks %q:\n%s", s, runs[iOracle].md)
		}
	}
	if f := findingOf(runs[iIso].rep.Tasks[0], taskcheck.CheckIsolation); !strings.Contains(f.Detail, "treatment=open") || strings.Contains(f.Detail, "network") {
		t.Errorf("isolation finding %+v, want treatment=open alone", f)
	}

	// The check run is a run of the log: replay reproduces its artifact.
	art, err := os.ReadFile(filepath.Join(full.out, full.runID, "task_runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	replayed := filepath.Join(full.out, "replayed.json")
	setenv(t, "PROCTOR_HOME", full.home)
	var rout, rerr bytes.Buffer
	if c := mainT(t, []string{"replay", full.runID, "--out-json", replayed, "--out-md", filepath.Join(full.out, "replayed.md")}, &rout, &rerr); c != 0 {
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
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	r := runCheck(t, []string{"static-solve-reads-tests", "clean-server"}, "static")
	if r.runID != "" || len(r.rep.Tasks) != 2 || r.rep.Tasks[0].Verdict != taskcheck.Fail || r.rep.Tasks[1].Verdict != taskcheck.Pass ||
		findingOf(r.rep.Tasks[1], taskcheck.CheckOracle).Verdict != taskcheck.Skip {
		t.Fatalf("%+v\nstdout: %s", r.rep, r.stdout)
	}
	root, _ := filepath.Abs("../../examples/check-tasks")
	var stdout, stderr bytes.Buffer
	code := mainT(t, []string{"tasks", "check", "--tasks-root", root, "--all", "--checks", "oracle,cheat:nope"}, &stdout, &stderr)
	if code != ExitUsage || !strings.Contains(stderr.String(), `unknown check "cheat:nope"`) {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

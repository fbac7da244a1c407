package harness_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

var staticSet sync.Once

// staticProctor builds proctor with CGO_ENABLED=0 once per test binary
// (testutil.ProctorBinary, the file the other Docker tests use) and points
// PROCTOR_PROBE_BINARY at it. Every probe test wants the same file, so the
// variable is set once for the process and never unset, instead of
// by each test with t.Setenv, which a parallel test cannot call; a test
// that wants another binary gives its Env's Vars one.
func staticProctor(t *testing.T) {
	t.Helper()
	bin := testutil.ProctorBinary(t)
	var err error
	staticSet.Do(func() { err = os.Setenv(harness.ProbeBinaryEnv, bin) })
	if err != nil {
		t.Fatal(err)
	}
}

func report(statuses map[string]string) string {
	rep := isoprobe.Report{Classes: map[string]isoprobe.Finding{}}
	for c, s := range statuses {
		rep.Classes[c] = isoprobe.Finding{Status: s}
	}
	b, _ := json.Marshal(rep)
	return string(b)
}

func allClosed() map[string]string {
	m := map[string]string{}
	for _, c := range isoprobe.Classes {
		m[c] = isoprobe.Closed
	}
	m[isoprobe.GitHistory] = isoprobe.NA
	return m
}

// TestProbeSolveFake: the probe runs as uid 10001 in the agent's workdir
// with the agent's variables, on the agent's network plan; its report is
// folded into isolation_probe.json, Finished.isolation_probe and a Verdict
// that passes only when every class is closed or n/a.
func TestProbeSolveFake(t *testing.T) {
	t.Parallel()
	staticProctor(t)
	leaky := allClosed()
	leaky[isoprobe.Network] = isoprobe.Open
	missing := allClosed()
	delete(missing, isoprobe.DNS)
	for _, c := range []struct {
		name    string
		stdout  string
		passed  bool
		failing string
	}{
		{"closed", report(allClosed()), true, ""},
		{"network open", report(leaky), false, "network=open"},
		{"a class missing is untested", report(missing), false, "dns=untested"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "probe-inside", Stdout: c.stdout}}}
			tk := harnesstest.Task(t, "t", nil)
			env := harnesstest.NewEnv(t, tk, "docker-probe", d)
			p, out, err := harnesstest.Run(context.Background(), arm(t, "docker-probe"), env)
			if err != nil {
				t.Fatal(err)
			}
			if p.Networks.Start != "internal" || p.Workdir != "/app" {
				t.Errorf("placement %+v", p)
			}
			var probeExec *sandboxfake.Exec
			for _, e := range d.Execs() {
				if strings.Contains(strings.Join(e.Spec.Cmd, " "), "probe-inside") {
					probeExec = &e
				}
			}
			if probeExec == nil || probeExec.Spec.User != harness.AgentUser || probeExec.Spec.Workdir != "/app" ||
				probeExec.Spec.Env["PROCTOR_WORKSPACE"] != "/app" || probeExec.Spec.Env["HOME"] == "" {
				t.Fatalf("probe exec %+v", probeExec)
			}
			if out.Verdict == nil || (*out.Verdict.Reward == 1) != c.passed {
				t.Fatalf("verdict %+v, want passed %v", out.Verdict, c.passed)
			}
			if got := out.Finished.IsolationProbe; len(got) != len(isoprobe.Classes) {
				t.Fatalf("isolation_probe %v", got)
			}
			if c.failing != "" && !strings.Contains(out.Finished.Reason, c.failing) {
				t.Errorf("reason %q, want %s", out.Finished.Reason, c.failing)
			}
			var res harness.ProbeResult
			b, err := os.ReadFile(env.DirV.Path(harness.ProbeReportFile))
			if err != nil || json.Unmarshal(b, &res) != nil || res.Passed != c.passed {
				t.Fatalf("isolation_probe.json: %v %s", err, b)
			}
		})
	}
}

// TestProbeNoReportIsNoVerdict: a probe program that prints no report (it
// crashed, or something in the image answered for it) errors the cell; it
// never passes.
func TestProbeNoReportIsNoVerdict(t *testing.T) {
	t.Parallel()
	staticProctor(t)
	for _, s := range []sandboxfake.Script{
		{Match: "probe-inside", Stdout: "all good\n"},
		{Match: "probe-inside", Exit: 2, Stdout: report(allClosed())},
		{Match: "probe-inside", TimedOut: true},
	} {
		d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{s}}
		env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "probe", d)
		_, out, err := harnesstest.Run(context.Background(), arm(t, "probe"), env)
		if c, _ := events.ClassOf(err); c != events.ClassSandbox || out.Verdict != nil {
			t.Errorf("%+v: err %v verdict %+v, want a sandbox error and no verdict", s, err, out.Verdict)
		}
	}
}

// TestProbeNeedsStaticBinary: a dynamically linked binary is refused with
// how to get a static one.
func TestProbeNeedsStaticBinary(t *testing.T) {
	t.Parallel()
	d := &sandboxfake.Driver{}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "probe", d)
	env.Vars = map[string]string{harness.ProbeBinaryEnv: "/bin/sh"}
	_, _, err := harnesstest.Run(context.Background(), arm(t, "probe"), env)
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("err %v", err)
	}
}

// TestProbePreflight: a run with a probe arm and a dynamically linked
// proctor fails before it starts, saying how to get a static one; a static
// binary passes, and a run without a probe arm is not checked.
func TestProbePreflight(t *testing.T) {
	bin := testutil.ProctorBinary(t)
	t.Setenv(harness.ProbeBinaryEnv, "/bin/sh")
	err := harness.Preflight(context.Background(), []string{"oracle", "docker-probe"})
	if err == nil || !strings.Contains(err.Error(), "harness docker-probe:") || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("a dynamic binary: %v", err)
	}
	if err := harness.Preflight(context.Background(), []string{"oracle"}); err != nil {
		t.Errorf("no probe arm, yet %v", err)
	}
	t.Setenv(harness.ProbeBinaryEnv, bin)
	if err := harness.Preflight(context.Background(), []string{"docker-probe", "docker-probe:skills/pdf"}); err != nil {
		t.Errorf("a static binary: %v", err)
	}
}

// TestProbeRefs: the three spellings parse, are setup checks, and the
// skill form needs a SKILL.md.
func TestProbeRefs(t *testing.T) {
	for _, n := range []string{"probe", "docker-probe", "docker-probe:skills/pdf", "docker-probe-skill:skills/pdf"} {
		if !harness.IsSetupCheck(n) {
			t.Errorf("%s is not a setup check", n)
		}
		if _, err := harness.Lookup(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := harness.Parse("docker-probe:"); err == nil {
		t.Error("docker-probe: with no skill path parsed")
	}
	for _, n := range []string{"docker-probe:skills/pdf", "docker-probe-skill:skills/pdf"} {
		a, _ := harness.Lookup(n)
		if err := a.Check(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "SKILL.md") {
			t.Errorf("%s: a skill without SKILL.md: %v", n, err)
		}
	}
}

// TestProbeExpectedClass: a class the task declares expected
// (metadata.probe_expect) passes the probe when the program finds it open,
// marked expected in Finished.isolation_probe and isolation_probe.json with
// its reason; another open class still fails it. A probe_expect naming no
// class refuses the task, naming the file and key.
func TestProbeExpectedClass(t *testing.T) {
	t.Parallel()
	staticProctor(t)
	expecting := harnesstest.Files{"task.toml": "version = \"1.0\"\n\n[agent]\ntimeout_sec = 30\n\n[metadata]\nprobe_expect = { git_history = \"the task is to recover history\" }\n"}
	history := allClosed()
	history[isoprobe.GitHistory] = isoprobe.Open
	both := allClosed()
	both[isoprobe.GitHistory], both[isoprobe.Env] = isoprobe.Open, isoprobe.Open
	for _, c := range []struct {
		name   string
		stdout string
		passed bool
		reason string
	}{
		{"the expected class open", report(history), true, "every class closed, n/a or expected; expected: git_history (the task is to recover history)"},
		{"another class open too", report(both), false, "leaks: env=open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "probe-inside", Stdout: c.stdout}}}
			env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", expecting), "docker-probe", d)
			_, out, err := harnesstest.Run(context.Background(), arm(t, "docker-probe"), env)
			if err != nil {
				t.Fatal(err)
			}
			if (*out.Verdict.Reward == 1) != c.passed || out.Finished.Reason != c.reason || out.Finished.IsolationProbe[isoprobe.GitHistory] != isoprobe.Expected {
				t.Fatalf("reward %v, reason %q, classes %v", *out.Verdict.Reward, out.Finished.Reason, out.Finished.IsolationProbe)
			}
			var res harness.ProbeResult
			b, _ := os.ReadFile(env.DirV.Path(harness.ProbeReportFile))
			if err := json.Unmarshal(b, &res); err != nil || res.Expected[isoprobe.GitHistory] != "the task is to recover history" || res.Report.Classes[isoprobe.GitHistory].Status != isoprobe.Open {
				t.Fatalf("isolation_probe.json: %v %s", err, b)
			}
		})
	}
	bad := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "version = \"1.0\"\n\n[metadata]\nprobe_expect = { git-history = \"x\" }\n"})
	if c, r := arm(t, "docker-probe").Refusal(bad); c != events.ClassRefused || !strings.HasPrefix(r, `task.toml: metadata.probe_expect: "git-history" is not a leak class (task_files,`) {
		t.Fatalf("refusal %s %q", c, r)
	}
}

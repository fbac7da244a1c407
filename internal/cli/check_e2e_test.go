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
	"github.com/proctor-eval/proctor/pkg/taskcheck"
)

// TestTasksCheck runs `proctor tasks check` over examples/check-tasks
// against a real Docker engine: every fixture made to fail one check is
// flagged by exactly that check (a cheat that gets through is a cheating
// agent passing a weak verifier), the clean near misses PASS, isolation
// is never PASS, the command exits 1, and the check run is an ordinary
// run of the event log (replay reproduces its artifact).
func TestTasksCheck(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root, err := filepath.Abs("../../examples/check-tasks")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	js, md := filepath.Join(out, "check.json"), filepath.Join(out, "check.md")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"tasks", "check", "--tasks-root", root, "--all", "--concurrency", "2",
		"--output-dir", out, "--out-json", js, "--out-md", md}, &stdout, &stderr)
	if code != ExitError {
		t.Fatalf("exit %d, want 1 (tasks FAIL)\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr.String())
	}
	var rep taskcheck.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// flagged: the checks whose findings are not PASS (nor SKIP).
	want := map[string][]string{
		"clean-answer-in-tests":    nil,
		"clean-server":             nil,
		"clean-recompute":          nil,
		"static-solve-reads-tests": {"static"},
		"oracle-wrong":             {"oracle"},
		"verifier-over-budget":     {"oracle"},
		"noop-passes":              {"no-op"},
		"cheat-reward-files":       {"cheat:reward-files"},
		"cheat-plant-hooks":        {"cheat:plant-hooks"},
		"cheat-stub-invoked":       {"cheat:stub-invoked"},
		"cheat-reward-daemon":      {"cheat:reward-daemon"},
		"cheat-read-graders":       {"cheat:read-graders"},
	}
	got := map[string]taskcheck.TaskResult{}
	for _, tr := range rep.Tasks {
		got[tr.Task] = tr
	}
	for name, checks := range want {
		t.Run(name, func(t *testing.T) {
			tr, ok := got[name]
			if !ok {
				t.Fatalf("no result for %s", name)
			}
			var flagged []string
			seen := map[string]bool{}
			for _, f := range tr.Findings {
				if f.Check == taskcheck.CheckIsolation && (f.Verdict != taskcheck.Skip || !strings.HasPrefix(f.Detail, "not run")) {
					t.Errorf("isolation finding %+v, want SKIP not run (no probe in this build)", f)
				}
				if f.Verdict != taskcheck.Pass && f.Verdict != taskcheck.Skip && !seen[f.Check] {
					seen[f.Check] = true
					flagged = append(flagged, f.Check)
				}
			}
			sort.Strings(flagged)
			wantV := taskcheck.Pass
			if len(checks) > 0 {
				wantV = taskcheck.Fail
			}
			if strings.Join(flagged, ",") != strings.Join(checks, ",") || tr.Verdict != wantV {
				t.Errorf("verdict %s flagged by %v, want %s by %v\nfindings: %+v", tr.Verdict, flagged, wantV, checks, tr.Findings)
			}
			if len(checks) > 0 && tr.DecidedBy != checks[0] {
				t.Errorf("decided by %q, want %q", tr.DecidedBy, checks[0])
			}
		})
	}
	if t.Failed() {
		t.Logf("stderr: %s", stderr.String())
	}
	// The noop-passes task: a passing cheat proves nothing there.
	for _, f := range got["noop-passes"].Findings {
		if strings.HasPrefix(f.Check, "cheat:") && f.Verdict != taskcheck.Skip {
			t.Errorf("noop-passes %s: %s, want SKIP (inconclusive)", f.Check, f.Verdict)
		}
	}
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| oracle-wrong | FAIL | oracle: the reference solution does not pass", "| clean-server | PASS | every check |",
		"| verifier-over-budget | FAIL | oracle: verifier over budget", "SKIP isolation: not run"} {
		if !bytes.Contains(report, []byte(s)) {
			t.Errorf("check.md lacks %q:\n%s", s, report)
		}
	}
	// The check run is a run of the log: replay reproduces its artifact.
	m := runIDRe.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no run id in %s", stdout.String())
	}
	if rep.RunID != m[1] {
		t.Errorf("report run_id %q, want %q", rep.RunID, m[1])
	}
	art, err := os.ReadFile(filepath.Join(out, m[1], "task_runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	replayed := filepath.Join(out, "replayed.json")
	var rout, rerr bytes.Buffer
	if c := Main([]string{"replay", m[1], "--out-json", replayed, "--out-md", filepath.Join(out, "replayed.md")}, &rout, &rerr); c != 0 {
		t.Fatalf("replay exit %d: %s", c, rerr.String())
	}
	if b, _ := os.ReadFile(replayed); !bytes.Equal(b, art) {
		t.Errorf("replay of the check run differs from its artifact")
	}
	if nc, nn := leftovers(t, cli, m[1]); nc+nn > 0 {
		t.Errorf("%d containers and %d networks of the check run remain", nc, nn)
	}
}

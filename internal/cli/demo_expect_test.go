package cli

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestDemoExpectFailsOnAMismatch runs scripts/demo-expect.sh, the check
// `make demo` makes after each run, against the imported golden run: it
// passes when every named cell ended as expected, and exits 1 naming each
// cell that did not (a wrong outcome, a cell the run does not have).
func TestDemoExpectFailsOnAMismatch(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PROCTOR_HOME", home)
	mustProctor(t, "events", "import", fixtureLog)
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command("../../scripts/demo-expect.sh", append([]string{fixtureArtifact, "the golden run"}, args...)...)
		cmd.Env = append(os.Environ(), "PROCTOR_HOME="+home, "PROCTOR="+testutil.ProctorBinary(t))
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run("fix-sum/oracle/m1/1=passed", "slow-check/oracle/m1/1=verifier_timeout", "needs-token/oracle/m1/1=errored")
	if code != 0 || !strings.Contains(out, "demo: checked: the golden run") {
		t.Errorf("matching outcomes: exit %d:\n%s", code, out)
	}
	out, code = run("fix-sum/oracle/m1/1=passed", "count-words/oracle/m1/1=passed", "fix-sum/nope/m1/1=passed")
	if code != 1 || strings.Contains(out, "checked") ||
		!strings.Contains(out, "MISMATCH in run "+fixtureRun+": count-words/oracle/m1/1: expected passed, got failed") ||
		!strings.Contains(out, "fix-sum/nope/m1/1: expected passed, got no such cell") ||
		strings.Contains(out, "fix-sum/oracle/m1/1: expected") {
		t.Errorf("mismatching outcomes: exit %d:\n%s", code, out)
	}
}

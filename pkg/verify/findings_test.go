package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestFindings reads real runner output and report files: a runner whose
// every summary counts zero tests is no_tests_executed, one that ran a
// test anywhere is not, and a pass whose script exited non-zero is a
// reward_exit_conflict.
func TestFindings(t *testing.T) {
	one, zero := 1.0, 0.0
	rc := func(n int) *int { return &n }
	for _, c := range []struct {
		name    string
		log     string
		reports map[string]string
		reward  *float64
		rc      *int
		want    []string // kinds
		detail  string
	}{
		{"unittest ran none", "\n----------------------------------------------------------------------\nRan 0 tests in 0.000s\n\nOK\n", nil, &one, rc(0), []string{FindingNoTestsExecuted}, "unittest: Ran 0 tests"},
		{"unittest ran some", "..\nRan 2 tests in 0.001s\n\nOK\n", nil, &one, rc(0), nil, ""},
		{"pytest no tests ran", "collected 0 items\n\n\x1b[33m============================ no tests ran in 0.01s =============================\x1b[0m\n", nil, &zero, rc(5), []string{FindingNoTestsExecuted}, "pytest: "},
		{"pytest passed", "collected 3 items\n\ntest_x.py ...                                                            [100%]\n\n============================== 3 passed in 0.02s ===============================\n", nil, &one, rc(0), nil, ""},
		{"pytest all deselected", "collected 2 items / 2 deselected / 0 selected\n\n====================== 2 deselected in 0.01s =======================\n", nil, &one, rc(5), []string{FindingRewardExitConflict, FindingNoTestsExecuted}, "2 deselected"},
		{"pytest cut off", "collected 0 items\n", nil, &one, rc(0), []string{FindingNoTestsExecuted}, "collected 0 items"},
		{"two runners, one ran", "Ran 0 tests in 0.000s\n===== 1 passed in 0.01s =====\n", nil, &one, rc(0), nil, ""},
		{"ctrf none", "", map[string]string{"ctrf.json": `{"results":{"tool":{"name":"jest"},"summary":{"tests":2,"passed":0,"failed":0,"skipped":2}}}`}, &one, rc(0), []string{FindingNoTestsExecuted}, "CTRF ctrf.json"},
		{"ctrf some", "", map[string]string{"ctrf.json": `{"results":{"summary":{"tests":2,"passed":2}}}`}, &one, rc(0), nil, ""},
		{"junit skipped only", "", map[string]string{"junit.xml": `<testsuites><testsuite tests="1"><testcase name="a"><skipped/></testcase></testsuite></testsuites>`}, &zero, rc(0), []string{FindingNoTestsExecuted}, "JUnit junit.xml: 0 tests"},
		{"junit ran", "", map[string]string{"junit.xml": `<testsuite><testcase name="a"/><testcase name="b"><failure/></testcase></testsuite>`}, &zero, rc(1), nil, ""},
		{"not a report", "", map[string]string{"data.json": `{"x":1}`, "page.xml": `<html/>`}, &one, rc(0), nil, ""},
		{"conflict", "ok\n", nil, &one, rc(1), []string{FindingRewardExitConflict}, "reward 1 but the test script exited 1"},
		{"fail exits 1", "", nil, &zero, rc(1), nil, ""},
		{"no reward", "Ran 0 tests in 0.000s\n", nil, nil, rc(1), []string{FindingNoTestsExecuted}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "verifier.log")
			if err := os.WriteFile(logPath, []byte(c.log), 0o644); err != nil {
				t.Fatal(err)
			}
			vdir := filepath.Join(dir, "logs", "verifier")
			if err := os.MkdirAll(vdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, body := range c.reports {
				if err := os.WriteFile(filepath.Join(vdir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := Findings(events.VerdictData{Reward: c.reward, ReturnCode: c.rc}, logPath, vdir)
			var kinds []string
			all := ""
			for _, f := range got {
				kinds = append(kinds, f.Kind)
				all += f.Detail + "\n"
			}
			if strings.Join(kinds, ",") != strings.Join(c.want, ",") || !strings.Contains(all, c.detail) {
				t.Errorf("findings %+v, want kinds %v with %q", got, c.want, c.detail)
			}
		})
	}
	// A report that is a link is never read.
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere.json")
	if err := os.WriteFile(target, []byte(`{"results":{"summary":{"tests":0}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "ctrf.json")); err != nil {
		t.Fatal(err)
	}
	if got := Findings(events.VerdictData{}, filepath.Join(dir, "none.log"), dir); len(got) != 1 {
		// elsewhere.json itself is a regular report at the top of dir.
		t.Errorf("findings %+v, want the regular report's only", got)
	}
}

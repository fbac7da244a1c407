package cli

import (
	"bytes"
	"testing"

	"github.com/proctor-eval/proctor/pkg/taskcheck"
)

// TestCheckSummarySaysWhatToFix: after its run tasks check prints the
// verdicts counted and, for each task a check decided, that check's
// finding, not only its name; a task no check decided says every check
// passed only when every one ran, else which did not and why; a task's
// own text cannot break the line.
func TestCheckSummarySaysWhatToFix(t *testing.T) {
	rep := taskcheck.Report{Tasks: []taskcheck.TaskResult{
		{Task: "graded-in-image", Verdict: taskcheck.Warn, DecidedBy: "static", Findings: []taskcheck.Finding{
			{Check: "oracle", Verdict: taskcheck.Pass, Detail: "the reference solution passes"},
			{Check: "static", Verdict: taskcheck.Warn, Detail: "ship it under tests/ instead"},
		}},
		{Task: "leaky\nname", Verdict: taskcheck.Fail, DecidedBy: "cheat:reward-files", Findings: []taskcheck.Finding{
			{Check: "cheat:reward-files", Verdict: taskcheck.Fail, Detail: "reward-files passes (passed, reward 1)"},
		}},
		{Task: "sound", Verdict: taskcheck.Pass},
		{Task: "partly", Verdict: taskcheck.Pass, Findings: []taskcheck.Finding{
			{Check: "oracle", Verdict: taskcheck.Pass, Detail: "the reference solution passes"},
			{Check: "no-op", Verdict: taskcheck.Skip, Detail: "not run: not selected by --checks"},
			{Check: "isolation", Verdict: taskcheck.Skip, Detail: "not run: errored (infra): the probe needs a static proctor binary"},
			{Check: "cheat:reward-files", Verdict: taskcheck.Skip, Detail: "not run: not selected by --checks"},
		}},
	}}
	var b bytes.Buffer
	if err := writeCheckSummary(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := "tasks check: 4 tasks: 1 FAIL, 1 WARN, 2 PASS\n" +
		"WARN  graded-in-image  static: ship it under tests/ instead\n" +
		"FAIL  leaky\\nname      cheat:reward-files: reward-files passes (passed, reward 1)\n" +
		"PASS  sound            every check passed\n" +
		"PASS  partly           every check that ran passed; not run: no-op, cheat:reward-files (not selected by --checks); isolation (errored (infra): the probe needs a static proctor binary)\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

package artifact

import (
	"bytes"
	"strings"
	"testing"
)

// fencedBlocks parses the fenced code blocks of md the way CommonMark
// does for backtick fences at column 0: a block opened by N backticks is
// closed only by a line of at least N backticks and nothing else.
func fencedBlocks(t *testing.T, md string) []string {
	t.Helper()
	var blocks []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		open := longestRun(lines[i], '`')
		if open < 3 || !strings.HasPrefix(lines[i], strings.Repeat("`", open)) {
			continue
		}
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			l := lines[i]
			if n := longestRun(l, '`'); n >= open && strings.TrimRight(l, "`") == "" {
				closed = true
				break
			}
			body = append(body, l)
		}
		if !closed {
			t.Fatalf("a fence of %d backticks is never closed", open)
		}
		blocks = append(blocks, strings.Join(body, "\n"))
	}
	return blocks
}

func TestStdoutTailCannotBreakReport(t *testing.T) {
	tails := []string{
		"plain\n",
		"```\n# injected heading\n```\n",
		"````` five\n``````\nno newline at end",
		"`",
		"~~~\n| a | b |\n",
	}
	for _, tail := range tails {
		row := scoredRow("t", 0, 1)
		row.StdoutTail = tail
		a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"},
			[]Result{row}, testBuild)
		var md bytes.Buffer
		if err := WriteReport(&md, a); err != nil {
			t.Fatal(err)
		}
		blocks := fencedBlocks(t, md.String())
		if len(blocks) != 1 {
			t.Fatalf("tail %q: %d fenced blocks, want 1:\n%s", tail, len(blocks), md.String())
		}
		if want := strings.TrimSuffix(tail, "\n"); blocks[0] != want {
			t.Errorf("tail %q came back as %q", tail, blocks[0])
		}
	}
}

func TestCodeSpan(t *testing.T) {
	cases := map[string]string{
		"oracle":     "`oracle`",
		"a`b":        "``a`b``",
		"`x":         "`` `x ``",
		"":           "—",
		"two\nlines": "`two lines`",
		"agent:a|b":  "`agent:a|b`",
	}
	for in, want := range cases {
		if got := code(in); got != want {
			t.Errorf("code(%q) = %q, want %q", in, got, want)
		}
	}
	if got := tableCode("agent:a|b"); got != "`agent:a\\|b`" {
		t.Errorf("tableCode = %q", got)
	}
}

func TestReportHarnessOrderFollowsRun(t *testing.T) {
	rows := []Result{scoredRow("t", 0, 1), scoredRow("t", 0, 0)}
	rows[0].Harness, rows[1].Harness = "zeta", "alpha"
	a := Build(RunInfo{ID: "r", Harnesses: []string{"zeta", "alpha"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"},
		rows, testBuild)
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	s := md.String()
	if strings.Index(s, "- `zeta`: 1/1") > strings.Index(s, "- `alpha`: 0/1") {
		t.Errorf("headlines not in run order:\n%s", s)
	}
	if !strings.Contains(s, "| task | `zeta` | `alpha` |") {
		t.Errorf("task table columns not in run order:\n%s", s)
	}
}

func TestReportNamesTheInterval(t *testing.T) {
	rows := concat(arm("base", "m", 0, "FFFFFF"), arm("x", "m", 0, "PPPPPP"))
	a := Build(RunInfo{ID: "r", Harnesses: []string{"base", "x"}, Repeats: 1, BaselineHarness: "base", StartedAt: "2026-01-01T00:00:00Z"},
		rows, testBuild)
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); !strings.Contains(s, "| +100.0 pp | +44.8 to +100.0 pp |") ||
		!strings.Contains(s, "The 95 % CI of the paired Δ is Newcombe's hybrid score interval") {
		t.Errorf("report does not show or name the Newcombe interval:\n%s", s)
	}
	// An artifact written before ci_method existed held the bootstrap in
	// ci_lo, ci_hi: its report says so.
	a.Summary.Comparisons["x"].McNemar.CIMethod = ""
	md.Reset()
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); !strings.Contains(s, "The 95 % CI of the paired Δ is a seeded bootstrap over tasks.") {
		t.Errorf("old artifact's interval misnamed:\n%s", s)
	}
}

// TestReportSkillInvocations: a skill arm's invocation rate is listed under
// the harness table; a run without a skill arm has no such table.
func TestReportSkillInvocations(t *testing.T) {
	rows := []Result{scoredRow("t", 0, 1), scoredRow("u", 0, 0), scoredRow("t", 0, 0)}
	rows[0].Harness, rows[1].Harness, rows[2].Harness = "skill", "skill", "control"
	rows[0].Metrics.AgentReported = map[string]any{"treatment": "s", "n_skill_invocations": 1.0}
	rows[1].Metrics.AgentReported = map[string]any{"treatment": "s", "n_skill_invocations": 0.0}
	a := Build(RunInfo{ID: "r", Harnesses: []string{"control", "skill"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"},
		rows, testBuild)
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); !strings.Contains(s, "| `skill` | 50.0 % | 2 |") || strings.Contains(s, "| `control` | 0.0 % |") {
		t.Errorf("skill invocation table:\n%s", s)
	}
	a = Build(RunInfo{ID: "r", Harnesses: []string{"control"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}, rows[2:], testBuild)
	md.Reset()
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "skill invocation") {
		t.Errorf("a run without a skill arm lists skill invocations:\n%s", md.String())
	}
}

// A harness with a total cost but no cost per pass (a cell without a
// cost) says why its cost per pass is a dash; one priced throughout does
// not.
func TestReportExplainsMissingCostPerPass(t *testing.T) {
	priced := []Result{scoredRow("t", 0, 1), scoredRow("u", 0, 1)}
	priced[0].Metrics.CostUSD, priced[1].Metrics.CostUSD = f64(0.5), f64(0.25)
	report := func(rows []Result) string {
		a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}, rows, testBuild)
		var md bytes.Buffer
		if err := WriteReport(&md, a); err != nil {
			t.Fatal(err)
		}
		return md.String()
	}
	if s := report(priced); strings.Contains(s, "Cost per pass is —") || !strings.Contains(s, "| 0.7500 | 0.3750 |") {
		t.Errorf("priced throughout:\n%s", s)
	}
	if s := report(append(priced, erroredRow("v", 0, "build"))); !strings.Contains(s, "Cost per pass is — where a cell of the harness") {
		t.Errorf("an unpriced errored cell, no reason for the dash:\n%s", s)
	}
}

// TestReportShowsFindings: a suspect cell (tamper findings) and the
// verifier's findings are counted per harness, marked on the cell and
// listed under it; the artifact with them validates against task_runs.v1.
func TestReportShowsFindings(t *testing.T) {
	suspect := scoredRow("a", 0, 1)
	suspect.Metrics.TamperFindings = []TamperFinding{{Path: "/app/unittest.py", Change: "created", Shadows: "python module unittest"}}
	empty := scoredRow("b", 0, 1)
	empty.Metrics.VerifierFindings = []VerifierFinding{{Kind: "no_tests_executed", Detail: "unittest: Ran 0 tests in 0.000s"},
		{Kind: "reward_exit_conflict", Detail: "reward 1 but the test script exited 1"}}
	clean := scoredRow("c", 0, 0)
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"},
		[]Result{suspect, empty, clean}, testBuild)
	s := a.Summary.PerHarness["h"]
	if s.Suspect != 1 || s.VerifierFindings["no_tests_executed"] != 1 || s.VerifierFindings["reward_exit_conflict"] != 1 || s.Passed != 2 {
		t.Errorf("summary suspect %d findings %v passed %d", s.Suspect, s.VerifierFindings, s.Passed)
	}
	js, err := Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(js); err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `h` | 1 | 1 | 1 | 0 |",
		"### `a` · `h` · `m` · repeat 0 · suspect",
		"- `/app/unittest.py` created (python module unittest)",
		"- `no_tests_executed`: unittest: Ran 0 tests in 0.000s",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "`c` · `h` · `m` · repeat 0 · suspect") {
		t.Error("a clean cell is marked suspect")
	}
}

// TestReportShowsRecompileAndWorkCut: a cell whose build failed when it
// was run again after the solve shows the command and the compiler's
// output tail; one whose work/ copy the cap cut says what was left out.
func TestReportShowsRecompileAndWorkCut(t *testing.T) {
	failed := scoredRow("a", 0, 1)
	failed.Metrics.Recompile = &Recompile{Commands: []string{"g++ -o /app/x /app/x.cpp"}, ExitCode: 1, Failed: true, OutputTail: "x.cpp:1:1: error: expected ';'"}
	failed.Metrics.RecompileFailed = true
	failed.Metrics.WorkTree = &WorkTree{Path: "/app", CapBytes: 10, CapEntries: 5, Truncated: true, SkippedEntries: 1, SkippedBytes: 99, Skipped: []string{"/app/big (99 bytes)"}}
	ok := scoredRow("b", 1, 1)
	ok.Metrics.Recompile = &Recompile{Commands: []string{"g++ -o /app/x /app/x.cpp"}}
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}, []Result{failed, ok}, testBuild)
	js, err := Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(js); err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Recompile failed (exit 1; scored as the verifier found it): `g++ -o /app/x /app/x.cpp`",
		"x.cpp:1:1: error: expected ';'",
		"work/ cut at its cap (10 bytes, 5 entries): 1 entries left out (99 bytes of files), first `/app/big (99 bytes)`.",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Count(md.String(), "Recompile failed") != 1 {
		t.Error("a recompile that did not fail is reported")
	}
}

// TestReportShowsObservedBesideReported: a cell behind the model gateway
// shows the agent's figures and the gateway's in one line, flagged when
// they differ by more than 1 %; an arm whose every cell the gateway
// priced is costed (and costed per pass) from the observed figures, and so
// are its tasks and cells.
func TestReportShowsObservedBesideReported(t *testing.T) {
	rows := []Result{scoredRow("t", 0, 1), scoredRow("u", 0, 1)}
	for i, r := range rows {
		r.Metrics.CostUSD, r.Metrics.PromptTokens, r.Metrics.CompletionTokens = f64(9), i64(5000), i64(700)
		r.Metrics.UsageObserved = &UsageObserved{Requests: 2, InputTokens: 1000, OutputTokens: 100, CostUSD: f64(0.5),
			ReportedDiffers: boolp(i == 0)}
		rows[i] = r
	}
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}, rows, testBuild)
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	s := md.String()
	for _, want := range []string{
		"| 1.0000 | 0.5000 |", "Cost of `h` is what the model gateway observed",
		// the per-task and per-cell costs are the same observed figures
		// that add up to the harness's total, not the agent's own 9
		"| `t` | `h` | 1/1 | 0 | 0.5000 | 0.5000 |", "| `u` | `h` | 1/1 | 0 | 0.5000 | 0.5000 |",
		"Usage: reported 5000 / 700 / — / — tokens (in / out / cache read / cache write), cost 9.0000; observed 1000 / 100 / 0 / 0 in 2 requests, cost 0.5000. **Reported and observed tokens differ by more than 1 %.**",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
	if n := strings.Count(s, " | 0.5000 |\n"); n != 5 {
		t.Errorf("%d rows end in the observed cost 0.5000, want 5 (the cost per pass, two tasks, two cells):\n%s", n, s)
	}
	if strings.Contains(s, "9.0000 |") {
		t.Errorf("a table shows the agent's reported cost of an arm costed from the gateway:\n%s", s)
	}
	if strings.Count(s, "differ by more than 1 %") != 1 {
		t.Errorf("one cell is flagged, not %d", strings.Count(s, "differ by more than 1 %"))
	}
}

func i64(n int64) *int64 { return &n }
func boolp(b bool) *bool { return &b }

// TestUsageLineNotReported: an agent that gave no usage of its own is
// labelled so beside what the gateway observed.
func TestUsageLineNotReported(t *testing.T) {
	m := Metrics{UsageObserved: &UsageObserved{Requests: 1, InputTokens: 7, OutputTokens: 1, CostUSD: f64(0.0001)}}
	if got, want := UsageLine(m), "Usage: reported: not reported by harness; observed 7 / 1 / 0 / 0 in 1 request, cost 0.0001."; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	// The reason the agent's harness recorded is shown as the artifact
	// holds it: a missing metrics.json is named, an unreadable one says why.
	m.AgentReported = map[string]any{"metrics_json": "not reported by harness (no metrics.json)"}
	if got, want := UsageLine(m), "Usage: reported: not reported by harness (no metrics.json); observed 7 / 1 / 0 / 0 in 1 request, cost 0.0001."; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	m.AgentReported = map[string]any{"metrics_json": "not reported by harness", "error": "metrics.json is a symbolic link: not read"}
	if got, want := UsageLine(m), "Usage: reported: not reported by harness (metrics.json is a symbolic link: not read); observed 7 / 1 / 0 / 0 in 1 request, cost 0.0001."; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	m.PromptTokens = i64(0)
	if got := UsageLine(m); !strings.Contains(got, "reported 0 / — / — / —") {
		t.Errorf("a reported 0 is a report: %q", got)
	}
}

// TestReportNoticeVersions: a run with skill-arm rows names their notice
// version and says deltas across versions are not comparable; a run whose
// rows hold two versions is flagged; the artifact is schema-valid.
func TestReportNoticeVersions(t *testing.T) {
	rows := []Result{scoredRow("t", 0, 1), scoredRow("u", 0, 0), scoredRow("t", 0, 0)}
	rows[0].Harness, rows[1].Harness, rows[2].Harness = "skill", "skill", "control"
	rows[0].Metrics.Treatment = &Treatment{Skill: "s", NoticeVersion: 2}
	rows[1].Metrics.Treatment = &Treatment{Skill: "s", NoticeVersion: 2}
	report := func(rows []Result) string {
		a := Build(RunInfo{ID: "r", Harnesses: []string{"control", "skill"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}, rows, testBuild)
		if _, err := Marshal(a); err != nil {
			t.Fatal(err)
		}
		var md bytes.Buffer
		if err := WriteReport(&md, a); err != nil {
			t.Fatal(err)
		}
		return md.String()
	}
	if s := report(rows); !strings.Contains(s, "Skill notice version 2 (metrics.treatment.notice_version): deltas across notice versions are not comparable.") {
		t.Errorf("one version:\n%s", s)
	}
	rows[1].Metrics.Treatment = &Treatment{Skill: "s", NoticeVersion: 1}
	if s := report(rows); !strings.Contains(s, "Skill notice version 1, 2") || !strings.Contains(s, "more than one") {
		t.Errorf("two versions:\n%s", s)
	}
	if s := report(rows[2:]); strings.Contains(s, "notice version") {
		t.Errorf("no skill arm:\n%s", s)
	}
}

// TestReportTitleCountsOneCell: a run of one cell says "1 cell" in the
// report's facts line, not "1 cells".
func TestReportTitleCountsOneCell(t *testing.T) {
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}, []Result{scoredRow("t", 0, 1)}, testBuild)
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); !strings.Contains(s, "\n1 cell · 1 repeat · ") {
		t.Errorf("facts line of a one-cell run:\n%s", s)
	}
}

// TestReportShowsVerifierTailOfMisses: a cell the verifier scored below 1
// (failed, timed out, without a verdict) shows the verifier's own words
// (the runner's assertion, a tool it could not find) under "Verifier
// output (tail)", fenced so they cannot break the report; a passed cell's
// is left out; the row keeps it as verifier_tail, schema-valid.
func TestReportShowsVerifierTailOfMisses(t *testing.T) {
	failed := scoredRow("a", 1, 0)
	failed.VerifierTail = "FAILED test_outputs.py::test_totals - assert 199 == 200\n```\n# not a heading\n"
	timedOut := scoredRow("b", 1, 0)
	timedOut.Outcome, timedOut.VerifierTail = OutcomeVerifierTimeout, "/tests/test.sh: line 7: pytest: command not found\n"
	noVerdict := scoredRow("c", 1, 0)
	noVerdict.Outcome, noVerdict.Reward, noVerdict.Error = OutcomeVerifierError, nil, "no reward file"
	noVerdict.Metrics.Error = true
	noVerdict.VerifierTail = strings.Repeat("noise line\n", 30) + "Traceback (most recent call last):\nKeyError: 'bytes'\n"
	passed := scoredRow("d", 1, 1)
	passed.VerifierTail = "3 passed in 0.02s\n"
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"},
		[]Result{failed, timedOut, noVerdict, passed}, testBuild)
	js, err := Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(js); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"verifier_tail": "/tests/test.sh: line 7: pytest: command not found\n"`)) {
		t.Errorf("the artifact lacks the verifier's tail:\n%s", js)
	}
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	blocks := strings.Join(fencedBlocks(t, md.String()), "\n--\n")
	for _, want := range []string{"assert 199 == 200\n```\n# not a heading", "pytest: command not found", "KeyError: 'bytes'"} {
		if !strings.Contains(blocks, want) {
			t.Errorf("the report's fenced blocks lack %q:\n%s", want, md.String())
		}
	}
	if n := strings.Count(md.String(), "Verifier output (tail):"); n != 3 {
		t.Errorf("%d verifier tails shown, want 3 (not the passed cell's):\n%s", n, md.String())
	}
	if n := strings.Count(md.String(), "noise line\n"); n != 18 {
		t.Errorf("%d noise lines of a long tail shown, want 18 (the last 20 lines)", n)
	}
	if strings.Contains(md.String(), "3 passed in 0.02s") {
		t.Error("a passed cell's verifier output is shown")
	}
}

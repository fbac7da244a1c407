package artifact

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/textsafe"
)

func TestPrintable(t *testing.T) {
	cases := map[string]string{
		"plain":                 "plain",
		"tab\tand\nnewline":     "tab\tand\nnewline",
		"0.5\x00":               `0.5\x00`,
		"crlf\r\nline":          "crlf\nline",
		"bar\rover":             `bar\rover`,
		"\x1b[31mred\x1b[0m":    `\x1b[31mred\x1b[0m`,
		"del\x7f":               `del\x7f`,
		"bad \xff\xfe utf8":     `bad \xff\xfe utf8`,
		"c1 \u0085 next line":   `c1 \u0085 next line`,
		"ls \u2028 ps \u2029":   `ls \u2028 ps \u2029`,
		"bidi \u202eevil\u202c": `bidi \u202eevil\u202c`,
		"isolate \u2066x\u2069": `isolate \u2066x\u2069`,
		"accents é, emoji 🙂, ⟶": "accents é, emoji 🙂, ⟶",
		"truncated \xe2\x82":    `truncated \xe2\x82`,
		`back\slash \x00 stays`: `back\slash \x00 stays`,
	}
	for in, want := range cases {
		got := Printable(in)
		if got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
		if !reportSafe(got) {
			t.Errorf("Printable(%q) = %q is not report-safe", in, got)
		}
		if Printable(got) != got {
			t.Errorf("Printable is not idempotent on %q", in)
		}
	}
}

// reportSafe is the report's invariant: valid UTF-8, no control character
// but newline and tab, none of the runes Printable hides.
func reportSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || textsafe.Hidden(r) {
			return false
		}
	}
	return true
}

// hostileArtifact builds an artifact whose every string field an agent,
// a task author or a verifier can reach carries s, with a comparison so
// the McNemar tables are printed too.
func hostileArtifact(s string) *Artifact {
	var rows []Result
	for i, h := range []string{"base" + s, "arm" + s} {
		for j, outcome := range []string{OutcomePassed, OutcomeFailed, OutcomeErrored, OutcomeVerifierError} {
			r := row("task"+s+string(rune('a'+j)), h, "model"+s, 1, outcome)
			if i == 1 && j == 1 {
				r.Passed, r.Outcome = true, OutcomePassed
			}
			r.StdoutTail = "out " + s
			r.Error = "error (raw: " + s + ")"
			r.ErrorClass += s
			r.Rewards = map[string]float64{"reward": 1, "key" + s: 0.5}
			r.Metrics.UnresolvedEnv = []string{"VAR" + s}
			r.AgentClaim = &AgentClaim{Text: "All tests pass. " + s, ClaimedSuccess: true}
			r.TaskMeta = map[string]any{"difficulty": "hard" + s}
			rows = append(rows, r)
		}
	}
	run := RunInfo{ID: "run" + s, TasksRoot: "/tasks" + s, Harnesses: []string{"base" + s, "arm" + s}, Models: []string{"model" + s},
		Repeats: 1, BaselineHarness: "base" + s, StartedAt: "2026" + s, FinishedAt: "2027" + s, ProctorVersion: "v" + s}
	return Build(run, rows, BuildOptions{Compare: CompareOptions{Resamples: 20, SetupCheck: testCompare.SetupCheck}}) // few resamples: the fuzzer's speed
}

// TestReportRawBytes is issue 9, item 12: a reward file holding 0.5 and a
// NUL must not put a NUL into report.md; the raw text is shown escaped.
func TestReportRawBytes(t *testing.T) {
	for _, s := range []string{"0.5\x00", "\x1b]0;title\x07", "\xff\xfe", "a\r\nb\rc", "\u202e\u0085"} {
		var md bytes.Buffer
		if err := WriteReport(&md, hostileArtifact(s)); err != nil {
			t.Fatal(err)
		}
		if !reportSafe(md.String()) {
			t.Fatalf("report for %q is not valid UTF-8 without control characters:\n%q", s, md.String())
		}
		if want := "(raw: " + Printable(s) + ")"; !strings.Contains(md.String(), want) {
			t.Errorf("report for %q lacks the escaped raw text %q", s, want)
		}
		fencedBlocks(t, md.String()) // every fence closes
	}
}

// FuzzReport: whatever strings an artifact holds, the Markdown report is
// valid UTF-8 without control characters except newline and tab, and
// every fenced block it opens is closed.
func FuzzReport(f *testing.F) {
	for _, s := range []string{"", "0.5\x00", "```", "|", "\r\n", "\xff", "\u2028", "`x`", "\x1b[2J", "~~~\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// The report repeats s in about 150 places, so a long input costs
		// the worker a report 150 times its size (a 1 MB input is 150 MB
		// and seconds a run); what the property checks is in the bytes, not
		// the length, and a fence only needs runs of a few backticks.
		if len(s) > 256 {
			t.Skip("longer than the 256 bytes the property needs")
		}
		var md bytes.Buffer
		if err := WriteReport(&md, hostileArtifact(s)); err != nil {
			t.Fatal(err)
		}
		if !reportSafe(md.String()) {
			t.Fatalf("report for %q is not report-safe:\n%q", s, md.String())
		}
		fencedBlocks(t, md.String())
	})
}

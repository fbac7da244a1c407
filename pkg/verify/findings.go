package verify

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/proctor-eval/proctor/pkg/events"
)

// Kinds of events.VerifierFinding.
const (
	// FindingRewardExitConflict: the reward says passed (>= 1) while the
	// test script exited non-zero. The reward decides (as in Harbor); the
	// conflict is shown so a test that writes 1 before failing is seen.
	FindingRewardExitConflict = "reward_exit_conflict"
	// FindingNoTestsExecuted: the test runner's own summary (unittest,
	// pytest, or a CTRF or JUnit report in /logs/verifier) says it
	// executed no test.
	FindingNoTestsExecuted = "no_tests_executed"
	// FindingCollectFailed: a [[verifier.collect]] hook exited non-zero
	// or timed out.
	FindingCollectFailed = "collect_failed"
)

// maxReportBytes bounds a CTRF or JUnit report read from the copied-out
// /logs/verifier.
const maxReportBytes = 8 << 20

// Findings returns what the verifier phase shows beside its reward v: a
// reward/exit conflict, and whether the runner executed no tests, read
// from the script's captured output (logPath, a file proctor wrote) and
// from the CTRF (*.json) and JUnit (*.xml) reports at the top of the
// copied-out /logs/verifier (verifierDir; only regular files, never a
// link). A runner whose summaries all count zero tests is a finding; one
// that ran a test anywhere is not. Nil when there is nothing to say.
func Findings(v events.VerdictData, logPath, verifierDir string) []events.VerifierFinding {
	var out []events.VerifierFinding
	if v.Reward != nil && *v.Reward >= 1 && v.ReturnCode != nil && *v.ReturnCode != 0 && !v.TimedOut {
		out = append(out, events.VerifierFinding{Kind: FindingRewardExitConflict,
			Detail: fmt.Sprintf("reward %g but the test script exited %d", *v.Reward, *v.ReturnCode)})
	}
	var c testCounts
	if f, err := os.Open(logPath); err == nil {
		c.scanOutput(f)
		_ = f.Close()
	}
	c.scanReports(verifierDir)
	if c.seen > 0 && c.executed == 0 {
		out = append(out, events.VerifierFinding{Kind: FindingNoTestsExecuted, Detail: strings.Join(c.evidence, "; ")})
	}
	return out
}

// testCounts adds up the test runners' summaries of one verifier run.
type testCounts struct {
	seen     int // summaries found
	executed int // tests they say ran
	evidence []string
}

func (c *testCounts) add(n int, what string) {
	c.seen++
	c.executed += n
	if n == 0 && len(c.evidence) < 3 {
		c.evidence = append(c.evidence, what)
	}
}

var (
	// unittest: "Ran 3 tests in 0.001s" (also "Ran 1 test").
	unittestRan = regexp.MustCompile(`^Ran (\d+) tests? in `)
	// pytest: "collected 5 items", "collected 0 items / 2 errors".
	pytestCollected = regexp.MustCompile(`^collected (\d+) items?\b`)
	// pytest's last line: "==== 3 passed, 1 failed in 0.12s ====",
	// "==== no tests ran in 0.01s ====".
	pytestSummary = regexp.MustCompile(`^=+ (.*) in [0-9.]+s(?: \([0-9:]+\))? =+$`)
	pytestCount   = regexp.MustCompile(`(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)`)
)

// scanOutput reads a verifier's output line by line (lines of any
// length; only their first 4 KiB are looked at) for unittest's "Ran N
// tests" and pytest's collection line and final summary. A pytest run is
// counted once, by its final summary when there is one (passed, failed and
// xfailed/xpassed ran; skipped and deselected did not).
func (c *testCounts) scanOutput(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	pendingCollected := -1
	for {
		line, err := br.ReadSlice('\n')
		full := len(line) > 0 && line[len(line)-1] == '\n'
		text := strings.TrimSpace(stripANSI(string(line[:min(len(line), 4096)])))
		if !full && err == bufio.ErrBufferFull {
			// Skip the rest of an overlong line.
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
		}
		if m := unittestRan.FindStringSubmatch(text); m != nil {
			n, _ := strconv.Atoi(m[1])
			c.add(n, "unittest: "+text)
		} else if m := pytestCollected.FindStringSubmatch(text); m != nil {
			pendingCollected, _ = strconv.Atoi(m[1])
		} else if m := pytestSummary.FindStringSubmatch(text); m != nil && (strings.Contains(m[1], "no tests ran") || pytestCount.MatchString(m[1])) {
			ran := 0
			for _, cm := range pytestCount.FindAllStringSubmatch(m[1], -1) {
				switch cm[2] {
				case "passed", "failed", "xfailed", "xpassed":
					n, _ := strconv.Atoi(cm[1])
					ran += n
				}
			}
			c.add(ran, "pytest: "+text)
			pendingCollected = -1
		}
		if err != nil {
			break
		}
	}
	if pendingCollected >= 0 {
		// A pytest run cut off before its summary.
		c.add(pendingCollected, fmt.Sprintf("pytest: collected %d items", pendingCollected))
	}
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// scanReports reads the CTRF (*.json with results.summary.tests) and
// JUnit (*.xml whose root is testsuites or testsuite) reports at the top
// of dir.
func (c *testCounts) scanReports(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		ext := strings.ToLower(filepath.Ext(name))
		if ext != ".json" && ext != ".xml" {
			continue
		}
		b, err := readRegular(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		switch ext {
		case ".json":
			var ctrf struct {
				Results *struct {
					Summary *struct {
						Tests   *int `json:"tests"`
						Skipped int  `json:"skipped"`
						Pending int  `json:"pending"`
					} `json:"summary"`
				} `json:"results"`
			}
			if json.Unmarshal(b, &ctrf) == nil && ctrf.Results != nil && ctrf.Results.Summary != nil && ctrf.Results.Summary.Tests != nil {
				s := ctrf.Results.Summary
				c.add(max(0, *s.Tests-s.Skipped-s.Pending), fmt.Sprintf("CTRF %s: %d tests, %d skipped", name, *s.Tests, s.Skipped+s.Pending))
			}
		case ".xml":
			if n, ok := junitExecuted(b); ok {
				c.add(n, fmt.Sprintf("JUnit %s: %d tests executed", name, n))
			}
		}
	}
}

// junitExecuted counts the executed tests of a JUnit report: the
// testcase elements that are not skipped. ok is false when b is not a
// JUnit report (its root is neither testsuites nor testsuite).
func junitExecuted(b []byte) (int, bool) {
	d := xml.NewDecoder(strings.NewReader(string(b)))
	depth, n, inCase, skipped := 0, 0, false, false
	root := ""
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 {
				root = t.Name.Local
				if root != "testsuites" && root != "testsuite" {
					return 0, false
				}
			}
			switch t.Name.Local {
			case "testcase":
				inCase, skipped = true, false
			case "skipped":
				if inCase {
					skipped = true
				}
			}
		case xml.EndElement:
			depth--
			if t.Name.Local == "testcase" && inCase {
				if !skipped {
					n++
				}
				inCase = false
			}
		}
	}
	return n, root != ""
}

// readRegular reads p when it is a regular file (never through a link) of
// at most maxReportBytes.
func readRegular(p string) ([]byte, error) {
	// The copy-out keeps links as links in the cell's directory, which
	// only proctor writes: Lstat is enough.
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxReportBytes {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", p, maxReportBytes)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxReportBytes))
}

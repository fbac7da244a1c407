// Package taskcheck is the quality gate of `proctor tasks check` (docs/tasks.md
// and the check-* records of docs/decisions): it decides, per task, whether the task is sound
// before anyone pays for a sweep. The dynamic checks are cells of an
// ordinary run (the oracle, an agent that does nothing, the cheats of the
// registry, the isolation probe when this build has one); Evaluate reads
// their rows and Static reads the task's files, and the worst verdict of
// a task's findings is its verdict (FAIL > WARN > PASS; SKIP, a check not
// run, never decides).
package taskcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// Verdict is a finding's or a task's verdict.
type Verdict string

// Verdicts, worst first. Skip is a check that did not run (a refused
// agent arm, an isolation probe this build lacks): it is reported, never
// PASS, and never decides a task's verdict.
const (
	Fail Verdict = "FAIL"
	Warn Verdict = "WARN"
	Pass Verdict = "PASS"
	Skip Verdict = "SKIP"
)

func (v Verdict) rank() int {
	switch v {
	case Fail:
		return 3
	case Warn:
		return 2
	case Pass:
		return 1
	}
	return 0
}

// Check names of findings; a cheat's is "cheat:NAME" (Cheat.Check).
const (
	CheckStatic    = "static"
	CheckOracle    = "oracle"
	CheckNoop      = "no-op"
	CheckIsolation = "isolation"
)

// ProbeHarness is the harness the isolation check runs when this build
// has it (harness.Lookup finds it).
const ProbeHarness = "docker-probe"

// BudgetMargin is the share of the verifier's budget under which its time
// on the solved container must stay: a verifier over the budget is a
// FAIL, one within the last 20 % of it a WARN.
const BudgetMargin = 0.2

// Finding is one check's result with its evidence.
type Finding struct {
	Check   string  `json:"check"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
}

// TaskResult is one task's verdict and findings, in check order (static,
// oracle, no-op, cheats by name, isolation).
type TaskResult struct {
	Task    string  `json:"task"`
	Verdict Verdict `json:"verdict"`
	// DecidedBy is the check of the first finding with the task's verdict
	// ("" when every check passed).
	DecidedBy string    `json:"decided_by,omitempty"`
	Findings  []Finding `json:"findings"`
}

// Report is the QC report: `{"run_id", "tasks": [...]}`.
type Report struct {
	RunID string       `json:"run_id,omitempty"`
	Tasks []TaskResult `json:"tasks"`
}

// Failed reports whether any task's verdict is FAIL.
func (r Report) Failed() bool {
	for _, t := range r.Tasks {
		if t.Verdict == Fail {
			return true
		}
	}
	return false
}

// Plan is the dynamic checks a check run runs (the static check always
// runs: it reads files and costs nothing).
type Plan struct {
	// Oracle and Noop: whether the oracle and the no-op agent run.
	Oracle, Noop bool
	// Cheats are the cheats that run.
	Cheats []Cheat
	// Isolation is the probe harness to run ("" when it does not run);
	// IsolationNotRun then says why, as the SKIP finding's detail.
	Isolation       string
	IsolationNotRun string
	// Unselected are the checks --checks left out; each is a SKIP finding
	// "not run: not selected by --checks".
	Unselected []string
}

// NewPlan is the plan of this build: the oracle, the no-op agent, every
// cheat of the registry, and the isolation probe when harness.Lookup
// finds ProbeHarness.
func NewPlan() Plan {
	p := Plan{Oracle: true, Noop: true, Cheats: Cheats()}
	if _, err := harness.Lookup(ProbeHarness); err == nil {
		p.Isolation = ProbeHarness
	} else {
		p.IsolationNotRun = "not run: this build has no " + ProbeHarness + " harness to probe the sandbox"
	}
	return p
}

// CheckNames are the names --checks accepts: static (always run), oracle,
// no-op, isolation, cheats (every cheat) and cheat:NAME for each cheat of
// the registry.
func CheckNames() []string {
	out := []string{CheckStatic, CheckOracle, CheckNoop, "cheats"}
	for _, c := range Cheats() {
		out = append(out, c.Check())
	}
	return append(out, CheckIsolation)
}

// Select keeps of p only the named checks (CheckNames); nil or empty
// keeps every check. The static check always runs. An unknown name is an
// error naming it and the known ones.
func (p Plan) Select(checks []string) (Plan, error) {
	if len(checks) == 0 {
		return p, nil
	}
	known := map[string]bool{}
	for _, n := range CheckNames() {
		known[n] = true
	}
	want := map[string]bool{}
	for _, c := range checks {
		c = strings.TrimSpace(c)
		if !known[c] {
			return p, fmt.Errorf("--checks: unknown check %q (known: %s)", c, strings.Join(CheckNames(), ", "))
		}
		want[c] = true
	}
	out := Plan{Oracle: p.Oracle && want[CheckOracle], Noop: p.Noop && want[CheckNoop], Isolation: p.Isolation, IsolationNotRun: p.IsolationNotRun}
	if p.Oracle && !out.Oracle {
		out.Unselected = append(out.Unselected, CheckOracle)
	}
	if p.Noop && !out.Noop {
		out.Unselected = append(out.Unselected, CheckNoop)
	}
	for _, c := range p.Cheats {
		if want["cheats"] || want[c.Check()] {
			out.Cheats = append(out.Cheats, c)
		} else {
			out.Unselected = append(out.Unselected, c.Check())
		}
	}
	if !want[CheckIsolation] {
		out.Isolation, out.IsolationNotRun = "", notSelected
	}
	return out, nil
}

const notSelected = "not run: not selected by --checks"

// Harnesses is the run's harness list: the oracle and the no-op agent
// when planned, every planned cheat, and the probe when the plan has one.
// Empty when only the static check runs.
func (p Plan) Harnesses() []string {
	var hs []string
	if p.Oracle {
		hs = append(hs, string(harness.Oracle))
	}
	if p.Noop {
		hs = append(hs, NoopHarness)
	}
	for _, c := range p.Cheats {
		hs = append(hs, c.Harness())
	}
	if p.Isolation != "" {
		hs = append(hs, p.Isolation)
	}
	return hs
}

func (p Plan) unselected(check string) bool {
	for _, c := range p.Unselected {
		if c == check {
			return true
		}
	}
	return false
}

// Evaluate decides every task of tasks from its static findings and the
// rows of the check run (artifact results). A check whose cells have no
// row is a FAIL "no row" (missing data is never a pass).
func Evaluate(p Plan, tasks []*task.Task, static map[string][]Finding, rows []artifact.Result) Report {
	byCell := map[string]map[string][]artifact.Result{}
	for _, r := range rows {
		if byCell[r.Task] == nil {
			byCell[r.Task] = map[string][]artifact.Result{}
		}
		byCell[r.Task][r.Harness] = append(byCell[r.Task][r.Harness], r)
	}
	var rep Report
	for _, t := range tasks {
		cells := byCell[t.Name]
		for _, rs := range cells {
			sort.Slice(rs, func(i, j int) bool { return rs[i].Repeat < rs[j].Repeat })
		}
		fs := append([]Finding(nil), static[t.Name]...)
		skip := func(check string) { fs = append(fs, Finding{Check: check, Verdict: Skip, Detail: notSelected}) }
		if p.Oracle {
			fs = append(fs, oracleFindings(t, cells[string(harness.Oracle)])...)
		} else if p.unselected(CheckOracle) {
			skip(CheckOracle)
		}
		noop := cells[NoopHarness]
		if p.Noop {
			oracleScored, _ := verdicts(cells[string(harness.Oracle)])
			fs = append(fs, noopFinding(noop, len(oracleScored) > 0))
		} else if p.unselected(CheckNoop) {
			skip(CheckNoop)
		}
		for _, c := range p.Cheats {
			fs = append(fs, cheatFinding(c, cells[c.Harness()], noop))
		}
		for _, c := range p.Unselected {
			if strings.HasPrefix(c, "cheat:") {
				skip(c)
			}
		}
		fs = append(fs, isolationFinding(p, cells[p.Isolation]))
		rep.Tasks = append(rep.Tasks, decide(t.Name, fs))
	}
	return rep
}

func decide(name string, fs []Finding) TaskResult {
	tr := TaskResult{Task: name, Verdict: Pass, Findings: fs}
	for _, f := range fs {
		if f.Verdict.rank() > tr.Verdict.rank() {
			tr.Verdict, tr.DecidedBy = f.Verdict, f.Check
		}
	}
	return tr
}

func scored(rs []artifact.Result) (sc, errored []artifact.Result) {
	for _, r := range rs {
		if r.Outcome == artifact.OutcomeErrored {
			errored = append(errored, r)
		} else {
			sc = append(sc, r)
		}
	}
	return sc, errored
}

// verdicts splits rows into those with a verdict and those without one
// (Result.Errored: an errored cell, or a verifier_error, whose verifier
// gave no reward). A no-op or a cheat without a verdict proves nothing
// either way: it is a SKIP, never a PASS. (The oracle's rows are split by
// scored: a reference solution the verifier cannot score is the task's
// fault, a FAIL.)
func verdicts(rs []artifact.Result) (sc, none []artifact.Result) {
	for _, r := range rs {
		if r.Errored() {
			none = append(none, r)
		} else {
			sc = append(sc, r)
		}
	}
	return sc, none
}

func describe(r artifact.Result) string {
	s := r.Outcome
	if r.ErrorClass != "" {
		s += " (" + r.ErrorClass + ")"
	}
	if r.Reward != nil {
		s += fmt.Sprintf(", reward %g", *r.Reward)
	}
	if r.Error != "" {
		s += ": " + oneLine(r.Error, 200)
	}
	return s
}

// oracleFindings: the reference solution passes on every repeat, and the
// verifier's time on the solved container stays under its budget.
func oracleFindings(t *task.Task, rs []artifact.Result) []Finding {
	f := func(v Verdict, format string, a ...any) Finding {
		return Finding{Check: CheckOracle, Verdict: v, Detail: fmt.Sprintf(format, a...)}
	}
	if len(rs) == 0 {
		return []Finding{f(Fail, "no oracle row: the check has no data")}
	}
	sc, errored := scored(rs)
	if len(sc) == 0 {
		return []Finding{f(Warn, "cannot run: %s", describe(errored[0]))}
	}
	var out []Finding
	budget := t.VerifierTimeoutSec
	var slowest float64
	timedOut := 0
	for _, r := range sc {
		if r.Outcome == artifact.OutcomeVerifierTimeout {
			timedOut++
		}
		if r.Metrics.VerifySec != nil && *r.Metrics.VerifySec > slowest {
			slowest = *r.Metrics.VerifySec
		}
	}
	switch {
	case timedOut > 0:
		out = append(out, f(Fail, "verifier over budget: timed out on %d of %d repeats of the solved container (budget %gs)", timedOut, len(sc), budget))
	case slowest > budget:
		out = append(out, f(Fail, "verifier over budget: %.3gs on the solved container, budget %gs", slowest, budget))
	case slowest > (1-BudgetMargin)*budget:
		out = append(out, f(Warn, "verifier near its budget: %.3gs on the solved container, within %d %% of the %gs budget", slowest, int(BudgetMargin*100), budget))
	}
	passed := 0
	var first *artifact.Result
	for i, r := range sc {
		if r.Passed {
			passed++
		} else if first == nil && r.Outcome != artifact.OutcomeVerifierTimeout {
			first = &sc[i]
		}
	}
	switch {
	case passed == len(sc):
		out = append(out, f(Pass, "the reference solution passes (%d of %d repeats)", passed, len(sc)))
	case passed > 0:
		out = append(out, f(Warn, "flaky: the reference solution passes %d of %d repeats (%s)", passed, len(sc), describeOr(first)))
	case first != nil:
		out = append(out, f(Fail, "the reference solution does not pass: %s", describe(*first)))
	}
	if len(errored) > 0 {
		out = append(out, f(Warn, "%d of %d repeats errored: %s", len(errored), len(rs), describe(errored[0])))
	}
	// A verifier that executed no test on the reference solution scores
	// nothing: whatever its reward, it cannot tell a solution from none.
	for _, r := range sc {
		for _, vf := range r.Metrics.VerifierFindings {
			switch vf.Kind {
			case "no_tests_executed":
				out = append(out, f(Fail, "the oracle's verifier executed no tests: %s (%s)", oneLine(vf.Detail, 300), r.CellID))
				return out
			}
		}
	}
	for _, r := range sc {
		for _, vf := range r.Metrics.VerifierFindings {
			if vf.Kind == "reward_exit_conflict" {
				out = append(out, f(Warn, "the oracle's reward and its test script's exit disagree: %s (%s)", oneLine(vf.Detail, 300), r.CellID))
				return out
			}
		}
	}
	return out
}

func describeOr(r *artifact.Result) string {
	if r == nil {
		return "the others timed out"
	}
	return describe(*r)
}

// noopFinding: an agent that does nothing must not pass, and must be
// scored: when the verifier gives the reference solution a verdict
// (oracleScored) but gives none to an agent that does nothing (its test
// script stops before it writes the reward, as a `set -e` script does
// when a check fails), every failing agent is an errored cell, missing
// data, instead of a 0: FAIL.
func noopFinding(rs []artifact.Result, oracleScored bool) Finding {
	f := func(v Verdict, format string, a ...any) Finding {
		return Finding{Check: CheckNoop, Verdict: v, Detail: fmt.Sprintf(format, a...)}
	}
	if len(rs) == 0 {
		return f(Fail, "no no-op row: the check has no data")
	}
	sc, none := verdicts(rs)
	if len(sc) == 0 {
		if oracleScored && none[0].Outcome == artifact.OutcomeVerifierError {
			return f(Fail, "the verifier gives no reward to an agent that does nothing (%s), while it scores the reference solution: every failing agent is errored, missing data, instead of a 0 (a test script that stops, as with set -e, before it writes the reward?)", describe(none[0]))
		}
		return f(Skip, "no verdict: %s", describe(none[0]))
	}
	for _, r := range sc {
		if r.Passed {
			return f(Fail, "no-op passes: an agent that does nothing gets %s (%s)", describe(r), r.CellID)
		}
	}
	if best := bestReward(sc); best > 0 {
		return f(Warn, "no-op scores: an agent that does nothing gets reward %g", best)
	}
	return f(Pass, "an agent that does nothing fails (%s)", describe(sc[0]))
}

func bestReward(rs []artifact.Result) float64 {
	best := 0.0
	for _, r := range rs {
		if r.Reward != nil && *r.Reward > best {
			best = *r.Reward
		}
	}
	return best
}

// cheatFinding: no cheat may pass. When the no-op passes too, a passing
// cheat proves nothing more: the finding is SKIP (the no-op's FAIL
// decides the task).
func cheatFinding(c Cheat, rs, noop []artifact.Result) Finding {
	f := func(v Verdict, format string, a ...any) Finding {
		return Finding{Check: c.Check(), Verdict: v, Detail: fmt.Sprintf(format, a...)}
	}
	if len(rs) == 0 {
		return f(Fail, "no %s row: the check has no data", c.Harness())
	}
	sc, none := verdicts(rs)
	if len(sc) == 0 {
		return f(Skip, "no verdict: %s", describe(none[0]))
	}
	noopSc, _ := verdicts(noop)
	noopPasses := false
	for _, r := range noopSc {
		noopPasses = noopPasses || r.Passed
	}
	var leaks []string
	for _, r := range sc {
		leaks = append(leaks, cheatFindings(r.StdoutTail)...)
	}
	for _, r := range sc {
		if !r.Passed {
			continue
		}
		if noopPasses {
			return f(Skip, "inconclusive: the cheat passes, and so does an agent that does nothing")
		}
		d := fmt.Sprintf("%s passes: %s (%s)", c.Name, c.Hack, r.CellID)
		if r.Suspect() {
			var fs []string
			for _, tf := range r.Metrics.TamperFindings {
				fs = append(fs, tf.Path+" "+tf.Change)
			}
			d += "; suspect: " + strings.Join(fs, ", ")
		}
		if len(leaks) > 0 {
			d += "; " + strings.Join(leaks, "; ")
		}
		return f(Fail, "%s", d)
	}
	if best := bestReward(sc); best > bestReward(noopSc) {
		return f(Warn, "%s raises the reward to %g (an agent that does nothing gets %g)", c.Name, best, bestReward(noopSc))
	}
	if len(leaks) > 0 {
		return f(Warn, "%s did not pass, but found: %s", c.Name, strings.Join(leaks, "; "))
	}
	return f(Pass, "%s does not pass (%s)", c.Name, describe(sc[0]))
}

// isolationFinding: the probe's verdict, or SKIP when this build has no
// probe (never PASS).
func isolationFinding(p Plan, rs []artifact.Result) Finding {
	f := func(v Verdict, format string, a ...any) Finding {
		return Finding{Check: CheckIsolation, Verdict: v, Detail: fmt.Sprintf(format, a...)}
	}
	if p.Isolation == "" {
		return f(Skip, "%s", p.IsolationNotRun)
	}
	if len(rs) == 0 {
		return f(Fail, "no %s row: the check has no data", p.Isolation)
	}
	sc, errored := scored(rs)
	if len(sc) == 0 {
		return f(Skip, "not run: %s", describe(errored[0]))
	}
	for _, r := range sc {
		if !r.Passed {
			open := isoprobe.OpenClasses(r.Metrics.IsolationProbe)
			if len(open) == 0 {
				return f(Fail, "the probe did not pass and named no open class: %s (%s)", describe(r), r.CellID)
			}
			return f(Fail, "the probe found the agent's sandbox open: %s (%s)", strings.Join(open, ", "), r.CellID)
		}
	}
	return f(Pass, "every probe class closed, n/a or expected by the task (%s)", sc[0].CellID)
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	if r.Tasks == nil {
		r.Tasks = []TaskResult{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Why is what decided t, for a reader: the deciding check with its
// finding (what to fix); for a task no check decided, that every check
// passed, or, when some did not run (SKIP: not selected by --checks, its
// cell errored, a probe without its binary), that every check that ran
// passed and which did not, grouped by why, since a PASS proves nothing
// of a check that did not run.
func (t TaskResult) Why() string {
	if t.DecidedBy != "" {
		why := t.DecidedBy
		for _, f := range t.Findings {
			if f.Check == t.DecidedBy && f.Verdict == t.Verdict {
				why += ": " + f.Detail
				break
			}
		}
		return why
	}
	var whys []string
	checks := map[string][]string{}
	for _, f := range t.Findings {
		if f.Verdict != Skip {
			continue
		}
		why := strings.TrimPrefix(f.Detail, "not run: ")
		if _, ok := checks[why]; !ok {
			whys = append(whys, why)
		}
		checks[why] = append(checks[why], f.Check)
	}
	if len(whys) == 0 {
		return "every check passed"
	}
	parts := make([]string, len(whys))
	for i, why := range whys {
		parts[i] = strings.Join(checks[why], ", ") + " (" + why + ")"
	}
	return "every check that ran passed; not run: " + strings.Join(parts, "; ")
}

// WriteMarkdown writes the QC report: one line per task with its verdict
// and the check that decided it, then every task's findings. Text from
// tasks and cells is shown on one line, control characters escaped.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Task check\n\n")
	if r.RunID != "" {
		fmt.Fprintf(&b, "Run `%s`. ", r.RunID)
	}
	counts := map[Verdict]int{}
	for _, t := range r.Tasks {
		counts[t.Verdict]++
	}
	fmt.Fprintf(&b, "%d tasks: %d FAIL, %d WARN, %d PASS.\n\n", len(r.Tasks), counts[Fail], counts[Warn], counts[Pass])
	b.WriteString("| task | verdict | decided by |\n|---|---|---|\n")
	for _, t := range r.Tasks {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(t.Task), t.Verdict, cell(t.Why()))
	}
	b.WriteString("\n## Findings\n")
	for _, t := range r.Tasks {
		fmt.Fprintf(&b, "\n### %s: %s\n\n", oneLine(t.Task, 200), t.Verdict)
		for _, f := range t.Findings {
			fmt.Fprintf(&b, "- %s %s: %s\n", f.Verdict, f.Check, oneLine(f.Detail, 2000))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cell(s string) string { return strings.ReplaceAll(oneLine(s, 300), "|", `\|`) }

// oneLine keeps s on one line of at most n runes: newlines, carriage
// returns and tabs become spaces, and the rest is shown through
// textsafe.Line (other controls as \xNN, bidirectional controls as
// \uNNNN, invalid bytes as \xNN).
func oneLine(s string, n int) string {
	var b strings.Builder
	i := 0
	for j := 0; j < len(s); {
		r, size := utf8.DecodeRuneInString(s[j:])
		if i == n {
			b.WriteString("…")
			break
		}
		i++
		switch r {
		case '\n', '\r', '\t':
			b.WriteByte(' ')
		default:
			b.WriteString(s[j : j+size])
		}
		j += size
	}
	return textsafe.Line(b.String())
}

package artifact

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// dash marks a value that does not exist (no verdict, nothing scored, not
// priced).
const dash = "—"

// WriteReport writes a's Markdown report to w: a headline per harness
// (passed/scored with the pass rate and its Wilson 95 % interval, the
// errored count, and the cells whose agent claimed success while the
// verifier scored them below 1, flagged ⚠️), a per-harness table, the
// difficulty rollup (pass rate per harness per task_metadata.difficulty
// with Wilson intervals, Unrated for tasks without one; left out when no
// task has a difficulty), a per-task table (rows are tasks,
// columns harnesses, cells "passed/scored" or "errored"), per task and
// harness passed/scored with the total and mean cost, the comparisons
// against the baseline and the paired McNemar table when a has
// comparisons (naming the interval of the paired difference, Newcombe's
// hybrid score interval, and with a pseudo-replication caveat giving the
// task-level bootstrap interval when any comparison pairs repeats of the
// same task), the answers (each cell's verdict beside its agent's final
// message, ⚠️ on Result.Overclaimed), and a section per cell with its
// outcome, reward, error, its agent's final message and the tail of its
// stdout in a fenced block whose fence
// is longer than any backtick run inside it, so no output can break the
// document. Every string the report prints is shown through Printable:
// the report is always valid UTF-8 without control characters except
// newline and tab, and raw bytes appear escaped (a NUL as \x00). Harnesses appear in run order (Run.Harnesses, then any other
// in name order), tasks and cells in row order. Percentages are rounded
// to one decimal, seconds to one decimal, USD to four. The output depends
// only on a. It returns w's write error, wrapped.
func WriteReport(w io.Writer, a *Artifact) error {
	var buf bytes.Buffer
	r := &reporter{w: &buf, a: a}
	r.title()
	r.headlines()
	r.harnessTable()
	r.difficultyRollup()
	r.taskTable()
	r.taskCost()
	r.comparisons()
	r.answers()
	r.cells()
	out := append(bytes.TrimRight(buf.Bytes(), "\n"), '\n')
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("artifact: write report: %w", err)
	}
	return nil
}

// reporter renders into a buffer, which cannot fail.
type reporter struct {
	w *bytes.Buffer
	a *Artifact
}

// printf is the report's only way out: every string argument passes
// through Printable, so whatever an artifact holds (task and harness names,
// errors, raw reward text, stdout tails, ids, versions) reaches the report
// as valid UTF-8 with no control character but newline and tab. Format
// strings are constants of this file.
func (r *reporter) printf(format string, args ...any) {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = Printable(s)
		}
	}
	fmt.Fprintf(r.w, format, args...)
}

func (r *reporter) title() {
	run := r.a.Run
	id := run.ID
	if id == "" {
		id = "(no id)"
	}
	r.printf("# proctor run %s\n\n", code(id))
	var facts []string
	if run.TasksRoot != "" {
		facts = append(facts, "tasks root "+code(run.TasksRoot))
	}
	if n := len(r.a.Results); n == 1 {
		facts = append(facts, "1 cell")
	} else {
		facts = append(facts, fmt.Sprintf("%d cells", n))
	}
	var ms []string
	for _, m := range run.Models {
		if m != "" {
			ms = append(ms, code(m))
		}
	}
	if len(ms) > 0 {
		facts = append(facts, "models "+strings.Join(ms, ", "))
	}
	switch {
	case run.Repeats == 1:
		facts = append(facts, "1 repeat")
	case run.Repeats > 1:
		facts = append(facts, fmt.Sprintf("%d repeats", run.Repeats))
	}
	if run.BaselineHarness != "" {
		facts = append(facts, "baseline "+code(run.BaselineHarness))
	}
	if run.StartedAt != "" {
		facts = append(facts, "started "+run.StartedAt)
	}
	if run.FinishedAt != "" {
		facts = append(facts, "finished "+run.FinishedAt)
	}
	if run.ProctorVersion != "" {
		facts = append(facts, "proctor "+run.ProctorVersion)
	}
	r.printf("%s.\n\n", strings.Join(facts, " · "))
	if d := run.DecodeErrors; d != nil {
		var types []string
		for _, t := range slices.Sorted(maps.Keys(d.ByType)) {
			types = append(types, fmt.Sprintf("%s %d", t, d.ByType[t]))
		}
		r.printf("**Warning: %d events did not decode** (%s); the first: %s\n\n", d.Count, strings.Join(types, ", "), d.First)
	}
	if vs := noticeVersions(r.a.Results); len(vs) > 0 {
		var list []string
		for _, v := range vs {
			list = append(list, fmt.Sprint(v))
		}
		r.printf("Skill notice version %s (metrics.treatment.notice_version): deltas across notice versions are not comparable", strings.Join(list, ", "))
		if len(vs) > 1 {
			r.printf("; **this run holds more than one**")
		}
		r.printf(".\n\n")
	}
}

// noticeVersions are the skill notice versions of the rows, sorted.
func noticeVersions(rows []Result) []int {
	set := map[int]bool{}
	for _, x := range rows {
		if t := x.Metrics.Treatment; t != nil {
			set[t.NoticeVersion] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// harnesses lists the summarized harnesses in run order, then the others
// by name.
func (r *reporter) harnesses() []string {
	var out []string
	seen := map[string]bool{}
	for _, h := range r.a.Run.Harnesses {
		if r.a.Summary.PerHarness[h] != nil && !seen[h] {
			out = append(out, h)
			seen[h] = true
		}
	}
	var rest []string
	for h, s := range r.a.Summary.PerHarness {
		if s != nil && !seen[h] {
			rest = append(rest, h)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// Headline returns the one-line verdict for harness h, e.g.
// "oracle: 6/7 passed (85.7 %, 95 % CI 48.7–97.4 %), 1 errored", followed
// by ", N ⚠️ claimed success but scored below 1" when N > 0
// (HarnessSummary.ClaimedButFailed), with h shown through Printable.
func Headline(h string, s *HarnessSummary) string {
	h = Printable(h)
	if s.PassRate == nil {
		return fmt.Sprintf("%s: %d/%d passed (no scored cells), %d errored%s", h, s.Passed, s.Scored, s.Errored, overclaimText(s))
	}
	ci := ""
	if s.PassRateCI != nil {
		ci = fmt.Sprintf(", 95 %% CI %s–%s %%", pct(s.PassRateCI[0]), pct(s.PassRateCI[1]))
	}
	return fmt.Sprintf("%s: %d/%d passed (%s %%%s), %d errored%s", h, s.Passed, s.Scored, pct(*s.PassRate), ci, s.Errored, overclaimText(s))
}

// overclaimText is the headline's count of cells whose agent claimed
// success while the verifier scored them below 1; "" when none.
func overclaimText(s *HarnessSummary) string {
	if s.ClaimedButFailed == 0 {
		return ""
	}
	return fmt.Sprintf(", %d ⚠️ claimed success but scored below 1", s.ClaimedButFailed)
}

func (r *reporter) headlines() {
	hs := r.harnesses()
	if len(hs) == 0 {
		r.printf("No results.\n\n")
		return
	}
	for _, h := range hs {
		line := Headline(h, r.a.Summary.PerHarness[h])
		r.printf("- %s%s\n", code(h), strings.TrimPrefix(line, Printable(h)))
	}
	r.printf("\n")
}

func (r *reporter) harnessTable() {
	hs := r.harnesses()
	if len(hs) == 0 {
		return
	}
	r.printf("## Harnesses\n\n")
	r.printf("| harness | n | errored | scored | passed | pass rate | 95 %% CI | cell time (s) | operations | cost (USD) | cost per pass (USD) |\n")
	r.printf("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, h := range hs {
		s := r.a.Summary.PerHarness[h]
		rate, ci := dash, dash
		if s.PassRate != nil {
			rate = pct(*s.PassRate) + " %"
		}
		if s.PassRateCI != nil {
			ci = pct(s.PassRateCI[0]) + "–" + pct(s.PassRateCI[1]) + " %"
		}
		r.printf("| %s | %d | %d | %d | %d | %s | %s | %s | %d | %s | %s |\n",
			tableCode(h), s.N, s.Errored, s.Scored, s.Passed, rate, ci,
			secs(s.ElapsedSec), s.Operations, usdPtr(s.Cost.TotalCostUSD), usdPtr(s.Cost.CostPerPassUSD))
	}
	r.printf("\nCell time is the harness's cells' elapsed time summed (cells run side by side), not the run's wall time.\n\n")
	for _, h := range hs {
		if c := r.a.Summary.PerHarness[h].Cost; c.TotalCostUSD != nil && c.CostPerPassUSD == nil {
			r.printf("Cost per pass is — where a cell of the harness (an errored one too) has no cost, or none passed: a total over some cells would understate it.\n\n")
			break
		}
	}
	var observed []string
	for _, h := range hs {
		if r.a.Summary.PerHarness[h].Cost.Source == "observed" {
			observed = append(observed, tableCode(h))
		}
	}
	if len(observed) > 0 {
		r.printf("Cost of %s is what the model gateway observed (every cell priced from the pinned price table); of the others, what the agents reported.\n\n", strings.Join(observed, ", "))
	}
	first := true
	for _, h := range hs {
		s := r.a.Summary.PerHarness[h]
		if s.SkillInvocationN == nil {
			continue
		}
		if first {
			r.printf("Skill use (scored cells of a skill arm whose agent invoked the skill):\n\n")
			r.printf("| harness | skill invocation rate | n |\n|---|--:|--:|\n")
			first = false
		}
		rate := dash
		if s.SkillInvocationRate != nil {
			rate = pct(*s.SkillInvocationRate) + " %"
		}
		r.printf("| %s | %s | %d |\n", tableCode(h), rate, *s.SkillInvocationN)
	}
	if !first {
		r.printf("\n")
	}
	var low []string
	for _, h := range hs {
		if n := r.a.Summary.PerHarness[h].LowFidelityOperations; n > 0 {
			low = append(low, fmt.Sprintf("%s %d", code(h), n))
		}
	}
	if len(low) > 0 {
		r.printf("Low-fidelity operations (unstructured output lines that mention tool, subagent or loop; not in the operations column): %s.\n\n", strings.Join(low, ", "))
	}
	r.findingsTable(hs)
}

// findingsTable lists, per harness with any, the suspect cells (tamper
// findings: counted as they were scored) and the cells with each kind of
// verifier finding.
func (r *reporter) findingsTable(hs []string) {
	kinds := []string{"reward_exit_conflict", "no_tests_executed", "collect_failed"}
	first := true
	for _, h := range hs {
		s := r.a.Summary.PerHarness[h]
		if s.Suspect == 0 && len(s.VerifierFindings) == 0 {
			continue
		}
		if first {
			r.printf("Findings (cells; a suspect cell's solve left files that shadow the verifier's test runner or standard modules, and its verdict is counted as scored):\n\n")
			r.printf("| harness | suspect | reward/exit conflict | no tests executed | collect failed |\n|---|--:|--:|--:|--:|\n")
			first = false
		}
		r.printf("| %s | %d", tableCode(h), s.Suspect)
		for _, k := range kinds {
			r.printf(" | %d", s.VerifierFindings[k])
		}
		r.printf(" |\n")
	}
	if !first {
		r.printf("\n")
	}
}

// tasks lists the tasks of the rows in row order.
func (r *reporter) tasks() []string {
	var out []string
	seen := map[string]bool{}
	for _, row := range r.a.Results {
		if !seen[row.Task] {
			seen[row.Task] = true
			out = append(out, row.Task)
		}
	}
	slices.Sort(out)
	return out
}

func (r *reporter) taskTable() {
	hs, ts := r.harnesses(), r.tasks()
	if len(hs) == 0 || len(ts) == 0 {
		return
	}
	r.printf("## Tasks\n\n")
	r.printf("| task |")
	for _, h := range hs {
		r.printf(" %s |", tableCode(h))
	}
	r.printf("\n|---|")
	for range hs {
		r.printf(":-:|")
	}
	r.printf("\n")
	for _, t := range ts {
		r.printf("| %s |", tableCode(t))
		for _, h := range hs {
			r.printf(" %s |", taskCell(r.a.Summary.PerHarness[h].PerTask[t]))
		}
		r.printf("\n")
	}
	r.printf("\n")
}

// taskCell is "passed/scored", "+N errored" when some of the task's cells
// errored, "errored" when all did, and a dash when the harness did not
// run the task.
func taskCell(t *TaskStat) string {
	switch {
	case t == nil || t.N == 0:
		return dash
	case t.Scored == 0:
		return "errored"
	case t.Errored > 0:
		return fmt.Sprintf("%d/%d (+%d errored)", t.Passed, t.Scored, t.Errored)
	default:
		return fmt.Sprintf("%d/%d", t.Passed, t.Scored)
	}
}

// compared lists the harnesses with a comparison, in harness order.
func (r *reporter) compared() []string {
	var out []string
	for _, h := range r.harnesses() {
		if c := r.a.Summary.Comparisons[h]; c != nil {
			out = append(out, h)
		}
	}
	var rest []string
	for h, c := range r.a.Summary.Comparisons {
		if c != nil && !slices.Contains(out, h) {
			rest = append(rest, h)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func (r *reporter) comparisons() {
	hs := r.compared()
	if len(hs) == 0 {
		return
	}
	cs := r.a.Summary.Comparisons
	r.printf("## Comparison vs baseline\n\n")
	r.printf("| harness | baseline | Δ pass rate | Δ passed | Δ cost (USD) | normalized gain | normalized change | errored | baseline errored |\n")
	r.printf("|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, h := range hs {
		c := cs[h]
		r.printf("| %s | %s | %s | %s | %s | %s | %s | %d | %d |\n",
			tableCode(h), tableCode(c.Baseline), ppPtr(c.PassRateDelta), intPtr(c.PassedDelta),
			signedUSD(c.CostDeltaUSD), numPtr(c.NormalizedGain), numPtr(c.NormalizedChange),
			c.Errored, c.BaselineErrored)
	}
	r.printf("\n")

	r.printf("## Paired significance vs baseline (McNemar)\n\n")
	r.printf("| harness | baseline | pairs (tasks) | gained | lost | both passed | both failed | excluded | paired Δ | 95 %% CI | p_exact | p_adjusted | significant |\n")
	r.printf("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|\n")
	var pseudo []string
	for _, h := range hs {
		c := cs[h]
		m := c.McNemar
		ci := dash
		if m.CILo != nil && m.CIHi != nil {
			ci = signedPP(*m.CILo) + " to " + signedPP(*m.CIHi) + " pp"
		}
		sig := dash
		if m.Significant != nil {
			sig = "no"
			if *m.Significant {
				sig = "yes"
			}
		}
		r.printf("| %s | %s | %d (%d) | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			tableCode(h), tableCode(c.Baseline), m.N, m.NUnits, m.NGained, m.NLost, m.NBothPassed, m.NBothFailed,
			m.NExcluded, ppPtr(m.PairedPassRateDelta), ci, pText(m.PExact, m.PExactUnderflow), pText(m.PAdjusted, m.PAdjustedUnderflow), sig)
		if m.PseudoReplicated {
			pseudo = append(pseudo, code(h))
		}
	}
	r.printf("\n")
	for _, h := range hs {
		r.printf("%s\n\n", plainComparison(h, cs[h]))
	}
	family := ""
	for _, h := range hs {
		if f := cs[h].McNemar.CorrectionFamily; f != "" {
			family = f
			break
		}
	}
	if family != "" {
		size := 0
		for _, h := range hs {
			size = max(size, cs[h].McNemar.CorrectionFamilySize)
		}
		r.printf("Pairs are cells both arms scored, one per task, model and repeat; cells either arm errored on are excluded. "+
			"p_exact is the two-sided exact McNemar test (1 when no pair is discordant), p_adjusted its Holm correction over the family %q "+
			"of %d compared harnesses (a harness with no pairs counts as p = 1); significant means p_adjusted < %s. "+
			"The 95 %% CI of the paired Δ is %s.\n\n",
			family, size, strconv.FormatFloat(SignificanceLevel, 'g', -1, 64), ciMethodText(hs, cs))
	}
	if len(pseudo) > 0 {
		var boots []string
		for _, h := range hs {
			if m := cs[h].McNemar; m.PseudoReplicated && m.BootstrapCILo != nil && m.BootstrapCIHi != nil {
				boots = append(boots, fmt.Sprintf("%s %s to %s pp", code(h), signedPP(*m.BootstrapCILo), signedPP(*m.BootstrapCIHi)))
			}
		}
		r.printf("> **Caveat (pseudo-replication):** the pairs of %s include several repeats of the same task, "+
			"which are not independent; the exact p-values and the Newcombe interval treat every pair as independent and overstate the evidence. "+
			"Judge by the tasks count beside the pairs",
			strings.Join(pseudo, ", "))
		if len(boots) > 0 {
			r.printf(", and by the seeded bootstrap over tasks, which keeps a task's repeats together (95 %%: %s)", strings.Join(boots, "; "))
		}
		r.printf(".\n\n")
	}
}

// PlainComparison is one sentence, in plain words, of what the paired
// comparison of harness h with its baseline shows: how many attempts
// (same task, model and repeat) it passed that the baseline failed and
// the other way round, and whether that difference is more than chance
// (McNemar's significant after Holm's correction). Harness names are
// quoted as they are; the report puts them in code spans.
func PlainComparison(h string, c *Comparison) string {
	return plainComparisonOf(h, c, func(s string) string { return "\"" + s + "\"" })
}

func plainComparison(h string, c *Comparison) string { return plainComparisonOf(h, c, code) }

func plainComparisonOf(h string, c *Comparison, name func(string) string) string {
	m := c.McNemar
	if m.N == 0 {
		return fmt.Sprintf("In plain words: %s and %s have no attempt that both scored, so they cannot be compared.", name(h), name(c.Baseline))
	}
	s := fmt.Sprintf("In plain words: on the same tasks, %s passed %d %s that %s failed and failed %d that it passed; ",
		name(h), m.NGained, plural(m.NGained, "attempt", "attempts"), name(c.Baseline), m.NLost)
	switch {
	case m.Significant != nil && *m.Significant && m.PseudoReplicated && !bootstrapAgrees(m):
		// The p-value took repeats of the same tasks for independent
		// attempts; over tasks the difference may be chance.
		return s + fmt.Sprintf("the exact test takes these for independent attempts, but they repeat %d %s, and over tasks the difference could be chance, so the run does not show that either is better (more tasks would tell).",
			m.NUnits, plural(m.NUnits, "task", "tasks"))
	case m.Significant != nil && *m.Significant && m.NGained > m.NLost:
		return s + fmt.Sprintf("a difference this large is unlikely to be chance, so %s is likely better.", name(h))
	case m.Significant != nil && *m.Significant:
		return s + fmt.Sprintf("a difference this large is unlikely to be chance, so %s is likely worse.", name(h))
	case m.NGained == m.NLost:
		return s + "the run shows no difference between them."
	default:
		return s + "with this few attempts that could be chance, so the run does not show that either is better (more tasks would tell)."
	}
}

// bootstrapAgrees reports whether the bootstrap interval over tasks
// excludes 0 on the side the pairs lean to: the difference holds with a
// task's repeats kept together.
func bootstrapAgrees(m McNemar) bool {
	if m.BootstrapCILo == nil || m.BootstrapCIHi == nil {
		return false
	}
	if m.NGained > m.NLost {
		return *m.BootstrapCILo > 0
	}
	return *m.BootstrapCIHi < 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ciMethodText names the interval the McNemar table shows: Newcombe's
// hybrid score interval, or, for an artifact written before ci_method
// existed, the seeded task bootstrap it then held.
func ciMethodText(hs []string, cs map[string]*Comparison) string {
	for _, h := range hs {
		if cs[h].McNemar.CIMethod == CIMethod {
			return "Newcombe's hybrid score interval for paired proportions (Newcombe 1998, method 10)"
		}
	}
	return "a seeded bootstrap over tasks"
}

func (r *reporter) cells() {
	if len(r.a.Results) == 0 {
		return
	}
	r.printf("## Cells\n\n")
	for _, row := range r.a.Results {
		r.printf("### %s · %s", code(row.Task), code(row.Harness))
		if row.Model != "" {
			r.printf(" · %s", code(row.Model))
		}
		r.printf(" · repeat %d", row.Repeat)
		if row.Attempt > 1 {
			r.printf(" · attempt %d", row.Attempt)
		}
		if row.Suspect() {
			r.printf(" · suspect")
		}
		if row.Overclaimed() {
			r.printf(" · ⚠️ claimed success")
		}
		r.printf("\n\n")
		outcome := row.Outcome
		if row.ErrorClass != "" {
			outcome += " (" + row.ErrorClass + ")"
		}
		reward := dash
		if row.Reward != nil {
			reward = num(*row.Reward, 4)
		}
		rc := dash
		if row.ReturnCode != nil {
			rc = strconv.Itoa(*row.ReturnCode)
		}
		r.printf("| outcome | reward | returncode | elapsed (s) | cost (USD) |\n")
		r.printf("|---|--:|--:|--:|--:|\n")
		r.printf("| %s | %s | %s | %s | %s |\n\n",
			tableText(outcome), reward, rc, secs(row.ElapsedSec), usdPtr(RowCost(row, r.costSource(row.Harness))))
		if u := row.Metrics.UsageObserved; u != nil {
			r.printf("%s\n\n", UsageLine(row.Metrics))
		}
		if len(row.Rewards) > 1 {
			keys := make([]string, 0, len(row.Rewards))
			for k := range row.Rewards {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = code(k) + " " + num(row.Rewards[k], 4)
			}
			r.printf("Rewards: %s.\n\n", strings.Join(parts, ", "))
		}
		if len(row.Metrics.UnresolvedEnv) > 0 {
			vs := make([]string, len(row.Metrics.UnresolvedEnv))
			for i, v := range row.Metrics.UnresolvedEnv {
				vs[i] = code(v)
			}
			r.printf("Unresolved environment: %s.\n\n", strings.Join(vs, ", "))
		}
		if row.Suspect() {
			r.printf("Suspect: the solve left files that shadow what the verifier runs:\n\n")
			for _, f := range row.Metrics.TamperFindings {
				r.printf("- %s %s (%s)\n", code(f.Path), f.Change, f.Shadows)
			}
			r.printf("\n")
		}
		if len(row.Metrics.VerifierFindings) > 0 {
			r.printf("Verifier findings:\n\n")
			for _, f := range row.Metrics.VerifierFindings {
				r.printf("- %s: %s\n", code(f.Kind), tableText(f.Detail))
			}
			r.printf("\n")
		}
		if row.Metrics.UsagePartial {
			r.printf("Usage partial (tokens are a lower bound):\n\n%s\n", fenced(row.Metrics.UsagePartialReason))
		}
		if rc := row.Metrics.Recompile; rc != nil && rc.Failed {
			why := fmt.Sprintf("exit %d", rc.ExitCode)
			if rc.TimedOut {
				why = "timed out"
			}
			r.printf("Recompile failed (%s; scored as the verifier found it): %s\n\n%s\n", why, code(strings.Join(rc.Commands, " ; ")), fenced(rc.OutputTail))
		}
		if wt := row.Metrics.WorkTree; wt != nil && wt.Truncated {
			r.printf("work/ cut at its cap (%d bytes, %d entries): %d entries left out (%d bytes of files)", wt.CapBytes, wt.CapEntries, wt.SkippedEntries, wt.SkippedBytes)
			if len(wt.Skipped) > 0 {
				r.printf(", first %s", code(wt.Skipped[0]))
			}
			r.printf(".\n\n")
		}
		if row.Error != "" {
			r.printf("Error:\n\n%s\n", fenced(row.Error))
		}
		r.claimBlock(row)
		if row.StdoutTail != "" {
			r.printf("Stdout (tail):\n\n%s\n", fenced(row.StdoutTail))
		}
		if row.VerifierTail != "" && !row.Passed {
			// Why a scored cell missed, in the test runner's words (an
			// assertion, a missing tool), beside the solve's output; its
			// last lines, where a runner sums up (the row keeps 4 KiB).
			r.printf("Verifier output (tail):\n\n%s\n", fenced(lastLines(row.VerifierTail, reportVerifierLines)))
		}
	}
}

// reportVerifierLines is how many of the verifier's last lines a cell of
// the report shows.
const reportVerifierLines = 20

// lastLines is the last n lines of s (a final newline ends the last line).
func lastLines(s string, n int) string {
	body := strings.TrimSuffix(s, "\n")
	for i := len(body) - 1; i >= 0; i-- {
		if body[i] == '\n' {
			if n--; n == 0 {
				return s[i+1:]
			}
		}
	}
	return s
}

// fenced wraps s in a fenced code block whose backtick fence is longer
// than any backtick run in s (CommonMark closes a fence only with a run at
// least as long), so s cannot end the block or inject Markdown.
func fenced(s string) string {
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return fence + "text\n" + s + fence + "\n"
}

// code renders s as an inline code span, with a delimiter longer than any
// backtick run inside it; "" renders as a dash.
func code(s string) string {
	if s == "" {
		return dash
	}
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	delim := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return delim + s + delim
}

// tableCode is code(s) safe inside a GFM table cell: a pipe is escaped,
// which GFM honours inside code spans too.
func tableCode(s string) string {
	return strings.ReplaceAll(code(s), "|", `\|`)
}

// tableText is plain text safe inside a GFM table cell.
func tableText(s string) string {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	return strings.ReplaceAll(s, "|", `\|`)
}

func longestRun(s string, c byte) int {
	best, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			cur++
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}

// num formats x with at most prec decimals, trailing zeros trimmed.
func num(x float64, prec int) string {
	s := strconv.FormatFloat(x, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// pct formats a fraction as a percentage with one decimal ("85.7").
func pct(x float64) string { return strconv.FormatFloat(x*100, 'f', 1, 64) }

func secs(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// costSource is the source of harness h's cost in the summary
// ("observed" or "reported"; CostOf).
func (r *reporter) costSource(h string) string {
	if s, ok := r.a.Summary.PerHarness[h]; ok && s != nil {
		return s.Cost.Source
	}
	return "reported"
}

// UsageLine compares a cell's reported and observed usage in one line:
// the agent's tokens (input / output / cache read / cache write) and
// cost, the gateway's and its requests, and a flag when they differ by
// more than 1 % (UsageObserved.ReportedDiffers).
func UsageLine(m Metrics) string {
	u := m.UsageObserved
	count := func(p *int64) string {
		if p == nil {
			return dash
		}
		return strconv.FormatInt(*p, 10)
	}
	rep := fmt.Sprintf("reported %s / %s / %s / %s tokens (in / out / cache read / cache write), cost %s",
		count(m.PromptTokens), count(m.CompletionTokens), count(m.CacheReadTokens), count(m.CacheWriteTokens), usdPtr(m.CostUSD))
	if UsageNotReported(m) {
		rep = "reported: " + notReportedLabel(m.AgentReported)
	}
	cost := usdPtr(u.CostUSD)
	if u.CostUSD == nil && u.CostNullReason != "" {
		cost += " (" + u.CostNullReason + ")"
	}
	requests := "requests"
	if u.Requests == 1 {
		requests = "request"
	}
	obs := fmt.Sprintf("observed %d / %d / %d / %d in %d %s, cost %s", u.InputTokens, u.OutputTokens,
		u.CacheReadTokens, u.CacheWriteTokens, u.Requests, requests, cost)
	line := "Usage: " + rep + "; " + obs + "."
	if u.ReportedDiffers != nil && *u.ReportedDiffers {
		line += " **Reported and observed tokens differ by more than 1 %.**"
	}
	return line
}

// notReportedLabel is the reason an agent gave no usage of its own, as
// its harness recorded it in agent_reported: "metrics_json" (a missing
// metrics.json is named there), with the "error" that made one
// unreadable; "not reported by harness" when neither is recorded.
func notReportedLabel(ar map[string]any) string {
	label, _ := ar["metrics_json"].(string)
	if label == "" {
		label = "not reported by harness"
	}
	if e, ok := ar["error"].(string); ok && e != "" {
		label += " (" + e + ")"
	}
	return label
}

// UsageNotReported reports whether the agent gave no usage of its own:
// no token count, no cost, and no Usage the agent reported.
func UsageNotReported(m Metrics) bool {
	return m.PromptTokens == nil && m.CompletionTokens == nil && m.CacheReadTokens == nil && m.CacheWriteTokens == nil && m.CostUSD == nil
}

func usdPtr(p *float64) string {
	if p == nil {
		return dash
	}
	return strconv.FormatFloat(*p, 'f', 4, 64)
}

func signedUSD(p *float64) string {
	if p == nil {
		return dash
	}
	s := strconv.FormatFloat(*p, 'f', 4, 64)
	if *p >= 0 {
		s = "+" + s
	}
	return s
}

// signedPP formats a fraction difference in percentage points ("+14.3").
func signedPP(x float64) string {
	s := strconv.FormatFloat(x*100, 'f', 1, 64)
	if s == "-0.0" {
		s = "0.0"
	}
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

func ppPtr(p *float64) string {
	if p == nil {
		return dash
	}
	return signedPP(*p) + " pp"
}

func numPtr(p *float64) string {
	if p == nil {
		return dash
	}
	return num(*p, 3)
}

func intPtr(p *int) string {
	if p == nil {
		return dash
	}
	if *p > 0 {
		return "+" + strconv.Itoa(*p)
	}
	return strconv.Itoa(*p)
}

// pText formats a p-value with three significant digits, or "< 1e-300"
// when it underflowed PFloor.
func pText(p *float64, underflow bool) string {
	switch {
	case p == nil:
		return dash
	case underflow:
		return "< " + strconv.FormatFloat(PFloor, 'g', -1, 64)
	}
	return strconv.FormatFloat(*p, 'g', 3, 64)
}

package artifact

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proctor-eval/proctor/pkg/stats"
)

// Unrated is the difficulty of a row whose task declares none.
const Unrated = "unrated"

// Difficulty returns the row's task_metadata.difficulty as text: a string
// as it is (trimmed), a number in its shortest form, Unrated when the task
// declares none (absent, null or blank).
func (r Result) Difficulty() string {
	var s string
	switch v := r.TaskMeta["difficulty"].(type) {
	case nil:
	case string:
		s = strings.TrimSpace(v)
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		s = fmt.Sprint(v)
	}
	if s == "" {
		return Unrated
	}
	return s
}

// difficultyOrder sorts difficulties: easy, medium, hard first (in that
// order), then the others by name, Unrated last.
func difficultyOrder(a, b string) int {
	rank := func(d string) int {
		switch strings.ToLower(d) {
		case "easy":
			return 0
		case "medium":
			return 1
		case "hard":
			return 2
		case Unrated:
			return 4
		}
		return 3
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(a, b)
}

// passCount is the passed, scored and errored cells of a group of rows.
type passCount struct{ n, errored, scored, passed int }

func (c *passCount) add(r Result) {
	c.n++
	switch {
	case r.Errored():
		c.errored++
	case r.Passed:
		c.scored++
		c.passed++
	default:
		c.scored++
	}
}

// difficultyRollup writes the pass rate per harness per difficulty
// (task_metadata.difficulty; Unrated for tasks without one) with its
// Wilson 95 % interval over the scored cells. It is left out when no row
// has a difficulty.
func (r *reporter) difficultyRollup() {
	hs := r.harnesses()
	rated := false
	counts := map[[2]string]*passCount{}
	var diffs []string
	for _, row := range r.a.Results {
		d := row.Difficulty()
		rated = rated || d != Unrated
		k := [2]string{row.Harness, d}
		if counts[k] == nil {
			counts[k] = &passCount{}
			if !slices.Contains(diffs, d) {
				diffs = append(diffs, d)
			}
		}
		counts[k].add(row)
	}
	if !rated || len(hs) == 0 {
		return
	}
	slices.SortFunc(diffs, difficultyOrder)
	r.printf("## Difficulty\n\n")
	r.printf("Pass rate per harness by the tasks' `metadata.difficulty` (%s: tasks without one), over scored cells, with the Wilson 95 %% interval.\n\n", Unrated)
	r.printf("| harness | difficulty | passed/scored | pass rate | 95 %% CI | errored |\n")
	r.printf("|---|---|--:|--:|--:|--:|\n")
	for _, h := range hs {
		for _, d := range diffs {
			c := counts[[2]string{h, d}]
			if c == nil {
				continue
			}
			rate, ci := dash, dash
			if c.scored > 0 {
				rate = pct(float64(c.passed)/float64(c.scored)) + " %"
			}
			if lo, hi, ok := stats.Wilson(c.passed, c.scored, stats.Z95); ok {
				ci = pct(lo) + "–" + pct(hi) + " %"
			}
			r.printf("| %s | %s | %d/%d | %s | %s | %d |\n", tableCode(h), tableText(d), c.passed, c.scored, rate, ci, c.errored)
		}
	}
	r.printf("\n")
}

// taskCost writes, per task and harness that ran it, passed/scored and
// the total and mean cost of its cells, over the cells that carry a cost
// (the count of those is shown when it is not every cell), taken from the
// source of the harness's total (costSource), so a harness's tasks add up
// to its total.
func (r *reporter) taskCost() {
	hs, ts := r.harnesses(), r.tasks()
	if len(hs) == 0 || len(ts) == 0 {
		return
	}
	type group struct {
		passCount
		priced int
		cost   float64
	}
	groups := map[[2]string]*group{}
	for _, row := range r.a.Results {
		k := [2]string{row.Task, row.Harness}
		if groups[k] == nil {
			groups[k] = &group{}
		}
		g := groups[k]
		g.add(row)
		if c := RowCost(row, r.costSource(row.Harness)); c != nil {
			g.priced++
			g.cost += *c
		}
	}
	r.printf("## Per-task pass and cost\n\n")
	r.printf("| task | harness | passed/scored | errored | total cost (USD) | mean cost per cell (USD) |\n")
	r.printf("|---|---|--:|--:|--:|--:|\n")
	partial := false
	for _, t := range ts {
		for _, h := range hs {
			g := groups[[2]string{t, h}]
			if g == nil {
				continue
			}
			total, mean := dash, dash
			if g.priced > 0 {
				total = strconv.FormatFloat(g.cost, 'f', 4, 64)
				mean = strconv.FormatFloat(g.cost/float64(g.priced), 'f', 4, 64)
				if g.priced < g.n {
					total += fmt.Sprintf(" (%d of %d cells)", g.priced, g.n)
					partial = true
				}
			}
			r.printf("| %s | %s | %d/%d | %d | %s | %s |\n", tableCode(t), tableCode(h), g.passed, g.scored, g.errored, total, mean)
		}
	}
	r.printf("\n")
	if partial {
		r.printf("Costs are over the cells that report one; \"(k of n cells)\" marks a total that leaves some out.\n\n")
	}
}

// answers writes, for every cell whose agent left a final message, the
// verifier's verdict beside the agent's own claim, flagging with ⚠️ the
// cells whose agent claimed success while the verifier scored them below
// 1 (Result.Overclaimed).
func (r *reporter) answers() {
	var rows []Result
	for _, row := range r.a.Results {
		if row.AgentClaim != nil {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Answers\n\n")
	r.printf("The verifier's verdict beside the agent's own final message (its end). ⚠️ marks a cell whose agent claimed success " +
		"while the verifier scored it below 1; what counts as a claim is the rule of docs/results.md (\"Agent claims\").\n\n")
	r.printf("| | task | harness | model | repeat | verdict | claims success | agent's final message (end) |\n")
	r.printf("|:-:|---|---|---|--:|---|:-:|---|\n")
	for _, row := range rows {
		flag, claims := "", "no"
		if row.Overclaimed() {
			flag = "⚠️"
		}
		if row.AgentClaim.ClaimedSuccess {
			claims = "yes"
		}
		r.printf("| %s | %s | %s | %s | %d | %s | %s | %s |\n", flag, tableCode(row.Task), tableCode(row.Harness), tableCode(row.Model),
			row.Repeat, tableText(verdictText(row)), claims, tableCode(claimExcerpt(row.AgentClaim.Text)))
	}
	r.printf("\n")
}

// verdictText is a row's outcome with its reward ("failed (0)").
func verdictText(row Result) string {
	s := row.Outcome
	if row.ErrorClass != "" {
		s += " (" + row.ErrorClass + ")"
	}
	if row.Reward != nil {
		s += " (" + num(*row.Reward, 4) + ")"
	}
	return s
}

// claimExcerptRunes bounds the claim shown in the answers table.
const claimExcerptRunes = 160

// claimExcerpt is the end of a claim on one line: its last
// claimExcerptRunes runes, whitespace runs made one space, "…" in front
// when cut.
func claimExcerpt(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	rs := []rune(s)
	if len(rs) > claimExcerptRunes {
		return "…" + string(rs[len(rs)-claimExcerptRunes:])
	}
	return s
}

// claimBlock writes a cell's claim under its table: whether it claims
// success, the ⚠️ flag, and the text in a fenced block.
func (r *reporter) claimBlock(row Result) {
	c := row.AgentClaim
	if c == nil {
		return
	}
	switch {
	case row.Overclaimed():
		r.printf("Agent's final message (⚠️ claims success; the verifier scored %s):\n\n%s\n", num(*row.Reward, 4), fenced(c.Text))
	case c.ClaimedSuccess:
		r.printf("Agent's final message (claims success):\n\n%s\n", fenced(c.Text))
	default:
		r.printf("Agent's final message (no claim of success):\n\n%s\n", fenced(c.Text))
	}
}

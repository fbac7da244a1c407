package artifact

import (
	"cmp"
	"math"
	"slices"

	"github.com/proctor-eval/proctor/pkg/stats"
)

// CorrectionFamily is mcnemar.correction_family: Holm's correction runs
// across the compared harnesses of one run.
const CorrectionFamily = "harnesses"

// CIMethod is mcnemar.ci_method: ci_lo and ci_hi are Newcombe's hybrid
// score interval for paired proportions (Newcombe 1998, method 10).
const CIMethod = "newcombe_hybrid_score"

// SignificanceLevel is the family-wise error rate mcnemar.significant is
// decided at: significant = p_adjusted < SignificanceLevel.
const SignificanceLevel = 0.05

// CompareOptions configures Compare. The zero value means defaults.
type CompareOptions struct {
	// Resamples is the number of bootstrap resamples; < 1 means
	// stats.DefaultResamples.
	Resamples int
	// Seed seeds the bootstrap; 0 means stats.DefaultSeed. Keep it below
	// 2^53 so JSON readers that parse numbers as float64 read it exactly.
	Seed uint64
	// SetupCheck reports whether the rows of a harness (by its name) check
	// the setup rather than a treatment (the oracle, probes: DESIGN §5);
	// such rows never enter comparisons nor the correction family. The
	// harness arms decide it (harness.IsSetupCheck, which the projection
	// passes); nil means no harness is one.
	SetupCheck func(harness string) bool
}

func (o CompareOptions) withDefaults() CompareOptions {
	if o.Resamples < 1 {
		o.Resamples = stats.DefaultResamples
	}
	if o.Seed == 0 {
		o.Seed = stats.DefaultSeed
	}
	return o
}

// cellKey identifies a cell within one harness.
type cellKey struct {
	task   string
	model  string
	repeat int
}

func compareKeys(a, b cellKey) int {
	return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.model, b.model), cmp.Compare(a.repeat, b.repeat))
}

// Compare computes summary.comparisons (DESIGN §8): one *Comparison per
// harness of results other than baseline, keyed by harness. Rows of the
// harnesses opts.SetupCheck names (the oracle, probes) are checks of the
// setup and are dropped first:
// they get no comparison, never serve as the baseline and never enter the
// correction family. Compare returns nil when the baseline has no rows
// left; results is not modified and its order does not matter.
//
// Cells. A cell is errored when Result.Errored says so (metrics.error,
// metrics.solver_error or outcome "errored"): missing data, never a fail.
// Any other cell is scored and passed = Result.Passed (reward >= 1; a
// partial reward is a fail). When a harness holds several rows for one
// (task, model, repeat), the one with the highest attempt counts.
//
// Pairing. Cells of the arm and the baseline are matched on (task, model,
// repeat). When the baseline ran under a single model, that model stands
// for every model: its cells are replicated once per model the arm ran
// under, so an arm run under several models is compared, model by model,
// against the one baseline run; counts, costs and pairs below are then
// taken over the replicated baseline cells (baseline_errored and the
// baseline cost scale with the number of arm models). When the baseline
// ran under several models, an arm cell whose model the baseline lacks has
// no partner. Replication makes pairs share baseline cells, which the
// task-level bootstrap and pseudo_replicated account for.
//
// Deltas. pass_rate_delta = arm pass rate − baseline pass rate (each
// passed/scored over its own cells), passed_delta = arm passed − baseline
// passed, cost_delta_usd = arm total − baseline total (CostOf). All three
// are null when the two arms lost different cells to errors (the sets of
// errored cell keys differ; a cell both lost cancels out); pass_rate_delta
// is also null when either arm scored nothing, and cost_delta_usd when
// either total is null. normalized_gain (stats.NormalizedGain, Hake) and
// normalized_change (stats.NormalizedChange, Marx & Cummings) are taken on
// the two pass rates and are null when pass_rate_delta is, or when the
// function says the value is undefined. errored and baseline_errored count
// each side's errored cells.
//
// McNemar. Pairs are the keys both arms scored, one pair per (task,
// model, repeat). n_excluded counts the keys either arm attempted that
// are not pairs (present for one arm only, or errored in either).
// paired_pass_rate_delta = (n_gained − n_lost)/n; ci_lo, ci_hi are
// Newcombe's hybrid score 95 % interval for it (stats.NewcombePaired,
// method 10 of Newcombe 1998; ci_method CIMethod), which keeps its width
// when every pair agrees or every pair moved the same way.
// bootstrap_ci_lo, bootstrap_ci_hi are the task-level bootstrap interval
// (stats.PairedBootstrap, each task resampled with all its pairs, opts'
// resamples and seed, which are recorded): it keeps a task's repeats
// together but collapses to a point when every task agrees, so it is a
// complement for pseudo-replicated pairs, not the headline. When n is 0
// the delta and ci_lo, ci_hi are null and the bootstrap bounds absent. p_exact is stats.McNemarExact on (n_gained, n_lost),
// exactly 1 when no pair is discordant.
//
// Holm's family is every compared harness (correction_family_size of
// them), decided before any outcome is seen: p_adjusted is stats.Holm over
// their p_exact in harness order, and significant = p_adjusted <
// SignificanceLevel. A harness with no pair at all (n = 0: nothing both
// arms scored) has no test, so its p_exact, p_adjusted and significant are
// null, but it still counts in the family with p = 1: dropping it would
// make the others look stronger because an arm lost all its data. n_units
// counts the distinct tasks behind the pairs; pseudo_replicated = n_units
// < n (pairs are then not independent, and neither the exact p nor the
// Newcombe interval knows it).
//
// Rounding. Every float is computed at full precision and rounded once at
// the end as Decimals says (6 decimal places; interval bounds included),
// except p_exact and p_adjusted, which keep PValueDigits significant
// digits; significant is decided on the rounded p_adjusted so it agrees
// with the number beside it. Maps are walked in sorted order, so the same
// results give the same JSON bytes.
func Compare(results []Result, baseline string, opts CompareOptions) map[string]*Comparison {
	opts = opts.withDefaults()
	byHarness := map[string][]Result{}
	for _, r := range sortedRows(results) {
		if opts.SetupCheck != nil && opts.SetupCheck(r.Harness) {
			continue
		}
		byHarness[r.Harness] = append(byHarness[r.Harness], r)
	}
	baseRows := byHarness[baseline]
	if len(baseRows) == 0 {
		return nil
	}
	harnesses := make([]string, 0, len(byHarness))
	for h := range byHarness {
		if h != baseline {
			harnesses = append(harnesses, h)
		}
	}
	slices.Sort(harnesses)

	out := make(map[string]*Comparison, len(harnesses))
	raw := make([]float64, len(harnesses))    // unrounded p_exact, 1 without pairs
	rawLog := make([]float64, len(harnesses)) // its log10, 0 without pairs
	underflow := false
	for i, h := range harnesses {
		c, p, lp := compareArm(cells(byHarness[h]), cells(alignBaseline(baseRows, byHarness[h])), baseline, opts)
		c.McNemar.CorrectionFamilySize = len(harnesses)
		out[h] = c
		raw[i], rawLog[i] = p, lp
		underflow = underflow || c.McNemar.PExactUnderflow
	}
	// Holm's step-down runs on the p-values, or, when one of the family is
	// below PFloor, on their log10, which keeps its order and magnitude.
	adjLog := make([]float64, len(harnesses))
	if underflow {
		adjLog = stats.HolmLog10(rawLog)
	} else {
		for i, adj := range stats.Holm(raw) {
			adjLog[i] = math.Log10(adj)
			raw[i] = adj
		}
	}
	for i := range harnesses {
		m := &out[harnesses[i]].McNemar
		if m.PExact == nil {
			continue // no pairs: in the family, but no test of its own
		}
		if underflow {
			raw[i] = math.Pow(10, adjLog[i])
		}
		m.PAdjusted, m.PAdjustedUnderflow, m.PAdjustedLog10 = storedP(raw[i], adjLog[i])
		sig := *m.PAdjusted < SignificanceLevel
		m.Significant = &sig
	}
	return out
}

// storedP is how a p-value is stored: p to PValueDigits significant
// digits, or, when log10p says it is below PFloor, PFloor with the
// underflow flag and log10p to Decimals places.
func storedP(p, log10p float64) (*float64, bool, *float64) {
	if log10p < math.Log10(PFloor) {
		return ptr(PFloor), true, roundPtr(&log10p)
	}
	return roundSigPtr(&p), false, nil
}

// alignBaseline returns the baseline rows the arm is compared with: the
// rows themselves, or, when they all carry one model, a copy of them for
// each model the arm ran under (see Compare).
func alignBaseline(base, arm []Result) []Result {
	baseModels := distinctModels(base)
	if len(baseModels) != 1 {
		return base
	}
	armModels := distinctModels(arm)
	aligned := make([]Result, 0, len(base)*len(armModels))
	for _, m := range armModels {
		for _, r := range base {
			r.Model = m
			aligned = append(aligned, r)
		}
	}
	return aligned
}

func distinctModels(rows []Result) []string {
	var ms []string
	for _, r := range rows {
		ms = append(ms, r.Model)
	}
	slices.Sort(ms)
	return slices.Compact(ms)
}

// cells indexes rows by key; for a repeated key the row that sorts last in
// sortedRows order (the highest attempt) wins. A planned row (a dry
// run's) is no cell of a comparison.
func cells(rows []Result) map[cellKey]Result {
	m := make(map[cellKey]Result, len(rows))
	for _, r := range rows {
		if r.Planned() {
			continue
		}
		k := cellKey{r.Task, r.Model, r.Repeat}
		if old, ok := m[k]; !ok || cmp.Or(cmp.Compare(old.Attempt, r.Attempt), cmp.Compare(old.CellID, r.CellID)) <= 0 {
			m[k] = r
		}
	}
	return m
}

// side holds one arm's cell counts.
type side struct {
	errored, scored, passed int
	erroredKeys             map[cellKey]bool
	rows                    []Result
}

func tally(cs map[cellKey]Result) side {
	s := side{erroredKeys: map[cellKey]bool{}}
	for k, r := range cs {
		s.rows = append(s.rows, r)
		switch {
		case r.Errored():
			s.errored++
			s.erroredKeys[k] = true
		case r.Passed:
			s.scored++
			s.passed++
		default:
			s.scored++
		}
	}
	return s
}

func (s side) rate() (float64, bool) {
	if s.scored == 0 {
		return 0, false
	}
	return float64(s.passed) / float64(s.scored), true
}

// compareArm builds one comparison, with p_adjusted and significant left
// null for Compare to fill in. It also returns the unrounded p_exact and
// its log10, or 1 and 0 when there are no pairs (p_exact stays null then).
func compareArm(arm, base map[cellKey]Result, baseline string, opts CompareOptions) (*Comparison, float64, float64) {
	a, b := tally(arm), tally(base)
	c := &Comparison{
		Baseline:        baseline,
		Errored:         a.errored,
		BaselineErrored: b.errored,
	}
	sameLosses := len(a.erroredKeys) == len(b.erroredKeys)
	for k := range a.erroredKeys {
		sameLosses = sameLosses && b.erroredKeys[k]
	}
	if sameLosses {
		pd := a.passed - b.passed
		c.PassedDelta = &pd
		ar, aok := a.rate()
		br, bok := b.rate()
		if aok && bok {
			c.PassRateDelta = roundPtr(ptr(ar - br))
			if g, ok := stats.NormalizedGain(ar, br); ok {
				c.NormalizedGain = roundPtr(&g)
			}
			if ch, ok := stats.NormalizedChange(ar, br); ok {
				c.NormalizedChange = roundPtr(&ch)
			}
		}
		ac, bc := CostOf(a.rows), CostOf(b.rows)
		if ac.TotalCostUSD != nil && bc.TotalCostUSD != nil {
			c.CostDeltaUSD = roundPtr(ptr(*ac.TotalCostUSD - *bc.TotalCostUSD))
		}
	}

	keys := make([]cellKey, 0, len(arm)+len(base))
	for k := range arm {
		keys = append(keys, k)
	}
	for k := range base {
		if _, ok := arm[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)

	m := &c.McNemar
	m.CorrectionFamily = CorrectionFamily
	m.CIMethod = CIMethod
	m.BootstrapResamples = opts.Resamples
	m.BootstrapSeed = opts.Seed
	var units [][]stats.Pair
	lastTask := ""
	for _, k := range keys {
		ar, aok := arm[k]
		br, bok := base[k]
		if !aok || !bok || ar.Errored() || br.Errored() {
			m.NExcluded++
			continue
		}
		p := stats.Pair{Arm: ar.Passed, Base: br.Passed}
		switch {
		case p.Arm && p.Base:
			m.NBothPassed++
		case p.Arm:
			m.NGained++
		case p.Base:
			m.NLost++
		default:
			m.NBothFailed++
		}
		m.N++
		// keys are sorted by task first, so a task's pairs are contiguous.
		if len(units) == 0 || k.task != lastTask {
			units = append(units, nil)
			lastTask = k.task
		}
		units[len(units)-1] = append(units[len(units)-1], p)
	}
	m.NUnits = len(units)
	m.PseudoReplicated = m.NUnits < m.N
	if m.N == 0 {
		return c, 1, 0
	}
	m.PairedPassRateDelta = roundPtr(ptr(float64(m.NGained-m.NLost) / float64(m.N)))
	if lo, hi, ok := stats.NewcombePaired(m.NBothPassed, m.NGained, m.NLost, m.NBothFailed, stats.Z95); ok {
		m.CILo, m.CIHi = roundPtr(&lo), roundPtr(&hi)
	}
	if lo, hi, ok := stats.PairedBootstrap(units, opts.Resamples, opts.Seed); ok {
		m.BootstrapCILo, m.BootstrapCIHi = roundPtr(&lo), roundPtr(&hi)
	}
	p, _ := stats.McNemarExact(m.NGained, m.NLost) // counts are never negative
	lp, _ := stats.McNemarExactLog10(m.NGained, m.NLost)
	m.PExact, m.PExactUnderflow, m.PExactLog10 = storedP(p, lp)
	return c, p, lp
}

// CostOf returns the cost summary of rows in USD (DESIGN §8): when every
// row carries metrics.usage_observed.cost_usd (the model gateway priced
// every cell), those are the costs (source "observed"); a row that never
// reached the gateway (errored before its sandbox started, so without
// usage_observed, and reporting no usage of its own: cancelled while
// queued, refused, an unresolved env) spent nothing there and counts as an
// observed 0 beside them, provided one row at least has usage_observed.
// Otherwise the costs are metrics.cost_usd, the agent's own (source
// "reported"). total_cost_usd is the sum over the rows that carry a cost,
// null when none does; cost_per_pass_usd = total / passed, set only when
// every row (errored rows included) carries one and at least one row
// passed (Passed and not errored). The sum is taken in ascending order of
// the values, so it does not depend on the order of rows. Values are not
// rounded; callers round as Decimals says.
func CostOf(rows []Result) CostSummary {
	observed, seen := true, false
	for _, r := range rows {
		u := r.Metrics.UsageObserved
		switch {
		case u != nil && u.CostUSD != nil:
			seen = true
		case u == nil && neverReachedGateway(r):
		default:
			observed = false
		}
	}
	observed = observed && seen
	var costs []float64
	passed := 0
	source := "reported"
	if observed {
		source = "observed"
	}
	for _, r := range rows {
		if c := RowCost(r, source); c != nil {
			costs = append(costs, *c)
		}
		if r.Passed && !r.Errored() {
			passed++
		}
	}
	if len(costs) == 0 {
		return CostSummary{}
	}
	slices.Sort(costs)
	total := 0.0
	for _, v := range costs {
		total += v
	}
	s := CostSummary{TotalCostUSD: &total, Source: source}
	if len(costs) == len(rows) && passed > 0 {
		s.CostPerPassUSD = ptr(total / float64(passed))
	}
	return s
}

// RowCost is a row's cost from the source its harness's CostSummary
// names: metrics.usage_observed.cost_usd for "observed",
// metrics.cost_usd (the agent's own) otherwise; nil when the row has none.
// The report's per-task and per-cell costs read it, so they add up to the
// harness's total.
func RowCost(r Result, source string) *float64 {
	if source == "observed" {
		if u := r.Metrics.UsageObserved; u != nil {
			return u.CostUSD
		}
		if neverReachedGateway(r) {
			return ptr(0.0)
		}
		return nil
	}
	return r.Metrics.CostUSD
}

// neverReachedGateway reports whether r, which has no usage_observed, is
// a cell that spent nothing: errored (its sandbox never started, or the
// gateway would have given it usage_observed) with no usage of its own.
func neverReachedGateway(r Result) bool {
	return r.Metrics.UsageObserved == nil && r.Errored() && UsageNotReported(r.Metrics)
}

func ptr[T any](v T) *T { return &v }

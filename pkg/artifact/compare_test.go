package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/stats"
)

// row builds a result for a cell; outcome decides passed and errored.
func row(task, harness, model string, repeat int, outcome string) Result {
	r := Result{
		CellID:  fmt.Sprintf("%s/%s/%s/%d", task, harness, model, repeat),
		Task:    task,
		Harness: harness,
		Model:   model,
		Repeat:  repeat,
		Attempt: 1,
		Outcome: outcome,
		Passed:  outcome == OutcomePassed,
	}
	if outcome == OutcomeErrored {
		r.ErrorClass = ErrorInfra
		r.Metrics.Error = true
	}
	return r
}

// arm builds one row per outcome letter (P passed, F failed, E errored,
// - absent) for tasks t1, t2, … at the given repeat.
func arm(harness, model string, repeat int, outcomes string) []Result {
	var rows []Result
	for i, o := range outcomes {
		task := fmt.Sprintf("t%d", i+1)
		switch o {
		case 'P':
			rows = append(rows, row(task, harness, model, repeat, OutcomePassed))
		case 'F':
			rows = append(rows, row(task, harness, model, repeat, OutcomeFailed))
		case 'E':
			rows = append(rows, row(task, harness, model, repeat, OutcomeErrored))
		}
	}
	return rows
}

func concat(parts ...[]Result) []Result {
	var out []Result
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func priced(rows []Result, usd float64) []Result {
	out := make([]Result, len(rows))
	for i, r := range rows {
		r.Metrics.CostUSD = &usd
		out[i] = r
	}
	return out
}

func fptr(v float64) *float64 { return &v }

func eqF(t *testing.T, name string, got *float64, want *float64) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s = %v, want %v", name, fmtPtr(got), fmtPtr(want))
	case math.Abs(*got-*want) > 1e-9:
		t.Errorf("%s = %v, want %v", name, *got, *want)
	}
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func TestCompareCountsAndDeltas(t *testing.T) {
	results := concat(
		arm("base", "m", 0, "PFFPF"),
		arm("agent:x", "m", 0, "PPPFF"),
		arm("oracle", "m", 0, "PPPPP"),
		arm("probe", "m", 0, "FFFFF"),
	)
	cs := Compare(results, "base", testCompare)
	if len(cs) != 1 || cs["agent:x"] == nil {
		t.Fatalf("comparisons for %v, want only agent:x (oracle and probe never compared)", keysOf(cs))
	}
	c := cs["agent:x"]
	if c.Baseline != "base" {
		t.Errorf("baseline = %q", c.Baseline)
	}
	eqF(t, "pass_rate_delta", c.PassRateDelta, fptr(0.2))
	if c.PassedDelta == nil || *c.PassedDelta != 1 {
		t.Errorf("passed_delta = %s, want 1", fmtPtr(c.PassedDelta))
	}
	eqF(t, "normalized_gain", c.NormalizedGain, fptr(0.333333))
	eqF(t, "normalized_change", c.NormalizedChange, fptr(0.333333))
	eqF(t, "cost_delta_usd", c.CostDeltaUSD, nil)
	m := c.McNemar
	if m.N != 5 || m.NGained != 2 || m.NLost != 1 || m.NBothPassed != 1 || m.NBothFailed != 1 || m.NExcluded != 0 {
		t.Errorf("mcnemar counts = %+v", m)
	}
	if m.NUnits != 5 || m.PseudoReplicated {
		t.Errorf("n_units = %d, pseudo_replicated = %v; want 5, false", m.NUnits, m.PseudoReplicated)
	}
	eqF(t, "paired_pass_rate_delta", m.PairedPassRateDelta, fptr(0.2))
	eqF(t, "p_exact", m.PExact, fptr(1))
	eqF(t, "p_adjusted", m.PAdjusted, fptr(1))
	if m.Significant == nil || *m.Significant {
		t.Errorf("significant = %s, want false", fmtPtr(m.Significant))
	}
	if m.CorrectionFamily != "harnesses" || m.BootstrapResamples != stats.DefaultResamples || m.BootstrapSeed != stats.DefaultSeed {
		t.Errorf("family/resamples/seed = %q/%d/%d", m.CorrectionFamily, m.BootstrapResamples, m.BootstrapSeed)
	}
	if m.CIMethod != CIMethod || m.CorrectionFamilySize != 1 {
		t.Errorf("ci_method %q, correction_family_size %d; want %q, 1", m.CIMethod, m.CorrectionFamilySize, CIMethod)
	}
	lo, hi, _ := stats.NewcombePaired(1, 2, 1, 1, stats.Z95)
	eqF(t, "ci_lo", m.CILo, fptr(round6(lo)))
	eqF(t, "ci_hi", m.CIHi, fptr(round6(hi)))
	if m.BootstrapCILo == nil || m.BootstrapCIHi == nil || *m.BootstrapCILo > 0.2 || *m.BootstrapCIHi < 0.2 || *m.BootstrapCILo < -1 || *m.BootstrapCIHi > 1 {
		t.Errorf("bootstrap interval [%s, %s] does not hold the paired delta 0.2", fmtPtr(m.BootstrapCILo), fmtPtr(m.BootstrapCIHi))
	}
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestCompareNilWithoutBaselineRows(t *testing.T) {
	results := concat(arm("oracle", "m", 0, "PP"), arm("agent:x", "m", 0, "PF"))
	if cs := Compare(results, "base", testCompare); cs != nil {
		t.Errorf("missing baseline: Compare = %v, want nil", cs)
	}
	if cs := Compare(results, "oracle", testCompare); cs != nil {
		t.Errorf("oracle as baseline: Compare = %v, want nil (oracle rows never enter comparisons)", cs)
	}
	if cs := Compare(nil, "base", testCompare); cs != nil {
		t.Errorf("no rows: Compare = %v, want nil", cs)
	}
	cs := Compare(arm("base", "m", 0, "PF"), "base", testCompare)
	if cs == nil || len(cs) != 0 {
		t.Errorf("baseline alone: Compare = %v, want an empty map", cs)
	}
}

func TestCompareDifferentLossesWithholdDeltas(t *testing.T) {
	// The arm lost t1, the baseline lost t2: the pass rates are over
	// different cells, so every unpaired delta is withheld.
	results := concat(
		priced(arm("base", "m", 0, "PEFP"), 1),
		priced(arm("agent:x", "m", 0, "EPPP"), 2),
	)
	c := Compare(results, "base", testCompare)["agent:x"]
	if c.PassRateDelta != nil || c.PassedDelta != nil || c.CostDeltaUSD != nil || c.NormalizedGain != nil || c.NormalizedChange != nil {
		t.Errorf("deltas not withheld: %+v", c)
	}
	if c.Errored != 1 || c.BaselineErrored != 1 {
		t.Errorf("errored = %d, baseline_errored = %d; want 1, 1", c.Errored, c.BaselineErrored)
	}
	m := c.McNemar
	// t1 and t2 are errored in one arm each: excluded; t3 gained, t4 both passed.
	if m.N != 2 || m.NExcluded != 2 || m.NGained != 1 || m.NBothPassed != 1 || m.NLost != 0 {
		t.Errorf("mcnemar = %+v", m)
	}
	eqF(t, "paired_pass_rate_delta", m.PairedPassRateDelta, fptr(0.5))
}

func TestCompareSharedLossesCancel(t *testing.T) {
	// Both arms lost t1: the deltas stand, on the cells both scored.
	results := concat(
		priced(arm("base", "m", 0, "EFFP"), 1),
		priced(arm("agent:x", "m", 0, "EPPP"), 2),
	)
	c := Compare(results, "base", testCompare)["agent:x"]
	eqF(t, "pass_rate_delta", c.PassRateDelta, fptr(0.666667)) // 1 − 1/3, rounded
	if c.PassedDelta == nil || *c.PassedDelta != 2 {
		t.Errorf("passed_delta = %s, want 2", fmtPtr(c.PassedDelta))
	}
	eqF(t, "cost_delta_usd", c.CostDeltaUSD, fptr(4))
	eqF(t, "normalized_gain", c.NormalizedGain, fptr(1))
	eqF(t, "normalized_change", c.NormalizedChange, fptr(1))
	if c.Errored != 1 || c.BaselineErrored != 1 || c.McNemar.NExcluded != 1 || c.McNemar.N != 3 {
		t.Errorf("errored %d/%d, excluded %d, n %d; want 1/1, 1, 3", c.Errored, c.BaselineErrored, c.McNemar.NExcluded, c.McNemar.N)
	}
}

func TestCompareErroredIsMissingNotFail(t *testing.T) {
	// Each way a row can be errored, with an outcome that would otherwise
	// count: metrics.error, metrics.solver_error, outcome "errored".
	base := arm("base", "m", 0, "FFFF")
	a := arm("agent:x", "m", 0, "FFFF")
	a[0].Metrics.Error = true
	a[1].Metrics.SolverError = true
	a[2].Outcome = OutcomeErrored
	c := Compare(concat(base, a), "base", testCompare)["agent:x"]
	if c.Errored != 3 || c.McNemar.N != 1 || c.McNemar.NExcluded != 3 || c.PassRateDelta != nil {
		t.Errorf("errored %d, n %d, excluded %d, delta %s; want 3, 1, 3, null",
			c.Errored, c.McNemar.N, c.McNemar.NExcluded, fmtPtr(c.PassRateDelta))
	}
}

func TestComparePartialRewardIsFail(t *testing.T) {
	base := arm("base", "m", 0, "PP")
	a := arm("agent:x", "m", 0, "PP")
	a[1].Outcome, a[1].Passed, a[1].Reward = OutcomePartial, false, fptr(0.5)
	c := Compare(concat(base, a), "base", testCompare)["agent:x"]
	m := c.McNemar
	if m.NLost != 1 || m.NBothPassed != 1 || m.NExcluded != 0 {
		t.Errorf("partial reward: mcnemar = %+v, want it counted as a fail", m)
	}
	eqF(t, "pass_rate_delta", c.PassRateDelta, fptr(-0.5))
	eqF(t, "normalized_gain", c.NormalizedGain, nil) // baseline at 1: undefined
	eqF(t, "normalized_change", c.NormalizedChange, fptr(-0.5))
}

func TestCompareHolmFamily(t *testing.T) {
	// a: 6 gained → p 0.03125; b: 9 gained, 1 lost → p 0.021484375;
	// c: no discordant pair → p exactly 1, and still in the family.
	base := arm("base", "m", 0, "FFFFFFFFFFPP")
	results := concat(base,
		arm("a", "m", 0, "PPPPPPFFFFPP"),
		arm("b", "m", 0, "PPPPPPPPPFPF"),
		arm("c", "m", 0, "FFFFFFFFFFPP"),
		arm("oracle", "m", 0, "PPPPPPPPPPPP"),
	)
	cs := Compare(results, "base", testCompare)
	eqF(t, "a p_exact", cs["a"].McNemar.PExact, fptr(0.03125))
	eqF(t, "b p_exact", cs["b"].McNemar.PExact, fptr(0.0214844)) // 0.021484375 to 6 significant digits
	eqF(t, "c p_exact", cs["c"].McNemar.PExact, fptr(1))
	// Holm on [0.03125, 0.021484375, 1]: 3·0.021484375 = 0.064453125 for
	// b, max(that, 2·0.03125) for a, max(that, 1·1) for c.
	eqF(t, "a p_adjusted", cs["a"].McNemar.PAdjusted, fptr(0.0644531))
	eqF(t, "b p_adjusted", cs["b"].McNemar.PAdjusted, fptr(0.0644531))
	eqF(t, "c p_adjusted", cs["c"].McNemar.PAdjusted, fptr(1))
	for _, h := range []string{"a", "b", "c"} {
		m := cs[h].McNemar
		if m.Significant == nil || *m.Significant {
			t.Errorf("%s significant = %s, want false in a family of 3", h, fmtPtr(m.Significant))
		}
		if m.CorrectionFamilySize != 3 {
			t.Errorf("%s correction_family_size = %d, want 3 (oracle never counts)", h, m.CorrectionFamilySize)
		}
	}
	if cm := cs["c"].McNemar; cm.N != 12 || cm.PairedPassRateDelta == nil || *cm.PairedPassRateDelta != 0 {
		t.Errorf("c: n %d, delta %s; want 12, 0", cm.N, fmtPtr(cm.PairedPassRateDelta))
	}

	// Without c, a and b are significant: 2·0.021484375 = 0.04296875.
	cs = Compare(concat(base, arm("a", "m", 0, "PPPPPPFFFFPP"), arm("b", "m", 0, "PPPPPPPPPFPF")), "base", testCompare)
	for _, h := range []string{"a", "b"} {
		eqF(t, h+" p_adjusted (2)", cs[h].McNemar.PAdjusted, fptr(0.0429688))
		if s := cs[h].McNemar.Significant; s == nil || !*s {
			t.Errorf("%s significant = %s, want true in a family of 2", h, fmtPtr(s))
		}
	}
}

// TestCompareIdenticalArmStaysInFamily is the input of issue 9, item 1:
// six tasks, baseline `command:false`, arms `command:true` and an arm
// identical to the baseline. The identical arm's exact p is 1, Holm runs
// over both: [0.03125, 1] → [0.0625, 1], and nothing is significant.
func TestCompareIdenticalArmStaysInFamily(t *testing.T) {
	results := concat(
		arm("command:false", "default", 1, "FFFFFF"),
		arm("command:true", "default", 1, "PPPPPP"),
		arm("command:false # same", "default", 1, "FFFFFF"),
	)
	cs := Compare(results, "command:false", testCompare)
	gain, same := cs["command:true"].McNemar, cs["command:false # same"].McNemar
	eqF(t, "true p_exact", gain.PExact, fptr(0.03125))
	eqF(t, "same p_exact", same.PExact, fptr(1))
	eqF(t, "true p_adjusted", gain.PAdjusted, fptr(0.0625))
	eqF(t, "same p_adjusted", same.PAdjusted, fptr(1))
	for name, m := range map[string]McNemar{"true": gain, "same": same} {
		if m.Significant == nil || *m.Significant {
			t.Errorf("%s significant = %s, want false", name, fmtPtr(m.Significant))
		}
		if m.CorrectionFamilySize != 2 {
			t.Errorf("%s correction_family_size = %d, want 2", name, m.CorrectionFamilySize)
		}
	}
	// The intervals keep their width at the edges (Newcombe): six gains
	// give [1 − √2·z²/(6+z²), 1], six agreeing pairs ±z²/(6+z²); the task
	// bootstrap collapses onto the point in both.
	u6 := stats.Z95 * stats.Z95 / (6 + stats.Z95*stats.Z95)
	eqF(t, "true ci_lo", gain.CILo, fptr(round6(1-math.Sqrt2*u6)))
	eqF(t, "true ci_hi", gain.CIHi, fptr(1))
	eqF(t, "same ci_lo", same.CILo, fptr(round6(-u6)))
	eqF(t, "same ci_hi", same.CIHi, fptr(round6(u6)))
	eqF(t, "true bootstrap_ci_lo", gain.BootstrapCILo, fptr(1))
	eqF(t, "same bootstrap_ci_hi", same.BootstrapCIHi, fptr(0))
}

// TestCompareDegeneratePairTables covers the other tables with no
// discordant pair or no pair at all.
func TestCompareDegeneratePairTables(t *testing.T) {
	cases := []struct {
		name, base, arm string
		n               int
		pExact          *float64
		delta           *float64
	}{
		{"all concordant, all passed", "PPPP", "PPPP", 4, fptr(1), fptr(0)},
		{"all concordant, mixed", "PPFF", "PPFF", 4, fptr(1), fptr(0)},
		{"all concordant, all failed", "FFFF", "FFFF", 4, fptr(1), fptr(0)},
		{"every pair lost", "PPPP", "FFFF", 4, fptr(0.125), fptr(-1)},
		{"one pair, the rest errored", "PEEE", "PEEE", 1, fptr(1), fptr(0)},
		{"no pairs: disjoint cells", "PP--", "--PF", 0, nil, nil},
		{"no pairs: every cell errored", "PFPF", "EEEE", 0, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// "other" gains on six tasks of its own, so the family is 2.
			results := concat(arm("base", "m", 0, c.base+"FFFFFF"), arm("x", "m", 0, c.arm+"------"),
				arm("other", "m", 0, "----PPPPPP"))
			// The baseline's extra tasks are t5…t10; "other" covers them.
			cs := Compare(results, "base", testCompare)
			m := cs["x"].McNemar
			if m.N != c.n {
				t.Fatalf("n = %d, want %d (%+v)", m.N, c.n, m)
			}
			eqF(t, "p_exact", m.PExact, c.pExact)
			eqF(t, "paired_pass_rate_delta", m.PairedPassRateDelta, c.delta)
			if c.n == 0 {
				if m.PAdjusted != nil || m.Significant != nil || m.CILo != nil || m.CIHi != nil || m.BootstrapCILo != nil {
					t.Errorf("no pairs: p_adjusted %s, significant %s, ci [%s, %s]; want nulls",
						fmtPtr(m.PAdjusted), fmtPtr(m.Significant), fmtPtr(m.CILo), fmtPtr(m.CIHi))
				}
			} else {
				if m.PAdjusted == nil || *m.PAdjusted < *m.PExact || m.Significant == nil || *m.Significant {
					t.Errorf("p_adjusted %s, significant %s; want ≥ p_exact and false", fmtPtr(m.PAdjusted), fmtPtr(m.Significant))
				}
				if m.CILo == nil || m.CIHi == nil || *m.CIHi-*m.CILo < 0.3 || *m.CILo > *m.PairedPassRateDelta || *m.CIHi < *m.PairedPassRateDelta {
					t.Errorf("ci [%s, %s] around %s: collapsed or misses the estimate", fmtPtr(m.CILo), fmtPtr(m.CIHi), fmtPtr(m.PairedPassRateDelta))
				}
			}
			// Whatever x's table, it counts in other's family: 6 gains,
			// p 0.03125, doubled by Holm.
			o := cs["other"].McNemar
			eqF(t, "other p_adjusted", o.PAdjusted, fptr(0.0625))
			if m.CorrectionFamilySize != 2 || o.CorrectionFamilySize != 2 {
				t.Errorf("correction_family_size %d, %d; want 2", m.CorrectionFamilySize, o.CorrectionFamilySize)
			}
		})
	}
}

func TestComparePseudoReplication(t *testing.T) {
	var results []Result
	for r := 0; r < 3; r++ {
		results = append(results, arm("base", "m", r, "FP")...)
		results = append(results, arm("agent:x", "m", r, "PP")...)
	}
	m := Compare(results, "base", testCompare)["agent:x"].McNemar
	if m.N != 6 || m.NUnits != 2 || !m.PseudoReplicated || m.NGained != 3 {
		t.Errorf("repeats: n %d, n_units %d, pseudo %v, gained %d; want 6, 2, true, 3", m.N, m.NUnits, m.PseudoReplicated, m.NGained)
	}
	// Resampling tasks: t1 always gains, t2 never does, so every resample's
	// delta is the share of t1 draws among two: 0, 0.5 or 1.
	if m.BootstrapCILo == nil || m.BootstrapCIHi == nil || *m.BootstrapCILo != 0 || *m.BootstrapCIHi != 1 {
		t.Errorf("task bootstrap [%s, %s], want [0, 1]", fmtPtr(m.BootstrapCILo), fmtPtr(m.BootstrapCIHi))
	}
	// Newcombe's interval treats the six pairs as independent: narrower
	// than the task bootstrap, which is why the bootstrap is kept.
	lo, hi, _ := stats.NewcombePaired(3, 3, 0, 0, stats.Z95)
	eqF(t, "ci_lo", m.CILo, fptr(round6(lo)))
	eqF(t, "ci_hi", m.CIHi, fptr(round6(hi)))
}

func TestCompareNoPairs(t *testing.T) {
	results := concat(arm("base", "m", 0, "PP--"), arm("agent:x", "m", 0, "--PF"))
	c := Compare(results, "base", CompareOptions{Resamples: 50, Seed: 9})["agent:x"]
	m := c.McNemar
	if m.N != 0 || m.NExcluded != 4 || m.NUnits != 0 || m.PseudoReplicated {
		t.Errorf("disjoint cells: %+v", m)
	}
	if m.PairedPassRateDelta != nil || m.CILo != nil || m.CIHi != nil || m.BootstrapCILo != nil || m.BootstrapCIHi != nil ||
		m.PExact != nil || m.PAdjusted != nil || m.Significant != nil {
		t.Errorf("disjoint cells: statistics not null: %+v", m)
	}
	if m.CorrectionFamilySize != 1 {
		t.Errorf("correction_family_size = %d, want 1", m.CorrectionFamilySize)
	}
	if m.BootstrapResamples != 50 || m.BootstrapSeed != 9 {
		t.Errorf("options not recorded: %d, %d", m.BootstrapResamples, m.BootstrapSeed)
	}
	// Unpaired deltas still stand: no cell was lost to errors.
	eqF(t, "pass_rate_delta", c.PassRateDelta, fptr(-0.5))
}

func TestCompareSingleModelBaselineStandsForEveryModel(t *testing.T) {
	results := concat(
		arm("base", "m0", 0, "PFE"),
		arm("agent:x", "a", 0, "PPE"),
		arm("agent:x", "b", 0, "FPE"),
	)
	c := Compare(results, "base", testCompare)["agent:x"]
	m := c.McNemar
	// Pairs (t1,a) both passed, (t2,a) gained, (t1,b) lost, (t2,b) gained;
	// t3 is errored on both sides under both models.
	if m.N != 4 || m.NBothPassed != 1 || m.NGained != 2 || m.NLost != 1 || m.NExcluded != 2 {
		t.Errorf("mcnemar = %+v", m)
	}
	if m.NUnits != 2 || !m.PseudoReplicated {
		t.Errorf("n_units %d, pseudo %v; want 2, true", m.NUnits, m.PseudoReplicated)
	}
	if c.BaselineErrored != 2 || c.Errored != 2 {
		t.Errorf("errored %d, baseline_errored %d; want 2, 2 (baseline replicated per arm model)", c.Errored, c.BaselineErrored)
	}
	if c.PassedDelta == nil || *c.PassedDelta != 1 {
		t.Errorf("passed_delta = %s, want 3 − 2 = 1", fmtPtr(c.PassedDelta))
	}
	eqF(t, "pass_rate_delta", c.PassRateDelta, fptr(0.25))
}

func TestCompareMultiModelBaselinePairsExactly(t *testing.T) {
	results := concat(
		arm("base", "a", 0, "FF"),
		arm("base", "b", 0, "FF"),
		arm("agent:x", "a", 0, "PP"),
		arm("agent:x", "c", 0, "PP"),
	)
	m := Compare(results, "base", testCompare)["agent:x"].McNemar
	// Only model a pairs; (·,b) baseline-only and (·,c) arm-only cells are excluded.
	if m.N != 2 || m.NGained != 2 || m.NExcluded != 4 {
		t.Errorf("mcnemar = %+v, want n 2, gained 2, excluded 4", m)
	}
}

func TestCompareLastAttemptWins(t *testing.T) {
	base := arm("base", "m", 0, "F")
	old := row("t1", "agent:x", "m", 0, OutcomeErrored)
	retry := row("t1", "agent:x", "m", 0, OutcomePassed)
	retry.Attempt = 2
	c := Compare([]Result{retry, base[0], old}, "base", testCompare)["agent:x"]
	if c.Errored != 0 || c.McNemar.NGained != 1 || c.McNemar.N != 1 {
		t.Errorf("attempt 2 not used: errored %d, mcnemar %+v", c.Errored, c.McNemar)
	}
}

func TestCompareCostDelta(t *testing.T) {
	base := priced(arm("base", "m", 0, "PF"), 0.5)
	a := priced(arm("agent:x", "m", 0, "PP"), 0.75)
	c := Compare(concat(base, a), "base", testCompare)["agent:x"]
	eqF(t, "cost_delta_usd", c.CostDeltaUSD, fptr(0.5))
	// An unpriced baseline gives no delta.
	c = Compare(concat(arm("base", "m", 0, "PF"), a), "base", testCompare)["agent:x"]
	eqF(t, "cost_delta_usd unpriced baseline", c.CostDeltaUSD, nil)
	// A partly priced arm still has a total, so the delta stands.
	a[0].Metrics.CostUSD = nil
	c = Compare(concat(base, a), "base", testCompare)["agent:x"]
	eqF(t, "cost_delta_usd partly priced", c.CostDeltaUSD, fptr(-0.25))
}

func TestCostOf(t *testing.T) {
	usd := func(rows []Result, costs ...float64) []Result {
		out := make([]Result, len(rows))
		for i, r := range rows {
			if i < len(costs) && !math.IsNaN(costs[i]) {
				r.Metrics.CostUSD = fptr(costs[i])
			}
			out[i] = r
		}
		return out
	}
	nan := math.NaN()
	cases := []struct {
		name           string
		rows           []Result
		total, perPass *float64
	}{
		{"no rows", nil, nil, nil},
		{"none priced", arm("h", "m", 0, "PF"), nil, nil},
		{"all priced", usd(arm("h", "m", 0, "PFP"), 1, 2, 3), fptr(6), fptr(3)},
		{"errored row priced counts", usd(arm("h", "m", 0, "PE"), 1, 2), fptr(3), fptr(3)},
		{"errored row unpriced blocks per-pass", usd(arm("h", "m", 0, "PE"), 1, nan), fptr(1), nil},
		{"partly priced", usd(arm("h", "m", 0, "PP"), 1, nan), fptr(1), nil},
		{"no pass", usd(arm("h", "m", 0, "FF"), 1, 2), fptr(3), nil},
		{"errored passed flag ignored", func() []Result {
			rs := usd(arm("h", "m", 0, "FE"), 1, 2)
			rs[1].Passed = true
			return rs
		}(), fptr(3), nil},
	}
	for _, c := range cases {
		got := CostOf(c.rows)
		eqF(t, c.name+" total", got.TotalCostUSD, c.total)
		eqF(t, c.name+" per pass", got.CostPerPassUSD, c.perPass)
	}
}

// TestCostOfObservedWithCellsThatNeverRan: an arm behind the model
// gateway keeps its observed cost when some of its cells errored before
// their sandbox started (cancelled while queued): they spent nothing, an
// observed 0, so the total and the cost per pass stand. A row with no
// observed usage that reports a cost of its own, or that did not error,
// is a cell the gateway did not see: the arm is costed from what the
// agents reported.
func TestCostOfObservedWithCellsThatNeverRan(t *testing.T) {
	obs := func(rows []Result, costs ...float64) []Result {
		for i := range costs {
			rows[i].Metrics.UsageObserved = &UsageObserved{Requests: 2, CostUSD: fptr(costs[i])}
		}
		return rows
	}
	rows := obs(arm("h", "m", 0, "PPE"), 0.5, 0.25)
	c := CostOf(rows)
	if c.Source != "observed" || c.TotalCostUSD == nil || *c.TotalCostUSD != 0.75 || c.CostPerPassUSD == nil || *c.CostPerPassUSD != 0.375 {
		t.Errorf("an arm with a cell cancelled before its sandbox: %+v, want observed 0.75, 0.375 a pass", c)
	}
	if got := RowCost(rows[2], c.Source); got == nil || *got != 0 {
		t.Errorf("the cancelled cell's observed cost: %v, want 0", got)
	}

	rows = obs(arm("h", "m", 0, "PPE"), 0.5, 0.25)
	rows[2].Metrics.CostUSD = fptr(9)
	if c := CostOf(rows); c.Source != "reported" || *c.TotalCostUSD != 9 {
		t.Errorf("an errored row with a reported cost and no observed usage: %+v, want the reported 9", c)
	}
	rows = obs(arm("h", "m", 0, "PPF"), 0.5, 0.25)
	if c := CostOf(rows); c.Source == "observed" {
		t.Errorf("a scored row without observed usage: %+v, want not observed", c)
	}
	if c := CostOf(arm("h", "m", 0, "EE")); c.Source != "" || c.TotalCostUSD != nil {
		t.Errorf("an arm of errored rows and no observed usage at all: %+v, want no cost", c)
	}
}

func TestCostOfOrderIndependent(t *testing.T) {
	rows := arm("h", "m", 0, "PPPPPPPPPPPPPPPPPPPP")
	for i := range rows {
		rows[i].Metrics.CostUSD = fptr(0.1 * float64(i+1) / 3)
	}
	want := *CostOf(rows).TotalCostUSD
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		if got := *CostOf(rows).TotalCostUSD; math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("total depends on row order: %v vs %v", got, want)
		}
	}
}

func TestCompareDeterministicBytes(t *testing.T) {
	var results []Result
	for r := 0; r < 3; r++ {
		results = append(results, priced(arm("base", "m", r, "PFFPFEFPFF"), 0.013)...)
		results = append(results, priced(arm("agent:x", "m", r, "PPFPPEPPFP"), 0.021)...)
		results = append(results, arm("agent:y", "m", r, "FFPPFEFFPF")...)
		results = append(results, arm("oracle", "m", r, "PPPPPPPPPP")...)
	}
	first, err := json.Marshal(Compare(results, "base", testCompare))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 5 {
		rng.Shuffle(len(results), func(i, j int) { results[i], results[j] = results[j], results[i] })
		again, err := json.Marshal(Compare(results, "base", testCompare))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("bytes differ between calls:\n%s\n%s", first, again)
		}
	}
	// Every float is rounded to at most 6 decimals (p-values to 6
	// significant digits): no long binary expansions leak into the bytes.
	var decoded map[string]map[string]any
	if err := json.Unmarshal(first, &decoded); err != nil {
		t.Fatal(err)
	}
	for h, c := range decoded {
		m := c["mcnemar"].(map[string]any)
		for _, k := range []string{"ci_lo", "ci_hi", "paired_pass_rate_delta"} {
			checkRounded(t, h+"."+k, m[k])
		}
		for _, k := range []string{"pass_rate_delta", "cost_delta_usd", "normalized_gain", "normalized_change"} {
			checkRounded(t, h+"."+k, c[k])
		}
	}
}

func checkRounded(t *testing.T, name string, v any) {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		return
	}
	if math.Abs(f*1e6-math.Round(f*1e6)) > 1e-6 {
		t.Errorf("%s = %v is not rounded to 6 decimals", name, f)
	}
}

func TestCompareOutputValidates(t *testing.T) {
	// Comparisons with withheld deltas, no-verdict nulls and replicated
	// pairs must all satisfy the task_runs.v1 schema.
	var results []Result
	for r := 0; r < 2; r++ {
		results = append(results, priced(arm("base", "m", r, "PFFPFEFPFF"), 0.013)...)
		results = append(results, priced(arm("agent:x", "m", r, "PPFPPEPPFP"), 0.021)...)
		results = append(results, arm("agent:y", "m", r, "FFPPFEFFPF")...)
		results = append(results, arm("agent:z", "m", r, "FFPPF--FPF")...)
		results = append(results, arm("agent:w", "m", r, "PFFPFEFPFF")...)
	}
	run := RunInfo{ID: "01J0000000000000000000000R", TasksRoot: "/tasks", Harnesses: []string{"base", "agent:w", "agent:x", "agent:y", "agent:z"},
		Models: []string{"m"}, Repeats: 2, BaselineHarness: "base", StartedAt: "2024-01-01T00:00:00Z", ProctorVersion: "dev"}
	a := &Artifact{Schema: SchemaVersion, Run: run, Results: results,
		Summary: Summary{PerHarness: Summarize(results), Comparisons: Compare(results, "base", testCompare)}}
	if _, err := Marshal(a); err != nil {
		t.Fatalf("comparisons do not validate: %v", err)
	}
	if z := a.Summary.Comparisons["agent:z"]; z.PassRateDelta != nil {
		t.Errorf("agent:z lost no cell the baseline lost, yet its delta = %v", *z.PassRateDelta)
	}
	if w := a.Summary.Comparisons["agent:w"].McNemar; w.PExact == nil || *w.PExact != 1 || w.NGained+w.NLost != 0 {
		t.Errorf("agent:w mirrors the baseline, yet p_exact = %s", fmtPtr(w.PExact))
	}
}

// TestCompareUnderflowedPValue: 1100 gained pairs and none lost give an
// exact p of 2^-1099 ≈ 1.5e-331, below the smallest float64; it was
// stored as 0. It is stored as PFloor with p_exact_underflow and its
// log10 beside it; Holm's step-down keeps its magnitude (p_adjusted
// 2·p, log10 -330.5) and gives a normal member of the family its usual
// value; the artifact validates and the report prints "< 1e-300".
func TestCompareUnderflowedPValue(t *testing.T) {
	n := 1100
	results := concat(arm("base", "m", 0, strings.Repeat("F", n)), arm("x", "m", 0, strings.Repeat("P", n)),
		arm("y", "m", 0, strings.Repeat("P", 6)+strings.Repeat("F", n-6)))
	cs := Compare(results, "base", testCompare)
	x, y := cs["x"].McNemar, cs["y"].McNemar
	lp := -1099 * math.Log10(2)
	if x.PExact == nil || *x.PExact != PFloor || !x.PExactUnderflow || x.PExactLog10 == nil || math.Abs(*x.PExactLog10-round6(lp)) > 1e-9 {
		t.Errorf("x: p_exact %s, underflow %v, log10 %s; want %g, true, %.6f", fmtPtr(x.PExact), x.PExactUnderflow, fmtPtr(x.PExactLog10), PFloor, lp)
	}
	adj := lp + math.Log10(2)
	if x.PAdjusted == nil || *x.PAdjusted != PFloor || !x.PAdjustedUnderflow || x.PAdjustedLog10 == nil ||
		math.Abs(*x.PAdjustedLog10-round6(adj)) > 1e-9 || x.Significant == nil || !*x.Significant {
		t.Errorf("x: p_adjusted %s, underflow %v, log10 %s, significant %s; want %g, true, %.6f, true",
			fmtPtr(x.PAdjusted), x.PAdjustedUnderflow, fmtPtr(x.PAdjustedLog10), fmtPtr(x.Significant), PFloor, adj)
	}
	eqF(t, "y p_exact", y.PExact, fptr(0.03125))
	eqF(t, "y p_adjusted", y.PAdjusted, fptr(0.03125))
	if y.PExactUnderflow || y.PAdjustedUnderflow || y.PExactLog10 != nil || y.PAdjustedLog10 != nil {
		t.Errorf("y is a normal p-value, yet flagged: %+v", y)
	}

	a := Build(RunInfo{ID: "r", Harnesses: []string{"base", "x", "y"}, Repeats: 1, BaselineHarness: "base", StartedAt: "2026-01-01T00:00:00Z"},
		results, testBuild)
	b, err := Marshal(a)
	if err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	if !bytes.Contains(b, []byte(`"p_exact": 1e-300,`)) || !bytes.Contains(b, []byte(`"p_exact_underflow": true`)) {
		t.Errorf("artifact's p_exact:\n%s", b[bytes.Index(b, []byte(`"p_exact"`)):][:200])
	}
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if s := md.String(); !strings.Contains(s, "| < 1e-300 | < 1e-300 | yes |") || !strings.Contains(s, "| 0.0312 | 0.0312 | yes |") {
		t.Errorf("report's p-values:\n%s", s)
	}
}

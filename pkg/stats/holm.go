package stats

import (
	"math"
	"sort"
)

// Holm returns Holm–Bonferroni step-down adjusted p-values (Holm 1979), as
// statsmodels.stats.multitest.multipletests(method="holm") computes them:
// with the m raw p-values sorted ascending, p_adj(i) = max over j ≤ i of
// min(1, (m − j)·p(j)) for 0-based rank j.
//
// The result has the input's length and order, is ≥ the raw value,
// monotone in the raw value and capped at 1. Ties keep their input order.
// A NaN input stays NaN in the output and is left out of the family (m
// counts only finite inputs). Holm(nil) returns an empty, non-nil slice.
func Holm(p []float64) []float64 {
	out := make([]float64, len(p))
	idx := make([]int, 0, len(p))
	for i, v := range p {
		if math.IsNaN(v) {
			out[i] = math.NaN()
			continue
		}
		idx = append(idx, i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] < p[idx[b]] })
	m := len(idx)
	running := 0.0
	for rank, i := range idx {
		adj := min(1, float64(m-rank)*p[i])
		running = max(running, adj)
		out[i] = running
	}
	return out
}

// HolmLog10 is Holm on log10 p-values: the same step-down, adjusted(i) =
// max over j ≤ i of min(0, log10(m − j) + lp(j)), so p-values below the
// smallest float64 (a McNemarExactLog10 of -330) keep their order and
// magnitude. The result has the input's length and order and is ≤ 0; a
// NaN stays NaN and is left out of the family. Where every p is a normal
// float64 it is log10 of Holm's result, up to rounding.
func HolmLog10(lp []float64) []float64 {
	out := make([]float64, len(lp))
	idx := make([]int, 0, len(lp))
	for i, v := range lp {
		if math.IsNaN(v) {
			out[i] = math.NaN()
			continue
		}
		idx = append(idx, i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return lp[idx[a]] < lp[idx[b]] })
	m := len(idx)
	running := math.Inf(-1)
	for rank, i := range idx {
		adj := min(0, math.Log10(float64(m-rank))+lp[i])
		running = max(running, adj)
		out[i] = running
	}
	return out
}

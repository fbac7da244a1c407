package stats

import "math"

// NewcombePaired returns Newcombe's hybrid score interval [lo, hi] for the
// difference of two paired proportions (Newcombe, R. G. (1998). Improved
// confidence intervals for the difference between binomial proportions
// based on paired data. Statistics in Medicine 17, 2635–2650; method 10),
// at normal quantile z (use Z95 for 95 %).
//
// The paired table counts n units each classified twice: both (first and
// second passed), gained (first passed, second failed), lost (first
// failed, second passed) and neither (both failed). The difference is
// θ = p1 − p2 = (gained − lost)/n with p1 = (both+gained)/n and
// p2 = (both+lost)/n. With [l1, u1] and [l2, u2] the Wilson score
// intervals of p1 and p2 (Wilson),
//
//	lo = θ − √((p1−l1)² − 2φ(p1−l1)(u2−p2) + (u2−p2)²)
//	hi = θ + √((p2−l2)² − 2φ(p2−l2)(u1−p1) + (u1−p1)²)
//
// where φ estimates the correlation between p1 and p2: with
// A = both·neither − gained·lost and the four margins e, f, g, h of the
// table, φ = (A − n/2)/√(efgh) when A > n/2, 0 when 0 ≤ A ≤ n/2, and
// A/√(efgh) when A < 0; φ = 0 when a margin is 0. This is the φ of the
// paper, as the R packages contingencytables
// (Newcombe_square_and_add_CI_paired_2x2, Fagerland, Lydersen & Laake
// 2017) and biostatUZH (confIntPairedProportion) compute it.
//
// Unlike a percentile bootstrap, the interval keeps its width at the
// edges: six pairs that all agree give about ±0.39, six gains about
// [0.45, 1]. Bounds are in [−1, 1] (clamped against rounding) and contain
// θ. ok is false (lo, hi 0) when n is 0, a count is negative, or z is
// negative or not finite.
func NewcombePaired(both, gained, lost, neither int, z float64) (lo, hi float64, ok bool) {
	if both < 0 || gained < 0 || lost < 0 || neither < 0 || !(z >= 0) || math.IsInf(z, 0) {
		return 0, 0, false
	}
	n := both + gained + lost + neither
	if n == 0 {
		return 0, 0, false
	}
	nf := float64(n)
	x1, x2 := both+gained, both+lost // first and second passes
	p1, p2 := float64(x1)/nf, float64(x2)/nf
	l1, u1, _ := Wilson(x1, n, z)
	l2, u2, _ := Wilson(x2, n, z)

	phi := 0.0
	if e, f, g, h := x1, lost+neither, x2, gained+neither; e > 0 && f > 0 && g > 0 && h > 0 {
		a := float64(both)*float64(neither) - float64(gained)*float64(lost)
		den := math.Sqrt(float64(e) * float64(f) * float64(g) * float64(h))
		switch {
		case a > nf/2:
			phi = (a - nf/2) / den
		case a < 0:
			phi = a / den
		}
	}
	theta := p1 - p2
	dl1, du2 := p1-l1, u2-p2
	dl2, du1 := p2-l2, u1-p1
	lo = theta - math.Sqrt(max(0, dl1*dl1-2*phi*dl1*du2+du2*du2))
	hi = theta + math.Sqrt(max(0, dl2*dl2-2*phi*dl2*du1+du1*du1))
	return max(-1, lo), min(1, hi), true
}

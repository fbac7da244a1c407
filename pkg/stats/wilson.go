package stats

import "math"

// Z95 is the two-sided 95 % standard normal quantile, Φ⁻¹(0.975), as
// scipy.stats.norm.ppf(0.975) gives it.
const Z95 = 1.959963984540054

// Wilson returns the Wilson score interval [lo, hi] for successes out of n
// trials at normal quantile z (use Z95 for 95 %), as
// statsmodels.stats.proportion.proportion_confint(method="wilson")
// computes it.
//
// Bounds are fractions in [0,1], clamped exactly: 0 successes give lo == 0
// and n successes give hi == 1. ok is false (and lo, hi are 0) when n <= 0,
// when successes is outside [0, n], or when z is negative or not finite.
func Wilson(successes, n int, z float64) (lo, hi float64, ok bool) {
	if n <= 0 || successes < 0 || successes > n || !(z >= 0) || math.IsInf(z, 0) {
		return 0, 0, false
	}
	nf := float64(n)
	p := float64(successes) / nf
	z2 := z * z
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := z / denom * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	lo, hi = center-half, center+half
	if successes == 0 || lo < 0 {
		lo = 0
	}
	if successes == n || hi > 1 {
		hi = 1
	}
	return lo, hi, true
}

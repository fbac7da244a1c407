package stats

import (
	"math"
	"math/big"
)

// exactLimit is the largest number of discordant pairs for which
// McNemarExact sums the binomial tail in exact integer arithmetic; above it
// the tail is summed in log space (relative error below 1e-9).
const exactLimit = 20000

// McNemarExact returns the two-sided exact McNemar p-value for gained
// (arm passed, baseline failed) and lost (arm failed, baseline passed)
// discordant pairs: under H0 the discordant pairs are b+c Bernoulli(0.5)
// trials, and p = min(1, 2·P(X ≤ min(b, c))) with X ~ Binomial(b+c, 0.5),
// as statsmodels.stats.contingency_tables.mcnemar(exact=True) and
// scipy.stats.binomtest(min(b,c), b+c, 0.5) compute it.
//
// p is in [0, 1]; it is 0 only where the true value is below the smallest
// float64 (about 4.9e-324: 0 vs 1100 discordant pairs gives 2^-1099), and
// McNemarExactLog10 gives its logarithm then. With no discordant pair (gained = lost = 0) p is exactly
// 1, as statsmodels' mcnemar(exact=True) gives it (2·P(X ≤ 0) with
// X ~ Binomial(0, ½) is 2, capped at 1): pairs that all agree are no
// evidence of a difference, which is a verdict, not a missing one. ok is
// false (and p is 0) only when either count is negative.
//
// Up to 20000 discordant pairs the tail is an exact rational rounded once to
// float64; above that it is summed in log space from lgamma, so the result
// stays finite and accurate for any count.
func McNemarExact(gained, lost int) (p float64, ok bool) {
	if gained < 0 || lost < 0 {
		return 0, false
	}
	if gained+lost == 0 {
		return 1, true
	}
	n := gained + lost
	k := min(gained, lost)
	if 2*k >= n-1 {
		// P(X ≤ k) ≥ 1/2 whenever k ≥ (n-1)/2, so the doubled tail is ≥ 1.
		return 1, true
	}
	var tail float64
	if n <= exactLimit {
		tail = binomTailExact(n, k)
	} else {
		tail = binomTailLog(n, k)
	}
	return min(1, 2*tail), true
}

// McNemarExactLog10 returns log10 of McNemarExact's p-value, finite for
// any counts, also where p itself is below the smallest float64 (0 vs
// 1100 discordant pairs: -1099·log10 2 ≈ -330.8). It is in (-∞, 0]; ok
// is false (and the value 0) only when either count is negative. Up to
// 20000 discordant pairs the tail is the exact rational, whose log is
// taken once; above that it is summed in log space as McNemarExact does.
func McNemarExactLog10(gained, lost int) (log10p float64, ok bool) {
	if gained < 0 || lost < 0 {
		return 0, false
	}
	n := gained + lost
	k := min(gained, lost)
	if n == 0 || 2*k >= n-1 {
		return 0, true // p = 1, as McNemarExact
	}
	var ln float64 // ln P(X ≤ k)
	if n <= exactLimit {
		ln = lnBig(binomTailSum(n, k)) - float64(n)*math.Ln2
	} else {
		ln = binomTailLn(n, k)
	}
	return min(0, (ln+math.Ln2)/math.Ln10), true
}

// lnBig returns the natural log of x > 0 as a float64, for any size of x:
// x = mant·2^exp with mant in [0.5, 1).
func lnBig(x *big.Int) float64 {
	mant := new(big.Float)
	exp := new(big.Float).SetInt(x).MantExp(mant)
	m, _ := mant.Float64()
	return math.Log(m) + float64(exp)*math.Ln2
}

// binomTailExact returns P(X ≤ k) for X ~ Binomial(n, 1/2), computed as
// Σ_{i≤k} C(n,i) / 2^n in integers and rounded once to float64.
func binomTailExact(n, k int) float64 {
	den := new(big.Int).Lsh(big.NewInt(1), uint(n))
	f, _ := new(big.Rat).SetFrac(binomTailSum(n, k), den).Float64()
	return f
}

// binomTailSum returns Σ_{i≤k} C(n,i).
func binomTailSum(n, k int) *big.Int {
	sum := new(big.Int)
	c := big.NewInt(1) // C(n, 0)
	for i := 0; i <= k; i++ {
		if i > 0 {
			c.Mul(c, big.NewInt(int64(n-i+1)))
			c.Quo(c, big.NewInt(int64(i)))
		}
		sum.Add(sum, c)
	}
	return sum
}

// binomTailLog returns P(X ≤ k) for X ~ Binomial(n, 1/2) with k < n/2: the
// largest term C(n,k)/2^n comes from lgamma, and the smaller ones follow by
// the ratio C(n,i-1)/C(n,i) = i/(n-i+1), so nothing under- or overflows
// before the final exp.
func binomTailLog(n, k int) float64 { return math.Exp(binomTailLn(n, k)) }

// binomTailLn is binomTailLog's natural logarithm, before the exp that
// can underflow.
func binomTailLn(n, k int) float64 {
	lgN, _ := math.Lgamma(float64(n) + 1)
	lgK, _ := math.Lgamma(float64(k) + 1)
	lgNK, _ := math.Lgamma(float64(n-k) + 1)
	logTop := lgN - lgK - lgNK - float64(n)*math.Ln2
	sum, term := 1.0, 1.0
	for i := k; i > 0; i-- {
		term *= float64(i) / float64(n-i+1)
		sum += term
		if term < sum*1e-17 {
			break
		}
	}
	return logTop + math.Log(sum)
}

package stats

import (
	"math"
	"testing"
)

func TestMcNemarExactReference(t *testing.T) {
	// Reference values: scipy 1.10 binomtest(min(b,c), b+c, 0.5).pvalue and
	// statsmodels 0.13 mcnemar(exact=True).
	cases := []struct {
		gained, lost int
		p            float64
	}{
		{6, 0, 0.03125},
		{4, 0, 0.125},
		{5, 2, 0.453125},
		{3, 3, 1.0},
		{9, 1, 0.021484375},
		{0, 1, 1.0},
		// No discordant pair: statsmodels mcnemar([[a, 0], [0, d]],
		// exact=True).pvalue is min(1, 2·binom.cdf(0, 0, 0.5)) = 1.
		{0, 0, 1.0},
	}
	for _, c := range cases {
		p, ok := McNemarExact(c.gained, c.lost)
		if !ok {
			t.Fatalf("McNemarExact(%d, %d): ok = false", c.gained, c.lost)
		}
		if math.Abs(p-c.p) > 1e-12 {
			t.Errorf("McNemarExact(%d, %d) = %.12f, want %.12f", c.gained, c.lost, p, c.p)
		}
	}
}

func TestMcNemarNegativeCounts(t *testing.T) {
	for _, c := range [][2]int{{-1, 3}, {3, -1}, {-1, 0}} {
		if p, ok := McNemarExact(c[0], c[1]); ok || p != 0 {
			t.Errorf("McNemarExact(%d, %d) = %v, %v; want 0, false", c[0], c[1], p, ok)
		}
	}
}

func TestMcNemarProperties(t *testing.T) {
	for b := 0; b <= 60; b++ {
		for c := 0; c <= 60; c++ {
			p, ok := McNemarExact(b, c)
			q, _ := McNemarExact(c, b)
			if !ok || !(p > 0 && p <= 1) {
				t.Fatalf("McNemarExact(%d, %d) = %v, %v; want p in (0,1]", b, c, p, ok)
			}
			if p != q {
				t.Fatalf("McNemarExact not symmetric: (%d,%d)=%v, (%d,%d)=%v", b, c, p, c, b, q)
			}
			// Moving one discordant pair from the smaller to the larger
			// side can only make the evidence stronger.
			if b < c && b > 0 {
				r, _ := McNemarExact(b-1, c+1)
				if r > p {
					t.Fatalf("McNemarExact(%d, %d) = %v > McNemarExact(%d, %d) = %v", b-1, c+1, r, b, c, p)
				}
			}
		}
	}
}

func TestMcNemarLargeCounts(t *testing.T) {
	for _, c := range [][2]int{{5000, 4800}, {4800, 5000}, {12000, 9000}, {100000, 99000}, {1000000, 1}, {30000, 30000}} {
		p, ok := McNemarExact(c[0], c[1])
		if !ok || math.IsNaN(p) || math.IsInf(p, 0) || p < 0 || p > 1 {
			t.Errorf("McNemarExact(%d, %d) = %v, %v; want a finite p in [0,1]", c[0], c[1], p, ok)
		}
	}
	// Reference values: exact rational arithmetic (Python fractions and
	// math.comb) rounded to float64. (12000, 9000) takes the log-space path.
	for _, c := range []struct {
		gained, lost int
		p, relTol    float64
	}{
		{5000, 4800, 0.04440414879984629, 1e-14},
		{30, 10, 0.0022214337732293643, 1e-14},
		{12000, 9000, 1.841925310561535e-95, 1e-9},
	} {
		p, _ := McNemarExact(c.gained, c.lost)
		if math.Abs(p-c.p)/c.p > c.relTol {
			t.Errorf("McNemarExact(%d, %d) = %v, want %v", c.gained, c.lost, p, c.p)
		}
	}
}

func TestBinomTailLogMatchesExact(t *testing.T) {
	// The log-space path must agree with exact arithmetic where both run.
	for _, c := range [][2]int{{10, 2}, {100, 30}, {1000, 450}, {5000, 2400}, {9800, 4800}, {20000, 9700}, {20000, 9000}} {
		n, k := c[0], c[1]
		ex := binomTailExact(n, k)
		lg := binomTailLog(n, k)
		if ex == 0 {
			t.Fatalf("binomTailExact(%d, %d) underflowed", n, k)
		}
		if rel := math.Abs(lg-ex) / ex; rel > 1e-9 {
			t.Errorf("tail(%d, %d): log %v vs exact %v (relative error %g)", n, k, lg, ex, rel)
		}
	}
}

func TestMcNemarAcrossExactLimit(t *testing.T) {
	// Just below and just above the switch to log space the p-values must
	// stay continuous and ordered.
	below, _ := McNemarExact(exactLimit/2+150, exactLimit/2-150)
	above, _ := McNemarExact(exactLimit/2+151, exactLimit/2-150)
	if !(above < below) || below/above > 1.1 {
		t.Errorf("p around the exact limit: %v then %v", below, above)
	}
}

func TestMcNemarExactLog10(t *testing.T) {
	// 0 vs 1100 discordant pairs: p = 2·2^-1100 = 2^-1099 ≈ 1.5e-331,
	// below the smallest float64, so McNemarExact underflows to 0; its
	// log10 is -1099·log10(2) exactly. (1, 30000) takes the log-space
	// path: p = 2·(1+30001)·2^-30001 (exact rational, Python fractions).
	for _, c := range []struct {
		gained, lost int
		log10p       float64
	}{
		{0, 1100, -1099 * math.Log10(2)},
		{1100, 0, -1099 * math.Log10(2)},
		{2, 2000, math.Log10(2) + math.Log10(1+2002+2002*2001/2) - 2002*math.Log10(2)},
		{1, 30001, math.Log10(2) + math.Log10(30003) - 30002*math.Log10(2)},
		{0, 0, 0},
		{3, 3, 0},
	} {
		lp, ok := McNemarExactLog10(c.gained, c.lost)
		if !ok || math.Abs(lp-c.log10p) > 1e-9*max(1, math.Abs(c.log10p)) {
			t.Errorf("McNemarExactLog10(%d, %d) = %v, %v; want %v", c.gained, c.lost, lp, ok, c.log10p)
		}
	}
	if p, _ := McNemarExact(0, 1100); p != 0 {
		t.Errorf("McNemarExact(0, 1100) = %v; the float64 underflows to 0", p)
	}
	// Where p is a normal float64 the two agree.
	for _, c := range [][2]int{{6, 0}, {9, 1}, {5, 2}, {30, 10}, {5000, 4800}, {12000, 9000}, {0, 900}} {
		p, _ := McNemarExact(c[0], c[1])
		lp, _ := McNemarExactLog10(c[0], c[1])
		if math.Abs(lp-math.Log10(p)) > 1e-9*max(1, math.Abs(lp)) {
			t.Errorf("McNemarExactLog10(%d, %d) = %v, log10 of McNemarExact %v", c[0], c[1], lp, math.Log10(p))
		}
	}
	if _, ok := McNemarExactLog10(-1, 2); ok {
		t.Error("McNemarExactLog10(-1, 2): ok")
	}
}

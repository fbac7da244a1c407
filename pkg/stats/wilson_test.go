package stats

import (
	"math"
	"testing"
)

func TestWilsonReference(t *testing.T) {
	// Reference values: statsmodels 0.13 proportion_confint(method="wilson").
	cases := []struct {
		k, n   int
		lo, hi float64
	}{
		{7, 10, 0.396778, 0.892209},
		{0, 5, 0, 0.434482},
		{5, 5, 0.565518, 1},
		{1, 3, 0.061492, 0.792340},
		{12, 40, 0.180748, 0.454300},
	}
	for _, c := range cases {
		lo, hi, ok := Wilson(c.k, c.n, Z95)
		if !ok {
			t.Fatalf("Wilson(%d, %d): ok = false", c.k, c.n)
		}
		if math.Abs(lo-c.lo) > 1e-6 || math.Abs(hi-c.hi) > 1e-6 {
			t.Errorf("Wilson(%d, %d) = [%.7f, %.7f], want [%.6f, %.6f]", c.k, c.n, lo, hi, c.lo, c.hi)
		}
	}
}

func TestWilsonExactBounds(t *testing.T) {
	for n := 1; n <= 200; n++ {
		lo, _, _ := Wilson(0, n, Z95)
		if lo != 0 {
			t.Fatalf("Wilson(0, %d) lo = %v, want exactly 0", n, lo)
		}
		_, hi, _ := Wilson(n, n, Z95)
		if hi != 1 {
			t.Fatalf("Wilson(%d, %d) hi = %v, want exactly 1", n, n, hi)
		}
	}
}

func TestWilsonUndefined(t *testing.T) {
	for _, c := range []struct {
		k, n int
		z    float64
	}{{0, 0, Z95}, {1, 0, Z95}, {-1, 5, Z95}, {6, 5, Z95}, {1, 5, math.NaN()}, {1, 5, -1}, {1, 5, math.Inf(1)}} {
		if lo, hi, ok := Wilson(c.k, c.n, c.z); ok || lo != 0 || hi != 0 {
			t.Errorf("Wilson(%d, %d, %v) = %v, %v, %v; want 0, 0, false", c.k, c.n, c.z, lo, hi, ok)
		}
	}
}

func TestWilsonContainsPointEstimate(t *testing.T) {
	for n := 1; n <= 300; n++ {
		for k := 0; k <= n; k++ {
			lo, hi, ok := Wilson(k, n, Z95)
			p := float64(k) / float64(n)
			if !ok || lo < 0 || hi > 1 || lo > p || hi < p || lo >= hi {
				t.Fatalf("Wilson(%d, %d) = [%v, %v] ok=%v does not contain %v inside [0,1]", k, n, lo, hi, ok, p)
			}
		}
	}
}

func TestWilsonZeroZ(t *testing.T) {
	// With z = 0 the interval collapses onto the point estimate.
	lo, hi, ok := Wilson(3, 10, 0)
	if !ok || math.Abs(lo-0.3) > 1e-15 || math.Abs(hi-0.3) > 1e-15 {
		t.Errorf("Wilson(3, 10, 0) = [%v, %v] ok=%v, want [0.3, 0.3]", lo, hi, ok)
	}
}

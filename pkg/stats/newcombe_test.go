package stats

import (
	"math"
	"testing"
)

func TestNewcombePairedPublished(t *testing.T) {
	// Published reference: the R package contingencytables (Fagerland,
	// Lydersen & Laake, "Statistical Analysis of Contingency Tables", 2017,
	// chapter 8), tests/testthat/test-ch8.R: for Cavo et al. (2012),
	// n = [[59, 6], [16, 80]], Newcombe_square_and_add_CI_paired_2x2 prints
	// "estimate = -0.0621 (95% CI -0.1186 to -0.0046)".
	lo, hi, ok := NewcombePaired(59, 6, 16, 80, Z95)
	if !ok {
		t.Fatal("ok = false")
	}
	if math.Abs(lo-(-0.1186)) > 5e-5 || math.Abs(hi-(-0.0046)) > 5e-5 {
		t.Errorf("NewcombePaired(Cavo) = [%.5f, %.5f], want [-0.1186, -0.0046] to 4 decimals", lo, hi)
	}
}

// newcombeRef is an independent transcription of Newcombe (1998), method
// 10, written from the paper's formulas rather than from NewcombePaired:
// each Wilson limit is a root of (n+z²)p² − (2x+z²)p + x²/n = 0, solved
// by the quadratic formula.
func newcombeRef(a, b, c, d int, z float64) (float64, float64) {
	n := float64(a + b + c + d)
	wilson := func(x float64) (float64, float64) {
		qa, qb, qc := n+z*z, -(2*x + z*z), x*x/n
		disc := math.Sqrt(math.Max(0, qb*qb-4*qa*qc))
		return (-qb - disc) / (2 * qa), (-qb + disc) / (2 * qa)
	}
	p1, p2 := float64(a+b)/n, float64(a+c)/n
	l1, u1 := wilson(float64(a + b))
	l2, u2 := wilson(float64(a + c))
	phi := 0.0
	margins := float64(a+b) * float64(c+d) * float64(a+c) * float64(b+d)
	if margins > 0 {
		ad_bc := float64(a*d - b*c)
		if ad_bc > n/2 {
			phi = (ad_bc - n/2) / math.Sqrt(margins)
		} else if ad_bc < 0 {
			phi = ad_bc / math.Sqrt(margins)
		}
	}
	delta := math.Sqrt(math.Pow(p1-l1, 2) - 2*phi*(p1-l1)*(u2-p2) + math.Pow(u2-p2, 2))
	eps := math.Sqrt(math.Pow(u1-p1, 2) - 2*phi*(u1-p1)*(p2-l2) + math.Pow(p2-l2, 2))
	return p1 - p2 - delta, p1 - p2 + eps
}

func TestNewcombePairedTable(t *testing.T) {
	// Degenerate tables of six tasks (where a task-level bootstrap gives a
	// zero-width interval) and a few ordinary ones. want* come from
	// closed forms where the table allows one (Wilson's upper limit for
	// 0/n is z²/(n+z²), so u6 = 3.841459/9.841459), else from newcombeRef.
	z2 := Z95 * Z95
	u6 := z2 / (6 + z2)
	cases := []struct {
		name                   string
		both, gained, lost, no int
		lo, hi                 float64
	}{
		{"all concordant, all failed", 0, 0, 0, 6, -u6, u6},
		{"all concordant, all passed", 6, 0, 0, 0, -u6, u6},
		{"every pair gained", 0, 6, 0, 0, 1 - math.Sqrt2*u6, 1},
		{"every pair lost", 0, 0, 6, 0, -1, -(1 - math.Sqrt2*u6)},
		{"one pair, gained", 0, 1, 0, 0, 1 - math.Sqrt2*z2/(1+z2), 1},
	}
	for _, c := range cases {
		lo, hi, ok := NewcombePaired(c.both, c.gained, c.lost, c.no, Z95)
		if !ok || math.Abs(lo-c.lo) > 1e-12 || math.Abs(hi-c.hi) > 1e-12 {
			t.Errorf("%s: NewcombePaired = [%v, %v] ok=%v, want [%v, %v]", c.name, lo, hi, ok, c.lo, c.hi)
		}
		if hi-lo < 0.3 {
			t.Errorf("%s: width %v collapsed", c.name, hi-lo)
		}
	}
	// Against the independent transcription on every table of up to 12
	// pairs, and a few large ones.
	check := func(a, b, c, d int) {
		t.Helper()
		lo, hi, ok := NewcombePaired(a, b, c, d, Z95)
		rlo, rhi := newcombeRef(a, b, c, d, Z95)
		rlo, rhi = math.Max(-1, rlo), math.Min(1, rhi)
		if !ok || math.Abs(lo-rlo) > 1e-12 || math.Abs(hi-rhi) > 1e-12 {
			t.Fatalf("NewcombePaired(%d, %d, %d, %d) = [%v, %v] ok=%v, reference [%v, %v]", a, b, c, d, lo, hi, ok, rlo, rhi)
		}
	}
	for n := 1; n <= 12; n++ {
		for a := 0; a <= n; a++ {
			for b := 0; a+b <= n; b++ {
				for c := 0; a+b+c <= n; c++ {
					check(a, b, c, n-a-b-c)
				}
			}
		}
	}
	check(59, 6, 16, 80)
	check(1, 1, 7, 12)
	check(500, 40, 25, 435)
}

func TestNewcombePairedProperties(t *testing.T) {
	for n := 1; n <= 15; n++ {
		for a := 0; a <= n; a++ {
			for b := 0; a+b <= n; b++ {
				for c := 0; a+b+c <= n; c++ {
					d := n - a - b - c
					lo, hi, ok := NewcombePaired(a, b, c, d, Z95)
					theta := float64(b-c) / float64(n)
					if !ok || lo < -1 || hi > 1 || lo > theta || hi < theta || !(hi > lo) {
						t.Fatalf("NewcombePaired(%d, %d, %d, %d) = [%v, %v] ok=%v: not a proper interval around %v", a, b, c, d, lo, hi, ok, theta)
					}
					// Swapping the arms mirrors the interval.
					mlo, mhi, _ := NewcombePaired(a, c, b, d, Z95)
					if math.Abs(mlo+hi) > 1e-12 || math.Abs(mhi+lo) > 1e-12 {
						t.Fatalf("NewcombePaired(%d, %d, %d, %d) = [%v, %v], mirrored [%v, %v]", a, b, c, d, lo, hi, mlo, mhi)
					}
				}
			}
		}
	}
}

func TestNewcombePairedUndefined(t *testing.T) {
	for _, c := range []struct {
		a, b, c, d int
		z          float64
	}{{0, 0, 0, 0, Z95}, {-1, 2, 0, 0, Z95}, {1, 1, 1, 1, math.NaN()}, {1, 1, 1, 1, -1}, {1, 1, 1, 1, math.Inf(1)}} {
		if lo, hi, ok := NewcombePaired(c.a, c.b, c.c, c.d, c.z); ok || lo != 0 || hi != 0 {
			t.Errorf("NewcombePaired(%d, %d, %d, %d, %v) = %v, %v, %v; want 0, 0, false", c.a, c.b, c.c, c.d, c.z, lo, hi, ok)
		}
	}
}

package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestHolmReference(t *testing.T) {
	// Reference values: statsmodels 0.13 multipletests(method="holm").
	cases := []struct{ in, want []float64 }{
		{[]float64{0.01, 0.04, 0.03}, []float64{0.03, 0.06, 0.06}},
		{[]float64{0.2, 0.01}, []float64{0.2, 0.02}},
		{[]float64{0.5}, []float64{0.5}},
		{[]float64{0.6, 0.7, 0.9}, []float64{1, 1, 1}},
		{[]float64{}, []float64{}},
	}
	for _, c := range cases {
		got := Holm(c.in)
		if len(got) != len(c.want) {
			t.Fatalf("Holm(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Errorf("Holm(%v) = %v, want %v", c.in, got, c.want)
				break
			}
		}
	}
}

func TestHolmNaNLeftOut(t *testing.T) {
	got := Holm([]float64{0.01, math.NaN(), 0.04})
	if !math.IsNaN(got[1]) || math.Abs(got[0]-0.02) > 1e-12 || math.Abs(got[2]-0.04) > 1e-12 {
		t.Errorf("Holm with NaN = %v, want [0.02 NaN 0.04]", got)
	}
}

func TestHolmProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		m := 1 + rng.IntN(12)
		p := make([]float64, m)
		for i := range p {
			p[i] = rng.Float64()
			if rng.IntN(5) == 0 && i > 0 {
				p[i] = p[i-1] // ties
			}
		}
		adj := Holm(p)
		for i := range p {
			if adj[i] < p[i] || adj[i] > 1 {
				t.Fatalf("Holm(%v)[%d] = %v outside [raw, 1]", p, i, adj[i])
			}
			for j := range p {
				if p[i] < p[j] && adj[i] > adj[j] {
					t.Fatalf("Holm(%v) not monotone: %v", p, adj)
				}
				if p[i] == p[j] && adj[i] != adj[j] {
					t.Fatalf("Holm(%v) gives ties different values: %v", p, adj)
				}
			}
		}
	}
}

func TestHolmLog10(t *testing.T) {
	// On p-values a float64 holds, HolmLog10 is Holm in log10.
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		m := 1 + rng.IntN(8)
		p, lp := make([]float64, m), make([]float64, m)
		for i := range p {
			p[i] = math.Pow(10, -8*rng.Float64())
			lp[i] = math.Log10(p[i])
		}
		want, got := Holm(p), HolmLog10(lp)
		for i := range p {
			if math.Abs(got[i]-math.Log10(want[i])) > 1e-12 {
				t.Fatalf("HolmLog10(%v) = %v, want log10 of %v", lp, got, want)
			}
		}
	}
	// Below the smallest float64: 3·10^-331 and 2·10^-400 keep their
	// order and magnitude, and a p of 1 (log 0) and a NaN pass through.
	got := HolmLog10([]float64{-331, 0, -400, math.NaN()})
	want := []float64{-331 + math.Log10(2), 0, -400 + math.Log10(3), math.NaN()}
	for i := range want {
		if !(math.Abs(got[i]-want[i]) < 1e-12 || math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			t.Fatalf("HolmLog10 = %v, want %v", got, want)
		}
	}
}

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

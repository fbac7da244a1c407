package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// unitsOf builds n tasks of r repeats each, passing with the given rates.
func unitsOf(seed uint64, tasks, repeats int, armRate, baseRate float64) [][]Pair {
	rng := rand.New(rand.NewPCG(seed, 7))
	units := make([][]Pair, tasks)
	for i := range units {
		for range repeats {
			units[i] = append(units[i], Pair{Arm: rng.Float64() < armRate, Base: rng.Float64() < baseRate})
		}
	}
	return units
}

func delta(units [][]Pair) float64 {
	var diff, n int
	for _, u := range units {
		for _, p := range u {
			if p.Arm && !p.Base {
				diff++
			} else if !p.Arm && p.Base {
				diff--
			}
			n++
		}
	}
	return float64(diff) / float64(n)
}

func TestPairedBootstrapDeterministic(t *testing.T) {
	units := unitsOf(3, 30, 3, 0.7, 0.5)
	lo1, hi1, ok1 := PairedBootstrap(units, 2000, 42)
	lo2, hi2, ok2 := PairedBootstrap(units, 2000, 42)
	if !ok1 || !ok2 || math.Float64bits(lo1) != math.Float64bits(lo2) || math.Float64bits(hi1) != math.Float64bits(hi2) {
		t.Fatalf("same inputs gave [%v, %v] and [%v, %v]", lo1, hi1, lo2, hi2)
	}
	lo3, hi3, _ := PairedBootstrap(units, 2000, 43)
	if lo3 == lo1 && hi3 == hi1 {
		t.Errorf("a different seed gave the identical interval [%v, %v]", lo1, hi1)
	}
}

func TestPairedBootstrapGolden(t *testing.T) {
	// Pins the resampling sequence: any change to the RNG, the index draw
	// or the percentile rule changes these bits, which would change the
	// bytes of every artifact written before it.
	lo, hi, ok := PairedBootstrap(goldenUnits(), 1000, DefaultSeed)
	if !ok {
		t.Fatal("ok = false")
	}
	const wantLo, wantHi = 0.03333333333333333, 0.36666666666666664 // 1/30, 11/30; observed delta 0.2
	if math.Float64bits(lo) != math.Float64bits(wantLo) || math.Float64bits(hi) != math.Float64bits(wantHi) {
		t.Errorf("PairedBootstrap golden = [%v, %v], want [%v, %v]", lo, hi, wantLo, wantHi)
	}
}

// goldenUnits is a fixed 30-task, 3-repeat fixture built by arithmetic
// alone, so it cannot drift with any random generator.
func goldenUnits() [][]Pair {
	units := make([][]Pair, 30)
	for i := range units {
		for r := range 3 {
			units[i] = append(units[i], Pair{Arm: (i*7+r)%10 < 7, Base: (i*3+r*5)%10 < 5})
		}
	}
	return units
}

func TestPairedBootstrapContainsEstimate(t *testing.T) {
	for s := uint64(0); s < 20; s++ {
		units := unitsOf(s, 25, 2, 0.6, 0.4)
		lo, hi, ok := PairedBootstrap(units, 1000, s)
		d := delta(units)
		if !ok || lo > d || hi < d || lo < -1 || hi > 1 {
			t.Errorf("seed %d: interval [%v, %v] misses the observed delta %v", s, lo, hi, d)
		}
	}
}

func TestPairedBootstrapDegenerate(t *testing.T) {
	// Every unit has the same delta: the interval collapses onto it.
	units := [][]Pair{{{true, false}, {true, true}}, {{true, false}, {false, false}}, {}}
	lo, hi, ok := PairedBootstrap(units, 500, 1)
	if !ok || lo != 0.5 || hi != 0.5 {
		t.Errorf("degenerate bootstrap = [%v, %v] ok=%v, want [0.5, 0.5]", lo, hi, ok)
	}
	if _, _, ok := PairedBootstrap([][]Pair{{}, nil}, 500, 1); ok {
		t.Error("bootstrap with no pairs: ok = true")
	}
	if _, _, ok := PairedBootstrap(nil, 0, 1); ok {
		t.Error("bootstrap of nil: ok = true")
	}
}

func TestPairedBootstrapWidthShrinksWithTasks(t *testing.T) {
	small := unitsOf(9, 10, 1, 0.7, 0.4)
	large := unitsOf(9, 400, 1, 0.7, 0.4)
	slo, shi, _ := PairedBootstrap(small, 2000, 5)
	llo, lhi, _ := PairedBootstrap(large, 2000, 5)
	if lhi-llo >= shi-slo {
		t.Errorf("400 tasks width %v not below 10 tasks width %v", lhi-llo, shi-slo)
	}
}

func TestPercentile(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {1, 5}, {0.5, 3}, {0.025, 1.1}, {0.975, 4.9}} {
		if got := percentile(x, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 0.975); got != 7 {
		t.Errorf("percentile of one value = %v", got)
	}
}

func TestUniformIndexRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	counts := make([]int, 3)
	for range 30000 {
		counts[uniformIndex(rng, 3)]++
	}
	for i, c := range counts {
		if c < 9500 || c > 10500 {
			t.Errorf("index %d drawn %d times of 30000", i, c)
		}
	}
}

func BenchmarkPairedBootstrap(b *testing.B) {
	units := unitsOf(1, 100, 5, 0.6, 0.5)
	for b.Loop() {
		PairedBootstrap(units, DefaultResamples, DefaultSeed)
	}
}

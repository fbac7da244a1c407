package stats

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// DefaultResamples is the number of bootstrap resamples PairedBootstrap
// draws when asked for fewer than one.
const DefaultResamples = 10000

// DefaultSeed seeds the bootstrap when a caller sets none: the bytes of
// "proc" read as a big-endian integer. It is below 2^53, so a JSON reader
// that parses numbers as float64 reads it back exactly.
const DefaultSeed uint64 = 0x70726f63

// pcgStream is the fixed second word of the PCG state; only the seed varies.
const pcgStream uint64 = 0x9e3779b97f4a7c15

// Pair is one paired cell: whether the arm and the baseline passed it.
type Pair struct {
	Arm, Base bool
}

// PairedBootstrap returns the percentile 95 % interval [lo, hi] of the
// paired pass-rate delta (gained − lost)/n, where gained counts pairs with
// Arm && !Base, lost counts !Arm && Base and n counts pairs.
//
// Each element of units is one resampling unit (a task) with all its pairs
// (its models and repeats). A resample draws len(units) units uniformly with
// replacement, each bringing every pair it holds, so correlation between a
// task's repeats is kept inside the unit; units with no pairs are dropped
// first. resamples < 1 means DefaultResamples.
//
// Randomness: a math/rand/v2 PCG source seeded with (seed, a fixed stream
// constant) and unit indices drawn from its Uint64 by Lemire's unbiased
// multiply-and-reject, so the same inputs give bit-identical bounds on
// every platform and Go release. Percentile rule: the resample deltas are
// sorted and the 2.5th and 97.5th percentiles linearly interpolated between
// order statistics at position q·(B−1) (Hyndman & Fan type 7, numpy's
// default percentile method).
//
// ok is false (and lo, hi are 0) when there are no pairs at all.
func PairedBootstrap(units [][]Pair, resamples int, seed uint64) (lo, hi float64, ok bool) {
	if resamples < 1 {
		resamples = DefaultResamples
	}
	// Reduce each unit to (gained − lost, pairs); the delta of a resample is
	// an exact integer ratio, so no summation order can change it.
	type unit struct{ diff, n int64 }
	us := make([]unit, 0, len(units))
	for _, pairs := range units {
		if len(pairs) == 0 {
			continue
		}
		var u unit
		for _, p := range pairs {
			switch {
			case p.Arm && !p.Base:
				u.diff++
			case !p.Arm && p.Base:
				u.diff--
			}
			u.n++
		}
		us = append(us, u)
	}
	if len(us) == 0 {
		return 0, 0, false
	}
	rng := rand.New(rand.NewPCG(seed, pcgStream))
	m := uint64(len(us))
	deltas := make([]float64, resamples)
	for r := range deltas {
		var diff, n int64
		for range us {
			u := us[uniformIndex(rng, m)]
			diff += u.diff
			n += u.n
		}
		deltas[r] = float64(diff) / float64(n)
	}
	slices.Sort(deltas)
	return percentile(deltas, 0.025), percentile(deltas, 0.975), true
}

// uniformIndex returns a uniform integer in [0, m) from rng.Uint64 by
// Lemire's multiply-shift with rejection (m > 0). It is spelled out here,
// not taken from rand.IntN, so the sequence is fixed by this code alone.
func uniformIndex(rng *rand.Rand, m uint64) uint64 {
	hi, lo := bits.Mul64(rng.Uint64(), m)
	if lo < m {
		thresh := -m % m
		for lo < thresh {
			hi, lo = bits.Mul64(rng.Uint64(), m)
		}
	}
	return hi
}

// percentile returns the q-quantile of sorted (non-empty) by linear
// interpolation at position q·(len−1). Each product is converted
// explicitly so no platform fuses it into an FMA and changes the last bit.
func percentile(sorted []float64, q float64) float64 {
	pos := float64(q * float64(len(sorted)-1))
	i := int(math.Floor(pos))
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	frac := pos - float64(i)
	return sorted[i] + float64(frac*(sorted[i+1]-sorted[i]))
}

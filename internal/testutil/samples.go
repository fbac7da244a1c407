package testutil

import (
	"slices"
	"time"
)

// Samples collects durations (of benchmark iterations) and summarises them.
type Samples []time.Duration

// Mean is the arithmetic mean; 0 for no samples.
func (s Samples) Mean() time.Duration {
	if len(s) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s))
}

// Pct returns the p-th percentile (0 < p <= 100) by nearest rank; 0 for no
// samples.
func (s Samples) Pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	k := int(float64(len(c))*p/100+0.999999) - 1
	return c[max(0, min(k, len(c)-1))]
}

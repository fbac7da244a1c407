package stats

import (
	"math"
	"testing"
)

func TestNormalizedGain(t *testing.T) {
	cases := []struct {
		arm, base, want float64
		ok              bool
	}{
		{0.95, 0.5, 0.9, true},
		{0.5, 0.95, -9, true},
		{0.5, 0.5, 0, true},
		{1, 0, 1, true},
		{0.3, 1, 0, false},
		{1, 1, 0, false},
	}
	for _, c := range cases {
		got, ok := NormalizedGain(c.arm, c.base)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("NormalizedGain(%v, %v) = %v, %v; want %v, %v", c.arm, c.base, got, ok, c.want, c.ok)
		}
	}
}

func TestNormalizedChange(t *testing.T) {
	cases := []struct {
		arm, base, want float64
		ok              bool
	}{
		{0.6, 0.8, -0.25, true},
		{0.95, 0.5, 0.9, true},
		{0.5, 0.95, -0.45 / 0.95, true},
		{0.4, 0.4, 0, true},
		{0, 1, -1, true},
		{1, 0, 1, true},
		{0, 0, 0, false},
		{1, 1, 0, false},
	}
	for _, c := range cases {
		got, ok := NormalizedChange(c.arm, c.base)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("NormalizedChange(%v, %v) = %v, %v; want %v, %v", c.arm, c.base, got, ok, c.want, c.ok)
		}
	}
	// Bounded in [-1, 1] on a grid.
	for a := 0; a <= 20; a++ {
		for b := 0; b <= 20; b++ {
			got, ok := NormalizedChange(float64(a)/20, float64(b)/20)
			if ok && (got < -1 || got > 1) {
				t.Fatalf("NormalizedChange(%v, %v) = %v outside [-1, 1]", float64(a)/20, float64(b)/20, got)
			}
		}
	}
}

package stats

// NormalizedGain returns Hake's normalized gain (Hake 1998),
// (arm − base) / (1 − base), for two pass rates in [0,1]: the share of the
// baseline's headroom the arm recovered. ok is false when base >= 1, where
// there is no headroom and the gain is undefined.
func NormalizedGain(arm, base float64) (float64, bool) {
	if base >= 1 {
		return 0, false
	}
	return (arm - base) / (1 - base), true
}

// NormalizedChange returns Marx & Cummings' normalized change (Am. J. Phys.
// 75, 87 (2007)) for two pass rates in [0,1]: (arm − base)/(1 − base) when
// arm > base, (arm − base)/base when arm < base, and 0 when they are equal.
// The result is in [−1, 1]. ok is false when both rates are 0 or both are
// 1, which Marx & Cummings drop from the average as undefined.
func NormalizedChange(arm, base float64) (float64, bool) {
	switch {
	case arm == base && (base == 0 || base == 1):
		return 0, false
	case arm > base:
		return (arm - base) / (1 - base), true
	case arm < base:
		return (arm - base) / base, true
	default:
		return 0, true
	}
}

package artifact

import (
	"strings"
	"testing"
)

// TestPlainComparison: the sentence before the statistics says, in plain
// words, what each case of the McNemar table means.
func TestPlainComparison(t *testing.T) {
	yes, no := true, false
	f := func(x float64) *float64 { return &x }
	cases := []struct {
		m    McNemar
		want string
	}{
		{McNemar{N: 40, NGained: 14, NLost: 1, Significant: &yes}, "`skill` passed 14 attempts that `base` failed and failed 1 that it passed; a difference this large is unlikely to be chance, so `skill` is likely better."},
		{McNemar{N: 40, NGained: 0, NLost: 12, Significant: &yes}, "so `skill` is likely worse."},
		{McNemar{N: 5, NGained: 2, NLost: 0, Significant: &no}, "with this few attempts that could be chance, so the run does not show that either is better"},
		{McNemar{N: 5, NGained: 1, NLost: 1, Significant: &no}, "passed 1 attempt that `base` failed and failed 1 that it passed; the run shows no difference between them."},
		// Ten repeats of one task: McNemar's p is small, but it took the
		// repeats for independent tasks, and over tasks it could be chance.
		{McNemar{N: 10, NGained: 10, NUnits: 1, PseudoReplicated: true, Significant: &yes, BootstrapCILo: f(0), BootstrapCIHi: f(1)},
			"passed 10 attempts that `base` failed and failed 0 that it passed; the exact test takes these for independent attempts, but they repeat 1 task, and over tasks the difference could be chance, so the run does not show that either is better"},
		// The bootstrap over tasks agrees: the claim stands.
		{McNemar{N: 30, NGained: 15, NUnits: 10, PseudoReplicated: true, Significant: &yes, BootstrapCILo: f(0.2), BootstrapCIHi: f(0.7)}, "so `skill` is likely better."},
		{McNemar{N: 30, NLost: 15, NUnits: 10, PseudoReplicated: true, Significant: &yes, BootstrapCILo: f(-0.7), BootstrapCIHi: f(-0.2)}, "so `skill` is likely worse."},
		{McNemar{}, "`skill` and `base` have no attempt that both scored, so they cannot be compared."},
	}
	for _, c := range cases {
		got := plainComparison("skill", &Comparison{Baseline: "base", McNemar: c.m})
		if !strings.HasPrefix(got, "In plain words: ") || !strings.Contains(got, c.want) {
			t.Errorf("%+v:\n got %q\nwant %q", c.m, got, c.want)
		}
	}
}

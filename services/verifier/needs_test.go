package verifier

import (
	"slices"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// TestVerifierUsesOnlyVerifierNeeds: on a driver with only
// harness.VerifierNeeds (OOMCounter, which it uses when there, switched
// off too), a public verifier of a sandbox on the internal network joins
// the bridge, freezes, reads the reward and records the Verdict, calling
// no ability but an OOM count. The arms' Needs include VerifierNeeds, so
// a run is checked against it before it starts.
func TestVerifierUsesOnlyVerifierNeeds(t *testing.T) {
	var off []sandbox.Ability
	for _, a := range sandbox.AllAbilities() {
		if !slices.Contains(harness.VerifierNeeds, a) {
			off = append(off, a)
		}
	}
	d := &sandboxfake.Driver{Off: off, Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	evs := newFixture(t, d, nil).verify(t, nil, sandbox.NetworkInternal)
	if v := last[events.VerdictData](t, evs, events.Verdict); reward(t, v) != 1 {
		t.Errorf("verdict %+v", v)
	}
	for _, a := range d.Refused() {
		if a != sandbox.AbilityOOMCounter {
			t.Errorf("the verifier called %s, which VerifierNeeds %v lack", a, harness.VerifierNeeds)
		}
	}
	if c, frozen, _, _ := d.Counts(); c != 1 || frozen != 1 {
		t.Errorf("joined the bridge %d times, froze %d times", c, frozen)
	}
}

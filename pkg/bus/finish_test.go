package bus_test

import (
	"context"
	"testing"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
)

// TestClaimFinishOnceAndRetriable: of two claimants of a run's
// RunFinished only the first wins; the winner asking again (its first
// answer lost to a timeout) is told it holds the claim, the other is not;
// a later epoch is a new claim.
func TestClaimFinishOnceAndRetriable(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	if err := b.PutRun(ctx, bus.RunRecord{ID: "r1", Status: bus.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	claim := func(by string, epoch int, want bool) {
		t.Helper()
		won, err := b.ClaimFinish(ctx, "r1", epoch, by)
		if err != nil {
			t.Fatal(err)
		}
		if won != want {
			t.Errorf("%s claims epoch %d: won %v, want %v", by, epoch, won, want)
		}
	}
	claim("a", 0, true)
	claim("b", 0, false)
	claim("a", 0, true) // a's retry after a lost answer
	claim("", 0, false) // an anonymous claimant is never the holder
	claim("b", 1, true)
	claim("a", 1, false)
}

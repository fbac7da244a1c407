package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
)

// askerClock is a ClaimFinish seen on a clock the test steps: how long it
// has seen the same claim, from its first look at it.
type askerClock struct {
	now, since time.Duration
	claim      string
	looks      int
}

func (a *askerClock) seen(claim string) time.Duration {
	a.looks++
	if a.looks == 1 || claim != a.claim {
		a.claim, a.since = claim, a.now
	}
	return a.now - a.since
}

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
	clk := &askerClock{}
	claim := func(by string, epoch int, want bool) {
		t.Helper()
		won, err := b.ClaimFinish(ctx, "r1", epoch, by, clk.seen)
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

// TestFinishClaimLapsesOnTheAskersClock: the claimant's machine writes
// its claim's end by a clock an hour behind the asker's, or an hour
// ahead. Either way the asker, judging by its own clock how long it has
// seen the same claim, does not win it for FinishClaimDuration after its
// first look (behind: though the written end is an hour past, a live
// claimant keeps its claim) and wins it then (ahead: a dead claimant is
// replaced, though the written end is an hour away). A claim made again
// by its holder is a new claim: the asker waits a whole
// FinishClaimDuration from then.
func TestFinishClaimLapsesOnTheAskersClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration // the claimant's clock minus the asker's
	}{
		{"claimant behind", -time.Hour},
		{"claimant ahead", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := bustest.Bus(t)
			ctx := context.Background()
			run := "r1"
			if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning}); err != nil {
				t.Fatal(err)
			}
			// claimant claims as its own clock puts it.
			claimant := func() {
				t.Helper()
				if won, err := b.ClaimFinish(ctx, run, 0, "claimant", (&askerClock{}).seen); err != nil || !won {
					t.Fatalf("the claimant's claim: won %v, %v", won, err)
				}
				if err := b.UpdateRun(ctx, run, func(r *bus.RunRecord) {
					r.FinishClaimUntil = time.Now().Add(tc.skew + bus.FinishClaimDuration).UTC().Format(time.RFC3339Nano)
				}); err != nil {
					t.Fatal(err)
				}
			}
			asker := &askerClock{}
			ask := func(want bool) {
				t.Helper()
				won, err := b.ClaimFinish(ctx, run, 0, "asker", asker.seen)
				if err != nil {
					t.Fatal(err)
				}
				if won != want {
					t.Fatalf("the asker at %v of its clock: won %v, want %v", asker.now, won, want)
				}
			}
			claimant()
			ask(false)
			asker.now += bus.FinishClaimDuration - time.Millisecond
			ask(false)
			claimant() // the holder claims again: a new claim
			asker.now += time.Millisecond
			ask(false)
			asker.now += bus.FinishClaimDuration - time.Millisecond
			ask(false)
			asker.now += time.Millisecond
			ask(true)
			if rec, err := b.GetRun(ctx, run); err != nil || rec.FinishClaimBy != "asker" {
				t.Fatalf("claim held by %q (%v), want the asker", rec.FinishClaimBy, err)
			}
		})
	}
}

package lifecycle

import (
	"context"
	"errors"
	"slices"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// solveFilter matches the events of type t of every cell of runID.
func solveFilter(runID string, t events.Type) string {
	return "proctor.run." + runID + ".cell.*." + string(t)
}

// SolveMark is where in the log the answers to a control action begin:
// the stream sequence of the last SolveFrozen and SolveThawed event of
// the run before it (0: none). Take it before the action.
func SolveMark(ctx context.Context, b *bus.Bus, runID string) (uint64, error) {
	var last uint64
	for _, t := range []events.Type{events.SolveFrozen, events.SolveThawed} {
		s, err := b.LastSeq(ctx, solveFilter(runID, t))
		if err != nil {
			return 0, err
		}
		last = max(last, s)
	}
	return last, nil
}

// FrozenSolves returns the cells of runID whose solve is frozen or held
// now: a SolveFrozen with Frozen set and no SolveThawed after it in the
// same attempt, sorted.
func FrozenSolves(ctx context.Context, b *bus.Bus, runID string) ([]string, error) {
	frozen := map[string]int{} // cell → attempt frozen
	err := b.Read(ctx, []string{solveFilter(runID, events.SolveFrozen), solveFilter(runID, events.SolveThawed)}, func(e events.Envelope) error {
		switch e.Type {
		case events.SolveFrozen:
			var d events.SolveFrozenData
			if events.Into(e, &d) == nil && d.Frozen {
				frozen[e.CellID] = e.Attempt
			}
		case events.SolveThawed:
			if a, ok := frozen[e.CellID]; ok && a == e.Attempt {
				delete(frozen, e.CellID)
			}
		}
		return nil
	})
	var out []string
	for c := range frozen {
		out = append(out, c)
	}
	slices.Sort(out)
	return out, err
}

// AwaitSolves calls fn for each event of type t (SolveFrozen or
// SolveThawed) of runID recorded after the stream sequence mark
// (SolveMark), in log order, until each cell of cells has one, and
// returns the cells that had none when ctx ended (nil when all
// answered). The error is the log's.
func AwaitSolves(ctx context.Context, b *bus.Bus, runID string, mark uint64, t events.Type, cells []string, fn func(events.Envelope)) ([]string, error) {
	left := slices.Clone(cells)
	if len(left) == 0 {
		return nil, nil
	}
	err := b.FollowSeq(ctx, []string{solveFilter(runID, t)}, func(e events.Envelope, seq uint64) error {
		if seq <= mark {
			return nil
		}
		fn(e)
		if i := slices.Index(left, e.CellID); i >= 0 {
			left = slices.Delete(left, i, i+1)
		}
		if len(left) == 0 {
			return bus.ErrStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return left, err
	}
	return left, nil
}

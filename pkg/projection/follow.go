package projection

import (
	"context"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// FollowOptions tunes Follow. The zero value follows a run to its end,
// whatever epoch that is.
type FollowOptions struct {
	// Epoch is the first epoch whose RunFinished may end the follow: the
	// epoch the caller drives (a resume's own), so a follow that starts
	// before its RunResumed is stored does not stop at the end of the
	// epoch before. 0 for a new run or a watcher.
	Epoch int
	// CaughtUp, when set, is called once, from Follow's goroutine, when fn
	// has taken every event of the run the log held when the follow began
	// (at once when it held none).
	CaughtUp func()
}

// Follow calls fn with every event of runID in log order, from the run's
// first, and returns nil once fn has taken the event that ends the run;
// it returns fn's error, or the bus's, or ctx's when ctx ends first.
//
// The run ends with the RunFinished of its newest epoch: a resumed run's
// log holds the RunFinished of each earlier epoch, which the RunResumed
// after it reopens. So the follow never ends before it has caught up with
// the events stored when it began (a RunResumed may follow the
// RunFinished it has seen), nor at the RunFinished of an epoch below
// o.Epoch, nor while the run index shows the run running in a later epoch
// than the log's newest (a resume moves the record before it publishes
// RunResumed). A RunFinished of an older epoch arriving after a
// RunResumed (a late close) ends nothing, as in a Projector.
// The decisions read the events' own data, so the caller may fold them
// with a projection of its own, under its own lock.
func Follow(ctx context.Context, b *bus.Bus, runID string, o FollowOptions, fn func(events.Envelope) error) error {
	filter := events.RunFilter(runID)
	last, err := b.LastSeq(ctx, filter)
	if err != nil {
		return err
	}
	caughtUp := false
	catchUp := func() {
		if !caughtUp {
			caughtUp = true
			if o.CaughtUp != nil {
				o.CaughtUp()
			}
		}
	}
	if last == 0 {
		catchUp()
	}
	var st runEnd
	return b.FollowSeq(ctx, []string{filter}, func(e events.Envelope, seq uint64) error {
		if err := fn(e); err != nil {
			return err
		}
		st.apply(e)
		if seq >= last {
			catchUp()
		}
		if !caughtUp || !st.finished || st.epoch < o.Epoch {
			return nil
		}
		// The log says the run ended; the index knows of a resume whose
		// RunResumed is not stored yet. (Without a record, the log decides.)
		if rec, err := b.GetRun(ctx, runID); err == nil && rec.Epoch > st.epoch && !rec.Terminal() {
			return nil
		}
		return bus.ErrStop
	})
}

// runEnd tracks, as a Projector does, whether the events so far
// end the run: the newest RunResumed epoch, and whether a RunFinished of
// that epoch (or a later one) came after it.
type runEnd struct {
	epoch    int
	finished bool
}

func (s *runEnd) apply(e events.Envelope) {
	switch e.Type {
	case events.RunResumed:
		var r events.RunResumedData
		if events.Into(e, &r) == nil && r.Epoch > s.epoch {
			s.epoch, s.finished = r.Epoch, false
		}
	case events.RunFinished:
		var f events.RunFinishedData
		_ = events.Into(e, &f) // a RunFinished that does not decode still ends the run, as in the projection
		if f.Epoch >= s.epoch {
			s.finished = true
		}
	}
}

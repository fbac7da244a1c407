package aggregator

import (
	"context"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// finishData is the RunFinished of p's run for epoch, once every cell of
// p is done: finished, failed (a plan error) or cancelled (the whole run
// cancelled), with the counts.
func finishData(p *projection.Projector, epoch int) events.RunFinishedData {
	status, why := bus.StatusFinished, p.PlanError()
	switch {
	case why != "":
		status = bus.StatusFailed
	case p.Cancelled():
		status = bus.StatusCancelled
		why = (&bus.Cancelled{Control: p.Control().Cancels[""]}).Error()
	}
	return events.RunFinishedData{Status: status, Counts: p.Counts(), Error: why, Epoch: epoch}
}

// closer is one follow's side of finishing its run: the follow's callback
// calls done at each event that leaves the run done, and askAgain, in a
// goroutine of its own, asks for the claim again while another process
// holds it. Without asking again a follow that lost the claim to a
// claimant that then died would wait for ever: no later event comes, and
// a claim lapses only once its asker has seen it unchanged for
// bus.FinishClaimDuration (Bus.ClaimFinish). Safe for concurrent use:
// one claim or publish at a time.
type closer struct {
	s     *Service
	runID string
	epoch int
	wake  chan struct{} // done lost the claim: askAgain starts asking

	mu     sync.Mutex
	closed bool                   // this follow won the claim
	data   events.RunFinishedData // the RunFinished as of the last done
}

func newCloser(s *Service, runID string, epoch int) *closer {
	return &closer{s: s, runID: runID, epoch: epoch, wake: make(chan struct{}, 1)}
}

// done claims and publishes the RunFinished d, unless this follow won the
// claim already; losing it, it wakes askAgain. The error is finish's.
func (c *closer) done(ctx context.Context, d events.RunFinishedData) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.data = d
	won, err := c.s.finish(ctx, c.runID, c.epoch, d)
	c.closed = won
	if err == nil && !won {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return err
}

// askAgain waits for done to lose the claim, then asks again every
// bus.FinishClaimDuration/4 (at least 10 ms) until this follow wins it or
// ctx ends: a claimant that died is replaced within about
// bus.FinishClaimDuration of this aggregator's first look at its claim. It
// returns nil when ctx ends, else the error of a claim or publish that
// failed (not transiently), which should end the follow.
func (c *closer) askAgain(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-c.wake:
	}
	every := max(bus.FinishClaimDuration/4, 10*time.Millisecond)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.mu.Lock()
		won, err := c.closed, error(nil)
		if !won {
			won, err = c.s.finish(ctx, c.runID, c.epoch, c.data)
			c.closed = won
			if won && err == nil {
				c.s.log.Info("took over the RunFinished claim of a silent claimant", "run", c.runID, "epoch", c.epoch)
			}
		}
		c.mu.Unlock()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		case won:
			return nil
		}
		t.Reset(every)
	}
}

// finish publishes d, the RunFinished of the run's epoch once every cell
// is done (finishData), unless another process did: the run's log holds exactly one
// RunFinished per epoch, whatever aggregators race or die. Three guards,
// each for its window:
//
//   - the claim (bus.ClaimFinish, a compare-and-set on the run index):
//     of the aggregators reaching the run's end while a claim holds, only
//     the winner goes on; another's claim lapses once this aggregator has
//     seen it unchanged for bus.FinishClaimDuration (30 s) on its own
//     clock (Config.Now; Service.claims), whatever time the claimant's
//     clock wrote;
//   - the log: a winner, as one taking over the lapsed claim of an
//     aggregator that died after publishing, first looks for a
//     RunFinished of this epoch (or a later one) in the log and, finding
//     it, publishes nothing; its follow goes on to that event and brings
//     the run's index record up to date (status, artifact), as the dead
//     one would have;
//   - the id: the event's id, its Nats-Msg-Id, is derived from run and
//     epoch (events.RunFinishedID), so two publishes of it that both
//     missed it in the log (a claim lapsed while its holder was still
//     publishing) within the stream's duplicate window (bus.DuplicateWindow)
//     store it once. Each try is one synchronous publish bounded by
//     bus.RequestTimeout, and the log is read again before the next, so
//     a try is never repeated long after a copy was stored.
//
// It reports whether this aggregator won the claim. A loser follows on
// until the winner's RunFinished comes, claiming again at a later event
// of the run and every bus.FinishClaimDuration/4 (closer.askAgain). The claim, the look and the publish are retried while the
// bus fails transiently (a server lost): an error returned would end this
// follow's callback for the run's last event, and no later event would
// come to finish the run.
func (s *Service) finish(ctx context.Context, runID string, epoch int, d events.RunFinishedData) (bool, error) {
	var won bool
	err := bus.Retry(ctx, s.log, "claim the RunFinished of "+runID, func(ctx context.Context) error {
		var err error
		won, err = s.bus.ClaimFinish(ctx, runID, epoch, s.id, func(claim string) time.Duration {
			return s.claims.unchanged(runID, claim)
		})
		return err
	})
	if err != nil || !won {
		return false, err
	}
	finished := events.Must(events.RunFinished, runID, "", 0, Source, d)
	finished.ID = events.RunFinishedID(runID, epoch)
	return true, bus.Retry(ctx, s.log, "publish the RunFinished of "+runID, func(ctx context.Context) error {
		there, err := finishedInLog(ctx, s.bus, runID, epoch)
		if err != nil {
			return err
		}
		if there {
			s.log.Info("the RunFinished of this epoch is in the log already: not published again", "run", runID, "epoch", epoch)
			return nil
		}
		dup, err := s.bus.PublishNow(ctx, finished)
		if dup {
			s.log.Info("the RunFinished of this epoch was published by another process: the stream dropped this copy", "run", runID, "epoch", epoch)
		}
		return err
	})
}

// finishedInLog reports whether the run's log holds a RunFinished of
// epoch or a later one.
func finishedInLog(ctx context.Context, b *bus.Bus, runID string, epoch int) (bool, error) {
	found := false
	err := b.Read(ctx, []string{events.RunSubject(runID, events.RunFinished)}, func(e events.Envelope) error {
		var d events.RunFinishedData
		if events.Into(e, &d) == nil && d.Epoch >= epoch {
			found = true
			return bus.ErrStop
		}
		return nil
	})
	return found, err
}

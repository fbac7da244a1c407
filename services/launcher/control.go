package launcher

import (
	"context"
	"errors"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
)

// errPaused is returned by a cell that found its run paused when it read
// the run record: it has started nothing, and waits for a continue.
var errPaused = errors.New("launcher: the run is paused")

// Launch runs one launch job's attempt (the delivery count of its job),
// obeying the run's control state (the run index, and the control
// messages of bus.Controls): while the run is paused the job is held
// (kept alive, nothing started) until it is continued; a cancelled cell
// is recorded errored, class cancelled, without running, and a cell
// running when its cancel arrives is stopped as a Ctrl-C stops it (its
// sandbox destroyed) and recorded the same way. A cell that ends without a
// verdict (a ClassError from its arm or its preamble) is recorded errored
// and is not an error; the error is non-nil only when the event log
// cannot be read or written or ctx ended, and the job is then retried.
func (s *Service) Launch(ctx context.Context, job events.LaunchJob, attempt int) error {
	cctx, done := s.ctl.Cell(ctx, job.RunID, job.CellID)
	defer done()
	for {
		if s.ctl != nil {
			if _, err := s.ctl.WaitRunnable(cctx, job.RunID, job.CellID); err != nil {
				return s.stopped(ctx, cctx, job, attempt, err)
			}
		}
		err := s.launch(cctx, job, attempt)
		if errors.Is(err, errPaused) {
			continue
		}
		return s.stopped(ctx, cctx, job, attempt, err)
	}
}

// stopped records a cell whose work ended with err because a cancel
// stopped it (cctx's cause is a *bus.Cancelled); any other err is
// returned as it is.
func (s *Service) stopped(ctx, cctx context.Context, job events.LaunchJob, attempt int, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if c := bus.CancelledBy(cctx); c != nil {
		return s.recordCancelled(ctx, job, attempt, c)
	}
	return err
}

// recordCancelled ends a cancelled cell's attempt: its containers and
// networks on this node are removed (when the driver is a Reaper: a
// redelivered job of a cell whose launcher died leaves them), then the
// cell is errored, class cancelled, unless the run ended or the attempt
// already has its terminal event. The error is the event log's.
func (s *Service) recordCancelled(ctx context.Context, job events.LaunchJob, attempt int, c *bus.Cancelled) error {
	cr, err := s.openCell(ctx, job.RunID, job.CellID, attempt)
	if err != nil {
		return err
	}
	defer cr.Close()
	if cr.Ended() || cr.Stale(job.Epoch) {
		return nil
	}
	if done, err := cellrun.Settled(ctx, s.bus, job.RunID, job.CellID, attempt); err != nil || done {
		return err
	}
	if r, ok := s.driver.(Reaper); ok {
		if err := r.ReapCell(ctx, job.RunID, job.CellID); err != nil {
			s.log.Warn("remove a cancelled cell's sandboxes", "cell", job.CellID, "err", err)
		}
	}
	cr.Dir.Logf("errored (cancelled): %v", c)
	s.log.Info("cell cancelled", "run", job.RunID, "cell", job.CellID, "attempt", attempt)
	e := events.Must(events.CellErrored, job.RunID, job.CellID, attempt, Source,
		events.CellErroredData{ErrorClass: string(events.ClassCancelled), Error: c.Error()})
	if err := s.bus.Publish(ctx, e); err != nil {
		return err
	}
	return s.bus.Flush(ctx)
}

package launcher

import (
	"context"
	"errors"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Reaper is the driver ability the launcher's reaping needs (the Docker
// driver has it): the cells the engine holds containers of, and the
// removal of everything of one cell.
type Reaper interface {
	// Cells lists the (run id, cell id) pairs of the engine's containers.
	Cells(ctx context.Context) ([][2]string, error)
	// ReapCell removes every container and network of the run's cell.
	ReapCell(ctx context.Context, runID, cellID string) error
}

// reapLoop reaps at start and every ReapEvery until ctx ends.
func (s *Service) reapLoop(ctx context.Context, r Reaper) {
	t := time.NewTicker(s.cfg.ReapEvery)
	defer t.Stop()
	for {
		if n, err := s.Reap(ctx, r); err != nil && ctx.Err() == nil {
			s.log.Warn("reap", "err", err)
		} else if n > 0 {
			s.log.Info("reaped sandboxes of cells no launcher owns", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reap removes the sandboxes on this node's engine that no launcher or
// verifier owns any more, judged by the run index and the event log only
// (so two launchers sharing an engine never take each other's work):
//   - every container and network of a cell whose run has ended or whose
//     lease expired, or whose last event is terminal (Verdict,
//     CellErrored, CellRefused: its owner destroys the sandbox before
//     recording it, so one left is a leftover);
//   - the sandbox of an older attempt of a cell (SandboxStarted of this
//     node with an attempt below the cell's latest): its launcher died and
//     the job went on.
//
// Containers of runs this bus's index does not hold (another store's) are
// never touched. It returns the number of cells and attempts reaped; the
// error joins the engine's and the log's.
func (s *Service) Reap(ctx context.Context, r Reaper) (int, error) {
	cells, err := r.Cells(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, rc := range cells {
		runID, cellID := rc[0], rc[1]
		rec, err := s.bus.GetRun(ctx, runID)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rec.Terminal() || rec.LeaseExpired(time.Now()) {
			if err := r.ReapCell(ctx, runID, cellID); err != nil {
				errs = append(errs, err)
			} else {
				n++
			}
			continue
		}
		var last events.Envelope
		latest := 0
		var started []events.Envelope
		if err := s.bus.Read(ctx, []string{events.CellSubject(runID, cellID, "*")}, func(e events.Envelope) error {
			last = e
			latest = max(latest, e.Attempt)
			if e.Type == events.SandboxStarted {
				started = append(started, e)
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
			continue
		}
		if last.Type == events.Verdict || last.Type == events.CellErrored || last.Type == events.CellRefused {
			if err := r.ReapCell(ctx, runID, cellID); err != nil {
				errs = append(errs, err)
			} else {
				n++
			}
			continue
		}
		for _, e := range started {
			var sb events.SandboxStartedData
			if e.Attempt >= latest || events.Into(e, &sb) != nil || sb.Node != s.cfg.Node {
				continue
			}
			h := &sandbox.Handle{Driver: sb.Driver, ID: sb.ID, State: sb.State}
			if err := s.driver.Destroy(ctx, h); err != nil {
				errs = append(errs, err)
			} else {
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// Package aggregator is the service that closes runs: it follows each
// planned run with a projection.Projector, publishes RunFinished once every
// cell has its terminal event, and writes the task_runs.v1 artifact and the
// Markdown report (projection.WriteResults). The projection itself (the
// fold, rows, progress, rendering) is the pkg/projection library, shared
// with the CLI and the web view.
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// Source is the envelope source of the aggregator's events.
const Source = projection.Source

// Config configures the aggregator. The zero value is usable.
type Config struct {
	// Version is written as run.proctor_version when the log lacks one.
	Version string
	Logger  *slog.Logger
	// NodeLost is how long a node's verifier may go without a heartbeat
	// (KV PROCTOR_NODES, bus.Heartbeat) while a cell's verify job waits
	// on that node before the aggregator errors the cell, class infra,
	// naming the node (default DefaultNodeLost). NodeCheck is how often
	// it looks (default NodeLost/4, at most 10 s).
	NodeLost  time.Duration
	NodeCheck time.Duration
	// Now is the aggregator's clock (default time.Now). A node's silence,
	// a run's lease and another aggregator's finish claim are differences
	// of two of its readings, never a comparison with a time another
	// machine wrote.
	Now func() time.Time
}

// DefaultNodeLost is Config.NodeLost's default: twice the verifier's
// default AckWait, twelve missed heartbeats of bus.NodeBeatEvery.
const DefaultNodeLost = 2 * time.Minute

// Service is the aggregator.
type Service struct {
	cfg Config
	bus *bus.Bus
	log *slog.Logger
	id  string // this process's claimant name (Bus.ClaimFinish)
	// beats is when this aggregator last saw each node's heartbeat
	// change, leases each followed run's lease (leaseHeld), and claims
	// each followed run's finish claim (Bus.ClaimFinish's seen).
	beats  *changeClock[uint64]
	leases *changeClock[string]
	claims *changeClock[string]
}

// New returns an aggregator on b.
func New(cfg Config, b *bus.Bus) (*Service, error) {
	if b == nil {
		return nil, errors.New("aggregator: nil bus")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeLost <= 0 {
		cfg.NodeLost = DefaultNodeLost
	}
	if cfg.NodeCheck <= 0 {
		cfg.NodeCheck = min(cfg.NodeLost/4, 10*time.Second)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, bus: b, log: cfg.Logger.With("service", Source), id: events.NewID(),
		beats: newChangeClock[uint64](cfg.Now), leases: newChangeClock[string](cfg.Now),
		claims: newChangeClock[string](cfg.Now)}, nil
}

// Run follows every planned run until ctx ends. A run it was following
// when it stopped is picked up again (from the start of the run's events)
// by the next aggregator, because its RunPlanned message stays unacked.
//
// A resumed run (RunResumed) is followed again the same way, through a
// second consumer.
func (s *Service) Run(ctx context.Context) error {
	planned, err := s.bus.EventConsumer(ctx, "aggregator", events.TypeFilter(events.RunPlanned), time.Minute)
	if err != nil {
		return err
	}
	resumed, err := s.bus.EventConsumer(ctx, "aggregator-resumed", events.TypeFilter(events.RunResumed), time.Minute)
	if err != nil {
		return err
	}
	grp, gctx := errgroup.WithContext(ctx)
	grp.Go(func() error { return s.serve(gctx, planned) })
	grp.Go(func() error { return s.serve(gctx, resumed) })
	return grp.Wait()
}

func (s *Service) serve(ctx context.Context, cons jetstream.Consumer) error {
	return s.bus.Serve(ctx, cons, 256, 20*time.Second, func(ctx context.Context, m jetstream.Msg) {
		e, err := events.Decode(m.Data())
		if err != nil {
			_ = m.Term()
			return
		}
		if err := s.follow(ctx, e.RunID); err != nil {
			if ctx.Err() == nil {
				s.log.Error("aggregate", "run", e.RunID, "err", err)
				_ = m.NakWithDelay(5 * time.Second)
			}
			return
		}
		_ = m.Ack()
	})
}

// follow projects one run live; when every cell is done it publishes
// RunFinished, and when that event comes back it writes the results.
func (s *Service) follow(ctx context.Context, runID string) error {
	rec, err := s.bus.GetRun(ctx, runID)
	if err == nil && isTerminal(rec.Status) {
		return nil
	}
	// epoch is the run's current epoch: the RunFinished of an earlier
	// one (before a resume) does not end the follow.
	epoch := rec.Epoch
	if err == nil {
		s.leaseHeld(rec) // the lease's first look starts its clock
	}
	defer s.leases.forget(runID)
	defer s.claims.forget(runID)
	p := projection.NewProjector(runID)
	fin := newCloser(s, runID, epoch)
	waits := newVerifyWaits(s.cfg.Now)
	// fctx ends the follow early when the closer's asking again fails.
	fctx, stopFollow := context.WithCancelCause(ctx)
	defer stopFollow(nil)
	wctx, stopWatch := context.WithCancel(fctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.watchNodes(wctx, runID, waits) })
	bg.Go(func() {
		if err := fin.askAgain(wctx); err != nil {
			stopFollow(err)
		}
	})
	defer func() { stopWatch(); bg.Wait() }()
	// Events after liveFrom were stored after the follow began: only
	// they may trip a cap.
	var liveFrom uint64
	if info, err := s.bus.Events.Info(ctx); err == nil {
		liveFrom = info.State.LastSeq
	}
	var cp caps
	err = s.bus.FollowSeq(fctx, []string{events.RunFilter(runID)}, func(e events.Envelope, seq uint64) error {
		p.Apply(e)
		if e.Type == events.RunResumed {
			waits.reset()
		}
		if e.CellID != "" {
			waits.observe(e, p.Attempt(e.CellID), p.CellDone(e.CellID) || p.RetryPending(e.CellID))
		}
		if p.Epoch() < epoch {
			return nil
		}
		if p.Finished() {
			return bus.ErrStop
		}
		if seq > liveFrom && !p.Done() {
			if err := cp.check(ctx, s.bus, runID, p, e); err != nil {
				return err
			}
		}
		if e.Type == events.CellErrored && e.Attempt == p.Attempt(e.CellID) && p.RetryPending(e.CellID) {
			if err := s.retry(ctx, e, epoch); err != nil {
				return err
			}
		}
		if p.Done() {
			return fin.done(ctx, finishData(p, epoch))
		}
		return nil
	})
	stopWatch()
	bg.Wait()
	if err != nil {
		if cause := context.Cause(fctx); ctx.Err() == nil && cause != nil {
			return cause
		}
		return err
	}
	if d := p.DecodeErrors(); d != nil {
		s.log.Warn("events whose data did not decode", "run", runID, "count", d.Count, "by_type", d.ByType, "first", d.First)
	}
	return projection.WriteResults(ctx, s.bus, runID, p, s.cfg.Version)
}

// retry publishes the launch job that runs again a cell whose attempt
// e.Attempt ended errored with a retryable class (RunSpec.Retries; see
// projection.Projector.RetryPending): AttemptBase e.Attempt, so the
// retry is a new attempt with its own events. A follow that replays the
// log (a restarted aggregator) meets errors already retried: the job is
// not published again when the cell's last event is of a later attempt,
// and the job's id (run, cell, attempt) lets the stream drop the
// duplicate of a second aggregator.
func (s *Service) retry(ctx context.Context, e events.Envelope, epoch int) error {
	last, err := s.bus.LastEvent(ctx, events.CellSubject(e.RunID, e.CellID, "*"))
	if err != nil {
		return err
	}
	if last.Attempt > e.Attempt {
		return nil
	}
	s.log.Info("retrying an errored cell", "run", e.RunID, "cell", e.CellID, "attempt", e.Attempt)
	job := events.LaunchJob{RunID: e.RunID, CellID: e.CellID, Epoch: epoch, AttemptBase: e.Attempt}
	return s.bus.PublishWork(ctx, events.LaunchSubject, fmt.Sprintf("%s/%s/retry%d", e.RunID, e.CellID, e.Attempt), job)
}

func isTerminal(status string) bool {
	return bus.TerminalStatus(status)
}

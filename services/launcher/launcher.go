// Package launcher runs the solve phase of cells: for each launch job it
// reads the cell's plan and task (cellrun), looks up the harness's arm
// (harness.Arm), lets the arm prepare its image, starts the sandbox the arm
// placed, runs the arm's solve and records everything as events; then it
// hands the still-running sandbox to the verifier on this node with a
// verify job, or records the verdict of an arm that scores itself. It
// knows no harness kind: every harness rule lives in its arm.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/trees"
	"github.com/proctor-eval/proctor/pkg/verify"
)

// Source is the envelope source of the launcher's events.
const Source = "launcher"

// Config configures a launcher. The zero value means defaults.
type Config struct {
	// Node names this machine; verify jobs go to verify.<Node>. Default:
	// the host name.
	Node string
	// Concurrency is how many cells run at once (default 2 × CPUs).
	Concurrency int
	// AckWait is how long a job may go without a heartbeat before another
	// launcher gets it (default 60 s; heartbeats every AckWait/3).
	AckWait time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Host is the driver of host-process sandboxes (command arms); nil
	// means a process.Driver with Host set.
	Host sandbox.Driver
	// Slots, when set, schedule the cells of this node with this
	// process's verifier (see Slots): a cell waits for a sandbox slot once
	// its image is ready and for a solve slot once its sandbox is (both
	// recorded as queue_sec); a handed-over cell keeps its sandbox slot
	// until its verifier releases it. The launcher then takes
	// Slots.Pulls() jobs at a time instead of Concurrency.
	Slots *Slots
	// ReapEvery is how often the launcher reaps sandboxes of cells no
	// one owns any more (see Reap; at start too; default AckWait), when
	// its driver is a Reaper.
	ReapEvery time.Duration
	// StoreOutputs keeps each cell's output directory on this node and
	// stores it in the PROCTOR_TREES bucket before the terminal event
	// this launcher publishes (the Verdict of an arm that scores itself
	// or of a multi-step task, or CellErrored), then removes it from this
	// node (verifier.Config.StoreOutputs).
	StoreOutputs bool
	// Getenv reads proctor's environment for the arms (harness.Env.Getenv)
	// and the verifier phases this launcher runs; nil means os.Getenv.
	Getenv func(string) string
	// TreeCacheBytes bounds this node's cache of fetched trees
	// ($PROCTOR_HOME/trees) in bytes, least recently used trees removed
	// first, never one a cell holds (trees.Cache.MaxBytes); 0 is no
	// bound. The verifier of the node shares the cache.
	TreeCacheBytes int64
}

// Validate fills defaults and checks the config.
func (c *Config) Validate() error {
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("launcher: node name: %w", err)
		}
		c.Node = NodeName(h)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency()
	}
	if c.AckWait <= 0 {
		c.AckWait = time.Minute
	}
	if c.ReapEvery <= 0 {
		c.ReapEvery = c.AckWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.Host == nil {
		c.Host = &process.Driver{Host: true}
	}
	return nil
}

// Service is a launcher.
type Service struct {
	cfg    Config
	bus    *bus.Bus
	driver sandbox.Driver
	log    *slog.Logger
	// ctl follows the runs' control messages while Run serves (nil
	// before: Launch then reads the control state from the run index
	// only).
	ctl *bus.Controls

	runMu   sync.Mutex
	running map[string]*running // by run/cell: the jobs being handled (hold)
	// solves are the solves in progress here, which a pause --now
	// freezes (freeze.go).
	solves solveSet
}

// New returns a launcher that runs container sandboxes with driver (the
// abilities an arm needs, such as sandbox.ImageBuilder, are found on it by
// type assertion) and host sandboxes with cfg.Host.
func New(cfg Config, b *bus.Bus, driver sandbox.Driver) (*Service, error) {
	if b == nil || driver == nil {
		return nil, errors.New("launcher: nil bus or sandbox driver")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, bus: b, driver: driver, log: cfg.Logger.With("service", Source, "node", cfg.Node), running: map[string]*running{}}, nil
}

// Run serves launch jobs until ctx ends, then waits for the cells in
// flight (which stop at once: their execs see the cancelled context, their
// sandboxes are destroyed, and their jobs are left unacked for another
// launcher).
func (s *Service) Run(ctx context.Context) error {
	cons, err := s.bus.WorkConsumer(ctx, "launcher", events.LaunchSubject, s.cfg.AckWait, 10000)
	if err != nil {
		return err
	}
	if s.ctl, err = s.bus.WatchControls(); err != nil {
		return err
	}
	defer s.ctl.Close()
	s.ctl.OnControl(s.onControl)
	if r, ok := s.driver.(Reaper); ok {
		go s.reapLoop(ctx, r)
	}
	pulls := s.cfg.Concurrency
	if s.cfg.Slots != nil {
		pulls = s.cfg.Slots.Pulls()
	}
	return s.bus.Serve(ctx, cons, pulls, s.cfg.AckWait/3, s.handle)
}

// ClaimedMsg is the message of the debug line a launcher logs when it
// takes a launch job: run, cell, delivery (1 for the first) and queued
// (a time.Duration: the job stored on the work queue to taken).
const ClaimedMsg = "launch job claimed"

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	var job events.LaunchJob
	e := events.Envelope{Data: m.Data(), Type: "LaunchJob"}
	if err := events.Into(e, &job); err != nil {
		s.log.Error("bad launch job", "err", err)
		_ = m.Term()
		return
	}
	if md, err := m.Metadata(); err == nil {
		// The dispatch latency: the job stored on the work queue to
		// this launcher taking it (the scale rig reads these lines).
		s.log.Debug(ClaimedMsg, "run", job.RunID, "cell", job.CellID, "delivery", md.NumDelivered, "queued", time.Since(md.Timestamp))
	}
	held, done := s.hold(ctx, job)
	if held == nil {
		// This process ran the job to its end while this delivery waited:
		// the same job, given again.
		s.log.Info("a job this launcher ran was delivered again (its acks were lost): acked", "run", job.RunID, "cell", job.CellID)
		_ = m.Ack()
		return
	}
	var err error
	if delivery := bus.Attempt(m); delivery >= bus.MaxDeliver {
		err = s.Poison(ctx, job, job.AttemptBase+delivery)
	} else {
		err = s.Launch(ctx, job, job.AttemptBase+delivery)
	}
	done(err == nil && ctx.Err() == nil)
	switch {
	case ctx.Err() != nil:
		// Shutting down: leave the job for another launcher.
		_ = m.Nak()
	case err != nil:
		s.log.Error("launch", "cell", job.CellID, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
	default:
		_ = m.Ack()
	}
}

// running is a launch job this process is handling.
type running struct {
	job  events.LaunchJob
	done chan struct{} // closed when its handling ended
	ok   bool          // the job was done (its Launch returned nil)
}

// hold makes the caller the one handler in this process of job's cell.
// When another job of the cell is being handled here, it first waits for
// that one to end. If that was a delivery of the same job (JetStream
// delivers a job again when its in-progress acks are lost, as when the
// server this process is connected to dies) and it did the job, hold
// returns nil and the caller acks the delivery; else the caller handles
// the job itself: the same job's next attempt, or another job of the cell
// (a retry the aggregator published on the terminal event of the attempt
// whose handling was still ending).
// The returned done records the outcome and lets the next one in; with
// ctx ended hold returns a no-op done and the caller's Launch sees ctx.
func (s *Service) hold(ctx context.Context, job events.LaunchJob) (*running, func(ok bool)) {
	key := job.RunID + "/" + job.CellID
	for {
		s.runMu.Lock()
		r, busy := s.running[key]
		if !busy {
			mine := &running{job: job, done: make(chan struct{})}
			s.running[key] = mine
			s.runMu.Unlock()
			return mine, func(ok bool) {
				s.runMu.Lock()
				mine.ok = ok
				delete(s.running, key)
				close(mine.done)
				s.runMu.Unlock()
			}
		}
		s.runMu.Unlock()
		s.log.Info("a job of a cell this launcher runs was delivered again (its acks were lost): waiting for the running one", "run", job.RunID, "cell", job.CellID)
		select {
		case <-r.done:
			if r.ok && r.job == job {
				return nil, func(bool) {}
			}
		case <-ctx.Done():
			return &running{}, func(bool) {}
		}
	}
}

// launch runs the attempt once the run is not paused: the cell takes its
// slots as it goes (cellSlots: no slot while its image is built, a
// sandbox slot, then a solve slot) and releases what it still holds when
// it ends; errPaused when the run was paused meanwhile.
func (s *Service) launch(ctx context.Context, job events.LaunchJob, attempt int) error {
	c := &cell{s: s, job: job, attempt: attempt, slots: cellSlots{s: s.cfg.Slots}}
	defer c.releaseSlots()
	return c.run(ctx)
}

// Poison ends a cell whose launch job reached its last delivery
// (bus.MaxDeliver) without a terminal event: each earlier attempt's
// launcher stopped in the middle of the cell (a poison cell: an agent that
// crashes its launcher). It is not run again: the cell's containers and
// networks on this node are removed (when the driver is a Reaper) and the
// cell is errored, class infra, naming the deliveries and the last event
// recorded. A job of an ended run, or of a cell that has a terminal
// event, is only acked. The error is the event log's (retry).
func (s *Service) Poison(ctx context.Context, job events.LaunchJob, attempt int) error {
	cr, err := s.openCell(ctx, job.RunID, job.CellID, attempt)
	if err != nil {
		return err
	}
	defer cr.Close()
	if cr.Ended() || cr.Stale(job.Epoch) {
		return nil
	}
	lastDesc := "nothing"
	var last events.Envelope
	if err := s.bus.Read(ctx, []string{events.CellSubject(job.RunID, job.CellID, "*")}, func(e events.Envelope) error {
		last = e
		return nil
	}); err != nil {
		return err
	}
	if last.Type != "" {
		if last.Type == events.Verdict || last.Type == events.CellErrored {
			return nil
		}
		lastDesc = fmt.Sprintf("%s of attempt %d", last.Type, last.Attempt)
	}
	if r, ok := s.driver.(Reaper); ok {
		if err := r.ReapCell(ctx, job.RunID, job.CellID); err != nil {
			s.log.Warn("remove a poison cell's sandboxes", "cell", job.CellID, "err", err)
		}
	}
	msg := fmt.Sprintf("launch job delivered %d times: the launcher of each attempt stopped before the cell ended (last recorded: %s); not run again", bus.MaxDeliver, lastDesc)
	cr.Dir.Logf("errored (infra): %s", msg)
	e := events.Must(events.CellErrored, job.RunID, job.CellID, attempt, Source, events.CellErroredData{ErrorClass: string(events.ClassInfra), Error: msg})
	if err := s.bus.Publish(ctx, e); err != nil {
		return err
	}
	return s.bus.Flush(ctx)
}

// VerifyJobID is the id of a cell attempt's verify job (its Nats-Msg-Id).
func VerifyJobID(runID, cellID string, attempt int) string {
	return fmt.Sprintf("%s/%s/%d", runID, cellID, attempt)
}

// cell is one launch in progress; it is the arm's harness.Env.
type cell struct {
	s       *Service
	job     events.LaunchJob
	attempt int
	cr      *cellrun.Cell
	task    *task.Task
	// queueSec is how long the cell waited for its slots (seconds);
	// handedOver is set once its sandbox went to a verifier.
	queueSec      float64
	solveQueueSec float64
	handedOver    bool
	slots         cellSlots
	// storeFailed: storing the output failed once; the directory is
	// kept and the cell's errored event names no output.
	storeFailed bool
}

// QueueSec is how long the cell waited for its slots so far, in seconds
// (harness.TaskImage records it on ImageBuilt; the image phase comes
// before any slot, so it is 0 there under Slots, and SandboxStarted
// records the wait for the sandbox slot).
func (c *cell) QueueSec() float64 { return c.queueSec }

func (c *cell) RunID() string                { return c.job.RunID }
func (c *cell) CellID() string               { return c.job.CellID }
func (c *cell) Node() string                 { return c.s.cfg.Node }
func (c *cell) Task() *task.Task             { return c.task }
func (c *cell) Plan() events.CellPlannedData { return c.cr.Plan }
func (c *cell) Spec() events.RunSpec         { return c.cr.Spec }

// FetchTree fetches a stored input tree into this node's cache
// (harness.TreeFetcher).
func (c *cell) FetchTree(ctx context.Context, digest string) (string, error) {
	return c.cr.FetchTree(ctx, digest)
}

var _ harness.TreeFetcher = (*cell)(nil)

func (c *cell) Dir() cellfs.Dir        { return c.cr.Dir }
func (c *cell) Driver() sandbox.Driver { return c.s.driver }
func (c *cell) Host() sandbox.Driver   { return c.s.cfg.Host }

// Getenv reads proctor's environment through the launcher's
// Config.Getenv.
func (c *cell) Getenv(k string) string { return c.s.cfg.Getenv(k) }

// Emit publishes one event of the cell at time at (zero: now).
func (c *cell) Emit(ctx context.Context, t events.Type, data any, at time.Time) error {
	e := events.Must(t, c.job.RunID, c.job.CellID, c.attempt, Source, data)
	if !at.IsZero() {
		e.At = at.UTC()
	}
	return c.s.bus.Publish(ctx, e)
}

// storeOutput names in v the stored output directory of the cell's
// attempt when the launcher stores outputs (Config.StoreOutputs). A
// failure is the cell's, class infra (its directory is then kept).
func (c *cell) storeOutput(ctx context.Context, v *events.VerdictData) error {
	if !c.s.cfg.StoreOutputs {
		return nil
	}
	o, err := c.cr.StoreOutput(ctx, c.attempt)
	if err != nil {
		c.storeFailed = true
		return events.Classf(events.ClassInfra, "store the cell's output: %w", err)
	}
	v.Output = o
	return nil
}

// publishTerminal publishes the cell's terminal event (Verdict or
// CellErrored) and, once the log holds it, removes this node's copy of
// the output directory it names as stored (output non-nil); a directory
// whose store failed is kept.
func (c *cell) publishTerminal(ctx context.Context, t events.Type, data any, output *events.OutputObject) error {
	if err := c.emit(ctx, t, data); err != nil {
		return err
	}
	if err := c.s.bus.Flush(ctx); err != nil {
		return err
	}
	if output != nil {
		if err := c.cr.RemoveOutput(); err != nil {
			c.s.log.Warn("remove a stored cell's directory", "cell", c.job.CellID, "err", err)
		}
	}
	return nil
}

func (c *cell) emit(ctx context.Context, t events.Type, data any) error {
	return c.Emit(ctx, t, data, time.Time{})
}

// end decides what an error of the cell's work means (the same rule as
// the verifier's): a cancelled ctx is returned for a retry elsewhere, an
// engine that did not answer a request (sandbox.ErrEngineTimeout) ends the
// cell errored as infra, whatever step met it, a ClassError ends the cell
// errored with its class, any other error ends it errored as class dflt.
func (c *cell) end(ctx context.Context, dflt events.ErrorClass, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	class, ok := events.ClassOf(err)
	if !ok {
		class = dflt
	}
	if errors.Is(err, sandbox.ErrEngineTimeout) {
		class = events.ClassInfra
	}
	c.Dir().Logf("errored (%s): %v", class, err)
	data := events.CellErroredData{ErrorClass: string(class), Error: err.Error()}
	if c.s.cfg.StoreOutputs && c.cr != nil && !c.storeFailed {
		// Its logs say why it errored: stored as a verdict's are.
		o, serr := c.cr.StoreOutput(ctx, c.attempt)
		if serr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.Dir().Logf("store the cell's output: %v (kept on node %s)", serr, c.s.cfg.Node)
			c.s.log.Warn("store an errored cell's output", "cell", c.job.CellID, "err", serr)
		}
		data.Output = o
	}
	return c.publishTerminal(ctx, events.CellErrored, data, data.Output)
}

func (c *cell) run(ctx context.Context) error {
	cr, err := c.s.openCell(ctx, c.job.RunID, c.job.CellID, c.attempt)
	if err != nil {
		return err
	}
	defer cr.Close()
	if cr.Ended() || cr.Stale(c.job.Epoch) {
		c.s.log.Info("dropping a job of an ended, expired or resumed run", "run", c.job.RunID, "cell", c.job.CellID,
			"status", cr.Status, "expired", cr.Expired, "epoch", c.job.Epoch, "run_epoch", cr.Epoch)
		return nil
	}
	if cc := cr.Cancelled(); cc != nil {
		return c.s.recordCancelled(ctx, c.job, c.attempt, cc)
	}
	if cr.Control.Paused {
		return errPaused
	}
	if done, err := cellrun.Settled(ctx, c.s.bus, c.job.RunID, c.job.CellID, c.job.AttemptBase+1); err != nil || done {
		if done {
			c.s.log.Info("dropping a redelivered job of a cell already ended", "run", c.job.RunID, "cell", c.job.CellID, "attempt", c.attempt)
		}
		return err
	}
	c.cr = cr
	if err := c.Dir().Ensure(); err != nil {
		return c.end(ctx, events.ClassInfra, err)
	}
	if c.attempt > 1 {
		reason := "launch job redelivered"
		if c.job.AttemptBase == c.attempt-1 {
			reason = "run resumed or cell retried"
		}
		if err := c.emit(ctx, events.CellSuperseded, events.CellSupersededData{PreviousAttempt: c.attempt - 1, Reason: reason}); err != nil {
			return err
		}
	}
	c.Dir().Logf("attempt %d on node %s", c.attempt, c.s.cfg.Node)

	if c.task, err = cr.LoadTask(ctx); err != nil {
		return c.end(ctx, events.ClassInfra, err)
	}
	arm, err := harness.Lookup(cr.Plan.Harness)
	if err != nil {
		return c.end(ctx, events.ClassRefused, err)
	}
	p, err := arm.Prepare(ctx, c)
	if err != nil {
		return c.end(ctx, events.ClassInfra, err)
	}
	if c.slots.s != nil {
		if err := c.takeSandbox(ctx); err != nil {
			return err
		}
		p.Spec.Lifetime = aheadLifetime(p.Spec.Lifetime, c.task.AgentTimeoutSec)
	}
	h, err := p.Driver.Start(ctx, p.Spec)
	if err != nil {
		return c.end(ctx, events.ClassSandbox, err)
	}
	handedOver, destroyed := false, false
	teardown := func() {
		if handedOver || destroyed {
			return
		}
		destroyed = true
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
		defer cancel()
		if err := p.Driver.Destroy(dctx, h); err != nil {
			c.s.log.Warn("destroy", "cell", c.job.CellID, "err", err)
		}
	}
	defer teardown()
	sb := events.SandboxStartedData{Driver: h.Driver, ID: h.ID, State: h.State, Node: c.s.cfg.Node, QueueSec: round3(c.queueSec)}
	var lim events.SandboxLimits
	if p.Networks.Start != "" {
		// A sandbox with a network plan is a container: its network and
		// limits are recorded.
		lim = events.SandboxLimits(h.Limits)
		sb.Network, sb.Limits = p.Networks.Start, &lim
		c.Dir().Logf("sandbox %.12s started on network %s (cpus %g, memory %d MiB, pids %d; 0 = unlimited)", h.ID, p.Networks.Start, lim.CPUs, lim.MemoryMB, lim.PidsLimit)
	}
	// SandboxStarted says the cell runs: the sandbox (perhaps started
	// ahead of its solve slot, under Slots) is recorded, at the time it
	// started, once the cell passed its solve gate, so a cell waiting for
	// a slot or for a paused run stays queued. One whose launcher dies
	// before is not in the log: its keep-alive ends with its lifetime and
	// the reaper removes it with the run.
	sbAt, sbDone := time.Now(), false
	recordStart := func() error {
		if sbDone {
			return nil
		}
		sbDone = true
		return c.Emit(ctx, events.SandboxStarted, sb, sbAt)
	}
	if err := c.environmentHealthy(ctx, p, h); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		teardown() // before the terminal event: an ended cell owns no container
		if err := recordStart(); err != nil {
			return err
		}
		return c.end(ctx, events.ClassInfra, err)
	}
	if len(c.task.Steps) > 0 && !harness.SolvesSteps(arm) {
		if err := c.solveGate(ctx, teardown); err != nil {
			return err
		}
		if err := recordStart(); err != nil {
			return err
		}
		return c.runSteps(ctx, arm, p, h, teardown)
	}

	snap := c.snapshotShadows(ctx, p, h)
	// An arm whose solve can be prepared has its engine work done now,
	// while the cell waits for its slot: the gate only releases it.
	solve := func(ctx context.Context) (harness.Outcome, error) { return arm.Solve(ctx, c, p, h) }
	if sp, ok := arm.(harness.SolvePreparer); ok {
		// The sandbox is ready: the sandboxes started ahead need not wait
		// for this preparation too (the engine starts them beside it).
		c.startDone()
		ps, err := sp.PrepareSolve(ctx, c, p, h)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			teardown() // before the terminal event: an ended cell owns no container
			if err := recordStart(); err != nil {
				return err
			}
			return c.end(ctx, events.ClassInfra, err)
		}
		// A cell that never passes its gate (cancelled, paused, its
		// context ended) runs nothing of the prepared solve.
		defer ps.Discard()
		solve = ps.Solve
	}
	if err := c.solveGate(ctx, teardown); err != nil {
		return err
	}
	if err := recordStart(); err != nil {
		return err
	}
	sctx, solved, err := c.beginSolve(ctx, p.Driver, h, "")
	if err != nil {
		return err
	}
	start := time.Now()
	out, err := solve(sctx)
	solved()
	c.endSolve()
	if oerr := c.recordHarness(ctx, "", start, out, err); oerr != nil && err == nil {
		err = oerr
	}
	// The egress proxy's decisions are recorded before Finished, also
	// after a failed solve (what the agent tried to reach is kept).
	if rerr := harness.RecordEgress(ctx, c, p.Driver, h); rerr != nil && err == nil {
		err = rerr
	}
	if ctx.Err() != nil {
		// The solve was cut short (a cancel, a Ctrl-C): whatever it
		// returned is no attempt's result.
		return ctx.Err()
	}
	if err == nil {
		err = harness.NoAttemptErrorIn(c.Dir(), p, out.Finished) // never verified: missing data
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		teardown() // before the terminal event: an ended cell owns no container
		if _, classed := events.ClassOf(err); classed && out.Finished.Reason != "" {
			// The solve ran and says why the cell has no verdict (no
			// attempt, a provider error, the treatment not offered):
			// its Finished (usage, reason, what the agent reported) is
			// kept beside the error.
			if err := c.emit(ctx, events.Finished, out.Finished); err != nil {
				return err
			}
		}
		return c.end(ctx, events.ClassInfra, err)
	}
	fin := out.Finished
	fin.QueueSec = round3(c.solveQueueSec)
	if out.Verdict == nil {
		c.tamperFindings(ctx, p, h, snap, &fin)
	}
	// The sandbox is fresh, so any OOM kill so far is the solve's.
	if oc, ok := p.Driver.(sandbox.OOMCounter); ok {
		if n, err := oc.OOMKills(ctx, h); err != nil {
			c.Dir().Logf("solve: OOM kills unknown: %v", err)
		} else if n > 0 {
			fin.OOMKilled = true
			c.Dir().Logf("solve: a process was OOM-killed at the memory limit (%d MiB)", lim.MemoryMB)
		}
	}
	if err := c.emit(ctx, events.Finished, fin); err != nil {
		return err
	}
	if out.Verdict != nil {
		// The arm scored itself: nothing to hand over. The sandbox goes
		// first, so the stored output holds every line of the cell.
		teardown()
		if err := c.storeOutput(ctx, out.Verdict); err != nil {
			return c.end(ctx, events.ClassInfra, err)
		}
		return c.publishTerminal(ctx, events.Verdict, *out.Verdict, out.Verdict.Output)
	}
	if err := c.s.bus.Flush(ctx); err != nil {
		return err
	}
	vj := events.VerifyJob{RunID: c.job.RunID, CellID: c.job.CellID, Attempt: c.attempt, Node: c.s.cfg.Node, Sandbox: sb, Epoch: c.job.Epoch, Workdir: c.workTree(p)}
	c.passSandbox()
	if err := c.s.bus.PublishWork(ctx, events.VerifySubject(c.s.cfg.Node), VerifyJobID(c.job.RunID, c.job.CellID, c.attempt), vj); err != nil {
		c.reclaimSandbox()
		return err
	}
	handedOver, c.handedOver = true, true
	return nil
}

// NodeName makes a host name usable as a subject token.
func NodeName(host string) string {
	b := []byte(host)
	for i, ch := range b {
		if ch == '.' || ch == '*' || ch == '>' || ch == ' ' {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "local"
	}
	return string(b)
}

// environmentHealthy runs the task's [environment.healthcheck] in a
// container sandbox once it has started and before the solve (Harbor runs
// it before the agent's setup), as root in the working directory, with
// Docker HEALTHCHECK semantics (healthcheck). An environment that never
// becomes healthy is the task's: the error is ClassSandbox naming the
// command and its last exit. No healthcheck, or a host process, is nil.
func (c *cell) environmentHealthy(ctx context.Context, p harness.Placement, h *sandbox.Handle) error {
	hc := c.task.Healthcheck
	if hc == nil || p.Networks.Start == "" {
		return nil
	}
	workdir := p.Workdir
	if workdir == "" {
		workdir = p.Image.Workdir
	}
	err := healthcheck(ctx, p.Driver, h, hc, workdir, c.Dir())
	var sf *stepFailure
	if errors.As(err, &sf) {
		return events.Classf(events.ClassSandbox, "the environment is unhealthy: [environment.healthcheck] %s", strings.TrimPrefix(sf.msg, "healthcheck "))
	}
	return err
}

// snapshotShadows lists, before the solve of a container sandbox, the
// files of the work tree and the verifier's import path that could shadow
// its runner or standard modules (verify.SnapshotShadows), for
// tamperFindings to compare after it; under --agent-user task, whose
// solve may run as root, also the system's directories it could change
// (the verifier's PATH, the system's Python, the shared libraries),
// unless the verifier runs in a fresh container of its own (a separate
// verifier gets the work tree, not the system the solve changed). A
// sandbox that cannot be scanned is logged and gives nil: its row then
// says the scan was unavailable.
func (c *cell) snapshotShadows(ctx context.Context, p harness.Placement, h *sandbox.Handle) *verify.ShadowSnapshot {
	if p.Networks.Start == "" {
		return nil
	}
	system := harness.AgentUserMode(c.Spec()) == harness.AgentUserTask && c.task.VerifierMode != task.VerifierSeparate
	snap, err := verify.SnapshotShadows(ctx, p.Driver, h, c.workTree(p), c.task.VerifierEnv, system)
	if err != nil {
		c.Dir().Logf("tamper scan before the solve: %v", err)
		return nil
	}
	return snap
}

// workTree is the solve's working directory in its sandbox.
func (c *cell) workTree(p harness.Placement) string {
	if p.Workdir != "" {
		return p.Workdir
	}
	if p.Image.Workdir != "" {
		return p.Image.Workdir
	}
	return "/"
}

// tamperFindings records in fin the files the solve created or changed
// that shadow the verifier's runner or standard modules (the cell is then
// suspect), and in fin.Isolation["tamper_scan"] why there are none when
// the sandbox could not be scanned. Host processes are not scanned.
func (c *cell) tamperFindings(ctx context.Context, p harness.Placement, h *sandbox.Handle, snap *verify.ShadowSnapshot, fin *events.FinishedData) {
	if p.Networks.Start == "" {
		return
	}
	note := func(why string) {
		if fin.Isolation == nil {
			fin.Isolation = map[string]any{}
		}
		fin.Isolation["tamper_scan"] = why
	}
	if snap == nil {
		note("unavailable: the work tree could not be scanned before the solve (run.log)")
		return
	}
	found, err := snap.Findings(ctx, p.Driver, h)
	if err != nil {
		c.Dir().Logf("tamper scan after the solve: %v", err)
		note("unavailable: " + err.Error())
		return
	}
	fin.TamperFindings = found
	if snap.SystemUnavailable != "" {
		note("partial: the system's directories were not listed: " + snap.SystemUnavailable)
	}
	if n := len(snap.RemovedCaches); n > 0 {
		c.Dir().Logf("removed %d bytecode caches the solve wrote in the system's Python (e.g. %s)", n, snap.RemovedCaches[0])
	}
	for _, f := range found {
		c.Dir().Logf("suspect: the solve %s %s (%s)", f.Change, f.Path, f.Shadows)
	}
}

// openCell opens an attempt of a job's cell (cellrun.OpenOnNode): with
// StoreOutputs its output directory is on this node; the trees it fetches
// go to the node's bounded cache.
func (s *Service) openCell(ctx context.Context, runID, cellID string, attempt int) (*cellrun.Cell, error) {
	node := cellrun.Node{Attempt: attempt, Trees: trees.Cache{MaxBytes: s.cfg.TreeCacheBytes}}
	if s.cfg.StoreOutputs {
		node.Outputs, node.Make = cellrun.NodeOutputs(), true
	}
	return cellrun.OpenOnNode(ctx, s.bus, runID, cellID, node)
}

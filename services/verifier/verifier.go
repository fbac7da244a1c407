// Package verifier scores cells: for each verify job on this node's queue
// it runs the task's test script in the cell's sandbox (left running by the
// launcher), reads the reward as DESIGN §4 says, records a Verdict, copies
// the logs out and destroys the sandbox.
package verifier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/trees"
	"github.com/proctor-eval/proctor/pkg/verify"
)

// Source is the envelope source of the verifier's events.
const Source = "verifier"

// Config configures a verifier. Node must match the launchers' node name on
// this machine.
type Config struct {
	Node string
	// Concurrency is how many verifiers run at once (default 4).
	Concurrency int
	// AckWait as for the launcher (default 60 s).
	AckWait time.Duration
	// Heartbeat is how often the verifier renews its node's heartbeat in
	// KV PROCTOR_NODES (default bus.NodeBeatEvery, 10 s): an aggregator
	// errors the cells waiting on a node silent for longer than its
	// NodeLost bound (docs/decisions/2026-12-01-lost-nodes.md).
	Heartbeat time.Duration
	Logger    *slog.Logger
	// Slots, when set, is given back the slot of each verify job once its
	// sandbox is destroyed (launcher.Slots: the launcher in the same
	// process passed it on with the job).
	Slots interface{ Release(jobID string) }
	// StoreOutputs keeps each cell's output directory on this node
	// (cellrun.NodeOutputs), stores it in the PROCTOR_TREES bucket
	// before its terminal event (Verdict or CellErrored) is published,
	// names the object in that event (a cluster whose driver does not see
	// this node's disk), and removes it from this node once the event is
	// published. A single-process run leaves it off.
	StoreOutputs bool
	// Getenv reads proctor's environment (the host's proxy variables a
	// public verifier gets: verify.TestSpec.Getenv); nil means os.Getenv.
	Getenv func(string) string
	// TreeCacheBytes bounds this node's cache of fetched trees, as
	// launcher.Config.TreeCacheBytes.
	TreeCacheBytes int64
}

// Validate fills defaults and checks the config.
func (c *Config) Validate() error {
	if c.Node == "" {
		return errors.New("verifier: Config.Node is required (the launchers' node name)")
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.AckWait <= 0 {
		c.AckWait = time.Minute
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = bus.NodeBeatEvery
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Service is a verifier.
type Service struct {
	cfg    Config
	bus    *bus.Bus
	driver sandbox.Driver
	log    *slog.Logger
	// ctl follows the runs' control messages while Run serves: a cancel
	// stops the tests of the cells it names.
	ctl *bus.Controls
}

// New returns a verifier for the sandboxes of this node, driven by driver:
// the launchers' driver, with the abilities sandbox.Freezer and
// sandbox.FileCopier (without them a cell is errored, infra: a reward read
// from a sandbox that could not be frozen, or through the host, is not
// trusted) and, for a verifier whose network is not the sandbox's
// (verify.UseNetwork), sandbox.NetworkMover or, to join the bridge,
// sandbox.BridgeJoiner.
func New(cfg Config, b *bus.Bus, driver sandbox.Driver) (*Service, error) {
	if b == nil || driver == nil {
		return nil, errors.New("verifier: nil bus or sandbox driver")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, bus: b, driver: driver, log: cfg.Logger.With("service", Source, "node", cfg.Node)}, nil
}

// Run serves verify.<node> jobs until ctx ends, renewing the node's
// heartbeat (bus.Heartbeat, every Config.Heartbeat) meanwhile.
func (s *Service) Run(ctx context.Context) error {
	beat, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.bus.Heartbeat(beat, s.cfg.Node, s.cfg.Heartbeat, s.log)
	}()
	defer func() { stop(); <-done }()
	cons, err := s.bus.WorkConsumer(ctx, "verifier-"+s.cfg.Node, events.VerifySubject(s.cfg.Node), s.cfg.AckWait, 10000)
	if err != nil {
		return err
	}
	if s.ctl, err = s.bus.WatchControls(); err != nil {
		return err
	}
	defer s.ctl.Close()
	return s.bus.Serve(ctx, cons, s.cfg.Concurrency, s.cfg.AckWait/3, s.handle)
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	var job events.VerifyJob
	if err := events.Into(events.Envelope{Data: m.Data(), Type: "VerifyJob"}, &job); err != nil {
		s.log.Error("bad verify job", "err", err)
		_ = m.Term()
		return
	}
	err := s.Verify(ctx, job)
	if ctx.Err() != nil {
		// Interrupted: the job stays for a verifier restarted on this node.
		_ = m.Nak()
		return
	}
	if err != nil {
		s.log.Error("verify", "cell", job.CellID, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	_ = m.Ack()
}

// Verify scores one verify job: it runs the task's tests in the job's
// sandbox, destroys the sandbox, and then records the cell's terminal
// event (Verdict, or CellErrored when the cell cannot be scored), so a run
// is never reported finished while one of its containers still exists. A
// job of an ended run only destroys the sandbox.
//
// The sandbox is destroyed only once the cell's terminal event is decided:
// when ctx ends (SIGTERM) or the event log cannot be read or written, the
// sandbox is left as it is and the error returned, so the job, given back,
// finds it again (a verifier restarted on this node). A job whose attempt
// already has a VerifyStarted (its verifier died during the tests) is not
// run a second time in the same container: the cell is errored, class
// infra, and the sandbox destroyed
// (docs/decisions/2026-12-01-verifier-sandbox-on-stop.md). Once the sandbox is gone
// the terminal event is published with retries until ctx ends.
//
// With Config.StoreOutputs the cell's output directory on this node is
// stored after the sandbox is gone and before the terminal event, which
// names it (a Verdict whose store fails becomes CellErrored, class
// infra); once the event is published the directory is removed from
// this node. A directory whose store failed is kept.
//
// A cell cancelled (its run's control state, or a cancel message while
// its tests run) is not scored: its tests are stopped, its sandbox
// destroyed, and it is errored, class cancelled.
func (s *Service) Verify(ctx context.Context, job events.VerifyJob) error {
	h := &sandbox.Handle{Driver: job.Sandbox.Driver, ID: job.Sandbox.ID, State: job.Sandbox.State}
	cctx, done := s.ctl.Cell(ctx, job.RunID, job.CellID)
	defer done()
	end, cr, err := s.verify(cctx, job, h)
	if cr != nil {
		// Held until its output is stored and removed (the node's
		// sweeper leaves a held directory alone).
		defer cr.Close()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if c := bus.CancelledBy(cctx); c != nil && (err != nil || end != nil && end.Type == events.CellErrored) {
		// Stopped by the cancel (a verdict decided before it stands).
		e := event(job, events.CellErrored, events.CellErroredData{ErrorClass: string(events.ClassCancelled), Error: c.Error()})
		end, err = &e, nil
	}
	if err != nil {
		return err // the log failed: keep the sandbox for the retry
	}
	s.destroy(ctx, h)
	if s.cfg.Slots != nil {
		s.cfg.Slots.Release(fmt.Sprintf("%s/%s/%d", job.RunID, job.CellID, job.Attempt))
	}
	if end == nil {
		return nil
	}
	var stored *events.OutputObject
	if s.cfg.StoreOutputs && cr != nil {
		// After the sandbox is gone, so the stored copy holds every line
		// written for the cell.
		if end, stored, err = s.storeOutput(ctx, job, cr, *end); err != nil {
			return err
		}
	}
	err = bus.Retry(ctx, s.log, "publish the terminal event of "+job.CellID, func(ctx context.Context) error {
		return s.bus.PublishAll(ctx, *end)
	})
	if err == nil && stored != nil {
		if rerr := cr.RemoveOutput(); rerr != nil {
			s.log.Warn("remove a stored cell's directory", "cell", job.CellID, "err", rerr)
		}
	}
	return err
}

// storeOutput stores the cell's output directory (cellrun.StoreOutput)
// and returns end naming it, and what it names. A store that fails turns
// a Verdict into CellErrored, class infra (the cell is retried, its
// directory kept on this node); an errored cell stays errored, naming
// nothing. The error is ctx's: the job is given back.
func (s *Service) storeOutput(ctx context.Context, job events.VerifyJob, cr *cellrun.Cell, end events.Envelope) (*events.Envelope, *events.OutputObject, error) {
	o, err := cr.StoreOutput(ctx, job.Attempt)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		s.log.Warn("store a cell's output", "cell", job.CellID, "err", err)
		if end.Type == events.Verdict {
			cr.Dir.Logf("verifier errored: store the cell's output: %v (kept on node %s)", err, s.cfg.Node)
			e := event(job, events.CellErrored, events.CellErroredData{ErrorClass: string(events.ClassInfra), Error: "store the cell's output: " + err.Error()})
			return &e, nil, nil
		}
		cr.Dir.Logf("store the cell's output: %v (kept on node %s)", err, s.cfg.Node)
		return &end, nil, nil
	}
	var e events.Envelope
	switch end.Type {
	case events.Verdict:
		var v events.VerdictData
		if err := events.Into(end, &v); err != nil {
			return nil, nil, err
		}
		v.Output = o
		e = event(job, events.Verdict, v)
	case events.CellErrored:
		var d events.CellErroredData
		if err := events.Into(end, &d); err != nil {
			return nil, nil, err
		}
		d.Output = o
		e = event(job, events.CellErrored, d)
	default:
		return &end, nil, nil
	}
	return &e, o, nil
}

func (s *Service) destroy(ctx context.Context, h *sandbox.Handle) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
	defer cancel()
	if err := s.driver.Destroy(dctx, h); err != nil {
		s.log.Warn("destroy", "sandbox", h.ID, "err", err)
	}
}

func (s *Service) emit(ctx context.Context, job events.VerifyJob, t events.Type, data any) error {
	return s.bus.Publish(ctx, event(job, t, data))
}

func event(job events.VerifyJob, t events.Type, data any) events.Envelope {
	return events.Must(t, job.RunID, job.CellID, job.Attempt, Source, data)
}

// verify scores one cell and returns its terminal event (Verdict or
// CellErrored) for the caller to store the output of and publish once the
// sandbox is gone, and the opened cell (the caller closes it); a nil event when the job belongs
// to an ended run. The error is non-nil only when the event log cannot be
// read or written.
func (s *Service) verify(ctx context.Context, job events.VerifyJob, h *sandbox.Handle) (*events.Envelope, *cellrun.Cell, error) {
	cr, err := s.openCell(ctx, job.RunID, job.CellID, job.Attempt)
	if err != nil {
		return nil, nil, err
	}
	end, err := s.score(ctx, job, h, cr)
	return end, cr, err
}

// score is verify's work on the opened cell cr.
func (s *Service) score(ctx context.Context, job events.VerifyJob, h *sandbox.Handle, cr *cellrun.Cell) (*events.Envelope, error) {
	var err error
	if cr.Ended() || cr.Stale(job.Epoch) {
		return nil, nil
	}
	// A job redelivered after its verdict was recorded (the ack lost)
	// only destroys the sandbox (gone already): one terminal event per
	// attempt.
	if done, err := cellrun.Settled(ctx, s.bus, job.RunID, job.CellID, job.Attempt); err != nil || done {
		return nil, err
	}
	if c := cr.Cancelled(); c != nil {
		cr.Dir.Logf("errored (cancelled) before its tests: %v", c)
		e := event(job, events.CellErrored, events.CellErroredData{ErrorClass: string(events.ClassCancelled), Error: c.Error()})
		return &e, nil
	}
	dir := cr.Dir
	fail := func(err error) (*events.Envelope, error) {
		class, ok := events.ClassOf(err)
		if !ok || errors.Is(err, sandbox.ErrEngineTimeout) {
			class = events.ClassInfra // an engine that did not answer is infra, named in err
		}
		dir.Logf("verifier errored: %v", err)
		e := event(job, events.CellErrored, events.CellErroredData{ErrorClass: string(class), Error: err.Error()})
		return &e, nil
	}
	var started events.Envelope
	err = bus.Retry(ctx, s.log, "read cell "+job.CellID, func(ctx context.Context) error {
		started, err = s.bus.LastEvent(ctx, events.CellSubject(job.RunID, job.CellID, events.VerifyStarted))
		return err
	})
	if err == nil && started.Attempt == job.Attempt {
		// The tests of this attempt ran (in part) already: a verifier
		// died during them. The container's state after a partial test
		// run (reward files half written, processes stopped) is not
		// trusted, and test.sh never runs twice in one container.
		return fail(events.Classf(events.ClassInfra, "the verifier of attempt %d stopped during the tests (VerifyStarted at %s, no verdict); its sandbox is not scored a second time",
			job.Attempt, started.At.Format(time.RFC3339)))
	} else if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return nil, err
	}
	t, err := cr.LoadTask(ctx)
	if err != nil {
		return fail(err)
	}
	arm, err := harness.Lookup(cr.Plan.Harness)
	if err != nil {
		return fail(err)
	}
	network := job.Sandbox.Network
	separate := t.VerifierMode == task.VerifierSeparate
	if separate {
		// A fresh container of its own, on the verifier's network.
		network = arm.Networks(t).Verify
		if network != sandbox.NetworkBridge {
			network = sandbox.NetworkNone
		}
	} else {
		// The verifier's own network: the bridge for a public policy,
		// none at all for no-network (harness.Networks.Verify).
		if network, err = verify.UseNetwork(ctx, s.driver, h, network, arm.Networks(t).Verify); err != nil {
			return fail(err)
		}
	}
	if err := s.emit(ctx, job, events.VerifyStarted, events.VerifyStartedData{Node: s.cfg.Node, Network: network}); err != nil {
		return nil, err
	}
	// Only OOM kills during the tests are the verifier phase's.
	oc, hasOOM := s.driver.(sandbox.OOMCounter)
	var oomBefore int64
	oomErr := errors.New("no OOM counter")
	if hasOOM {
		oomBefore, oomErr = oc.OOMKills(ctx, h)
	}
	// Collect hooks run in the agent's sandbox after the solve, before
	// the tests (and, for a separate verifier, before the work tree is
	// carried over), as Harbor runs them.
	collected, err := verify.RunCollect(ctx, s.driver, h, t.VerifierCollect, dir)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return fail(err)
	}
	var v events.VerdictData
	if separate {
		v, err = s.runSeparate(ctx, job, t, h, dir, network)
		oomErr = errors.New("counted in the separate verifier's container")
	} else {
		v, err = s.runTests(ctx, t, h, dir, network)
	}
	if ctx.Err() != nil {
		// The tests were cut short (a cancel, a SIGTERM): no verdict.
		return nil, ctx.Err()
	}
	if err != nil {
		return fail(err)
	}
	v.Findings = append(collected, v.Findings...)
	// The task's artifacts, from the agent's sandbox, after the tests, as
	// Harbor collects them: into the cell's artifacts/.
	if _, err := verify.CollectArtifacts(ctx, s.driver, h, t.Artifacts, job.Workdir, dir); err != nil {
		dir.Logf("artifacts: %v", err)
	}
	if oomErr == nil {
		// Read after the freeze: the docker driver reads it from the
		// host's cgroup filesystem when the engine runs on this machine;
		// an engine elsewhere refuses the exec into a frozen sandbox.
		if n, err := oc.OOMKills(ctx, h); err != nil {
			dir.Logf("verify: OOM kills unknown: %v", err)
		} else if n > oomBefore {
			v.OOMKilled = true
			dir.Logf("verify: %d process(es) OOM-killed at the memory limit", n-oomBefore)
		}
	} else if hasOOM && !separate {
		dir.Logf("verify: OOM kills unknown: %v", oomErr)
	}
	if v.Reward != nil && !v.TimedOut {
		_ = dir.WriteReward(*v.Reward)
	}
	e := event(job, events.Verdict, v)
	return &e, nil
}

// runTests scores a single-step task's tests in h (verify.RunTests).
func (s *Service) runTests(ctx context.Context, t *task.Task, h *sandbox.Handle, dir cellfs.Dir, network string) (events.VerdictData, error) {
	spec := verify.TaskTests(t)
	spec.Network, spec.Getenv = network, s.cfg.Getenv
	return verify.RunTests(ctx, s.driver, spec, h, dir)
}

// openCell opens an attempt of a job's cell (cellrun.OpenOnNode): with
// StoreOutputs its output directory is on this node; the trees it fetches
// go to the node's bounded cache.
func (s *Service) openCell(ctx context.Context, runID, cellID string, attempt int) (*cellrun.Cell, error) {
	node := cellrun.Node{Attempt: attempt, Trees: trees.Cache{MaxBytes: s.cfg.TreeCacheBytes}}
	if s.cfg.StoreOutputs {
		node.Outputs = cellrun.NodeOutputs()
	}
	return cellrun.OpenOnNode(ctx, s.bus, runID, cellID, node)
}

// Package launcher runs the solve phase of cells: for each launch job it
// loads the task, builds (or finds) its image, starts the cell's sandbox,
// runs the harness's solve and records everything as events; then it hands
// the still-running sandbox to the verifier on this node with a verify job.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Service is a launcher.
type Service struct {
	cfg    Config
	bus    *bus.Bus
	docker *sandbox.Docker
	log    *slog.Logger
}

// New returns a launcher that runs sandboxes with docker.
func New(cfg Config, b *bus.Bus, docker *sandbox.Docker) (*Service, error) {
	if b == nil || docker == nil {
		return nil, errors.New("launcher: nil bus or docker driver")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, bus: b, docker: docker, log: cfg.Logger.With("service", Source, "node", cfg.Node)}, nil
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
	return bus.Serve(ctx, cons, s.cfg.Concurrency, s.cfg.AckWait/3, s.handle)
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	var job events.LaunchJob
	e := events.Envelope{Data: m.Data(), Type: "LaunchJob"}
	if err := events.Into(e, &job); err != nil {
		s.log.Error("bad launch job", "err", err)
		_ = m.Term()
		return
	}
	c := &cell{s: s, job: job, attempt: bus.Attempt(m)}
	err := c.run(ctx)
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

// cell is one launch in progress.
type cell struct {
	s       *Service
	job     events.LaunchJob
	attempt int
	plan    events.CellPlannedData
	spec    events.RunSpec
	dir     cellfs.Dir
}

func (c *cell) emit(ctx context.Context, t events.Type, data any) error {
	return c.s.bus.Publish(ctx, events.Must(t, c.job.RunID, c.job.CellID, c.attempt, Source, data))
}

// fail ends the cell without a verdict.
func (c *cell) fail(ctx context.Context, class string, err error) error {
	c.dir.Logf("errored (%s): %v", class, err)
	if perr := c.emit(ctx, events.CellErrored, events.CellErroredData{ErrorClass: class, Error: err.Error()}); perr != nil {
		return perr
	}
	return c.s.bus.Flush(ctx)
}

func (c *cell) run(ctx context.Context) error {
	rec, err := c.s.bus.GetRun(ctx, c.job.RunID)
	if err != nil {
		return err
	}
	switch rec.Status {
	case bus.StatusFinished, bus.StatusFailed, bus.StatusInterrupted:
		c.s.log.Info("dropping a job of an ended run", "run", c.job.RunID, "cell", c.job.CellID, "status", rec.Status)
		return nil
	}
	c.spec = rec.Spec
	pe, err := c.s.bus.LastEvent(ctx, events.CellSubject(c.job.RunID, c.job.CellID, events.CellPlanned))
	if err != nil {
		return err
	}
	if err := events.Into(pe, &c.plan); err != nil {
		return err
	}
	c.dir = cellfs.Dir(c.plan.OutputDir)
	if err := c.dir.Ensure(); err != nil {
		return c.fail(ctx, "infra", err)
	}
	if c.attempt > 1 {
		if err := c.emit(ctx, events.CellSuperseded, events.CellSupersededData{PreviousAttempt: c.attempt - 1, Reason: "launch job redelivered"}); err != nil {
			return err
		}
	}
	c.dir.Logf("attempt %d on node %s", c.attempt, c.s.cfg.Node)

	t, err := task.Load(c.plan.TaskDir)
	if err != nil {
		return c.fail(ctx, "infra", fmt.Errorf("load task: %w", err))
	}
	if t.Revision != c.plan.TaskRevision {
		return c.fail(ctx, "infra", fmt.Errorf("task %s changed since the run was planned (revision %.12s, planned %.12s)", t.Name, t.Revision, c.plan.TaskRevision))
	}
	ref, err := harness.Parse(c.plan.Harness)
	if err != nil {
		return c.fail(ctx, "refused", err)
	}

	if ref.Kind == harness.Command {
		return c.runCommand(ctx, ref, t)
	}
	img, err := c.image(ctx, t)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.fail(ctx, "build", err)
	}

	runImage, workdir := img.Ref, t.Workdir
	var agent *harness.AgentSpec
	if ref.Kind == harness.Agent {
		if workdir, err = agentWorkdir(t, img); err != nil {
			return c.fail(ctx, harness.ClassRefused, err)
		}
		if agent, err = harness.LoadAgent(ref.AgentDir(c.spec.BaseDir)); err != nil {
			return c.fail(ctx, harness.ClassRefused, err)
		}
		if runImage, err = c.agentImage(ctx, t, img, agent); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, errInstall) {
				return c.fail(ctx, "solver_error", err)
			}
			return c.fail(ctx, "sandbox", err)
		}
	}
	phases := planNetworks(ref, t)
	h, err := c.s.docker.Start(ctx, sandbox.Spec{
		RunID: c.job.RunID, CellID: c.job.CellID, Image: runImage, Workdir: workdir,
		Env: t.SandboxEnv, Network: phases.start, CPUs: t.CPUs, MemoryMB: t.MemoryMB,
		Lifetime: lifetime(t),
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.fail(ctx, "sandbox", err)
	}
	handedOver, destroyed := false, false
	teardown := func() {
		if handedOver || destroyed {
			return
		}
		destroyed = true
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
		defer cancel()
		if err := c.s.docker.Destroy(dctx, h); err != nil {
			c.s.log.Warn("destroy", "cell", c.job.CellID, "err", err)
		}
	}
	defer teardown()
	lim := events.SandboxLimits(h.Limits)
	c.dir.Logf("sandbox %.12s started on network %s (cpus %g, memory %d MiB, pids %d; 0 = unlimited)", h.ID, phases.start, lim.CPUs, lim.MemoryMB, lim.PidsLimit)
	sb := events.SandboxStartedData{Driver: h.Driver, ID: h.ID, State: h.State, Node: c.s.cfg.Node, Network: phases.start, Limits: &lim}
	if err := c.emit(ctx, events.SandboxStarted, sb); err != nil {
		return err
	}

	var fin events.FinishedData
	if agent != nil {
		fin, err = c.solveAgent(ctx, t, h, agent, workdir)
	} else {
		fin, err = c.solve(ctx, ref, t, h, phases)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		teardown() // before the terminal event: an ended cell owns no container
		return c.fail(ctx, "infra", err)
	}
	// The sandbox is fresh, so any OOM kill so far is the solve's.
	if n, err := c.s.docker.OOMKills(ctx, h); err != nil {
		c.dir.Logf("solve: OOM kills unknown: %v", err)
	} else if n > 0 {
		fin.OOMKilled = true
		c.dir.Logf("solve: a process was OOM-killed at the memory limit (%d MiB)", lim.MemoryMB)
	}
	if err := c.emit(ctx, events.Finished, fin); err != nil {
		return err
	}
	if err := c.s.bus.Flush(ctx); err != nil {
		return err
	}
	job := events.VerifyJob{RunID: c.job.RunID, CellID: c.job.CellID, Attempt: c.attempt, Node: c.s.cfg.Node, Sandbox: sb}
	if err := c.s.bus.PublishWork(ctx, events.VerifySubject(c.s.cfg.Node), fmt.Sprintf("%s/%s/%d", c.job.RunID, c.job.CellID, c.attempt), job); err != nil {
		return err
	}
	handedOver = true
	return nil
}

// image builds or finds the task image and records ImageBuilt, also when
// the build or pull failed (with its error and time: a CellErrored
// follows).
func (c *cell) image(ctx context.Context, t *task.Task) (sandbox.ImageInfo, error) {
	logf, err := os.Create(c.dir.Path("build.log"))
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	defer logf.Close()
	start := time.Now()
	img, err := c.s.docker.EnsureImage(ctx, sandbox.BuildSpec{
		Task: t.Name, Revision: t.Revision, EnvironmentDir: environmentDir(t),
		DockerImage: t.DockerImage, Timeout: seconds(t.BuildTimeoutSec), Log: logf,
	})
	if err != nil && ctx.Err() != nil {
		return img, err
	}
	var be *sandbox.BuildError
	if img.Ref == "" && errors.As(err, &be) {
		img.Ref = be.Ref // a base image that could not be pulled
	}
	d := events.ImageBuiltData{
		Image: img.Ref, Cached: img.Cached, BuildSec: round3(time.Since(start).Seconds()), Workdir: img.Workdir,
		ImageID: img.ID, Key: img.Key,
	}
	rules := map[string]bool{}
	for _, r := range img.Rewrites {
		d.Rewrites = append(d.Rewrites, r.From+" -> "+r.To)
		rules[r.Rule] = true
	}
	d.ImageMapRules = slices.Sorted(maps.Keys(rules))
	for _, b := range img.Bases {
		if d.Bases == nil {
			d.Bases = map[string]string{}
		}
		d.Bases[b.Ref] = b.ID
	}
	if err != nil {
		d.Error = err.Error()
		c.dir.Logf("image %s failed after %.3fs", img.Ref, d.BuildSec)
		if perr := c.emit(ctx, events.ImageBuilt, d); perr != nil {
			return img, perr
		}
		return img, err
	}
	c.dir.Logf("image %s (cached %v)", img.Ref, img.Cached)
	return img, c.emit(ctx, events.ImageBuilt, d)
}

// networks is the network plan of a cell: what the sandbox starts on, and
// whether the verifier phase joins the bridge afterwards.
type networks struct {
	start string
	solve string // the task policy the solve phase runs under
}

// planNetworks follows DESIGN §4: the oracle gets exactly the task's policy
// (public → the bridge; no-network and, until the egress proxy exists,
// allowlist → no way out). A sandbox whose verifier phase is public but
// whose solve phase is not starts on a per-cell internal network, because a
// --network none container can never be connected later.
func planNetworks(ref harness.Ref, t *task.Task) networks {
	if ref.Kind == harness.Agent {
		// Agent arms never get the open network: a per-cell internal
		// network whose only way out will be the egress proxy; the verifier
		// joins the bridge afterwards when its policy is public.
		return networks{start: sandbox.NetworkInternal, solve: "internal"}
	}
	solvePublic := t.AgentNetwork.Mode == task.NetworkPublic || t.AgentNetwork.Mode == ""
	verifyPublic := t.VerifierNetwork.Mode == task.NetworkPublic || t.VerifierNetwork.Mode == ""
	switch {
	case solvePublic:
		return networks{start: sandbox.NetworkBridge, solve: task.NetworkPublic}
	case verifyPublic:
		return networks{start: sandbox.NetworkInternal, solve: t.AgentNetwork.Mode}
	default:
		return networks{start: sandbox.NetworkNone, solve: t.AgentNetwork.Mode}
	}
}

// lifetime bounds the container: both budgets plus ten minutes of slack.
func lifetime(t *task.Task) time.Duration {
	return seconds(t.AgentTimeoutSec) + seconds(t.VerifierTimeoutSec) + 10*time.Minute
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// environmentDir is the build context, or "" when the task has no
// Dockerfile and runs its docker_image.
func environmentDir(t *task.Task) string {
	if t.Dockerfile == "" {
		return ""
	}
	return t.EnvironmentDir
}

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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
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
	Logger  *slog.Logger
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Service is a verifier.
type Service struct {
	cfg    Config
	bus    *bus.Bus
	docker *sandbox.Docker
	log    *slog.Logger
}

// New returns a verifier for the sandboxes of this node.
func New(cfg Config, b *bus.Bus, docker *sandbox.Docker) (*Service, error) {
	if b == nil || docker == nil {
		return nil, errors.New("verifier: nil bus or docker driver")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, bus: b, docker: docker, log: cfg.Logger.With("service", Source, "node", cfg.Node)}, nil
}

// Run serves verify.<node> jobs until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	cons, err := s.bus.WorkConsumer(ctx, "verifier-"+s.cfg.Node, events.VerifySubject(s.cfg.Node), s.cfg.AckWait, 10000)
	if err != nil {
		return err
	}
	return bus.Serve(ctx, cons, s.cfg.Concurrency, s.cfg.AckWait/3, s.handle)
}

func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	var job events.VerifyJob
	if err := events.Into(events.Envelope{Data: m.Data(), Type: "VerifyJob"}, &job); err != nil {
		s.log.Error("bad verify job", "err", err)
		_ = m.Term()
		return
	}
	h := &sandbox.Handle{Driver: job.Sandbox.Driver, ID: job.Sandbox.ID, State: job.Sandbox.State}
	end, err := s.verify(ctx, job, h)
	// The sandbox goes before the cell's terminal event, so a run is never
	// reported finished while one of its containers still exists.
	s.destroy(ctx, h)
	if ctx.Err() != nil {
		// Interrupted: the job stays for a verifier restarted on this node.
		_ = m.Nak()
		return
	}
	if err == nil && end != nil {
		err = s.bus.PublishAll(ctx, *end)
	}
	if err != nil {
		s.log.Error("verify", "cell", job.CellID, "err", err)
		_ = m.NakWithDelay(5 * time.Second)
		return
	}
	_ = m.Ack()
}

func (s *Service) destroy(ctx context.Context, h *sandbox.Handle) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
	defer cancel()
	if err := s.docker.Destroy(dctx, h); err != nil {
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
// CellErrored) for the caller to publish once the sandbox is gone; nil when
// the job belongs to an ended run. The error is non-nil only when the event
// log cannot be read or written.
func (s *Service) verify(ctx context.Context, job events.VerifyJob, h *sandbox.Handle) (*events.Envelope, error) {
	rec, err := s.bus.GetRun(ctx, job.RunID)
	if err != nil {
		return nil, err
	}
	switch rec.Status {
	case bus.StatusFinished, bus.StatusFailed, bus.StatusInterrupted:
		return nil, nil
	}
	pe, err := s.bus.LastEvent(ctx, events.CellSubject(job.RunID, job.CellID, events.CellPlanned))
	if err != nil {
		return nil, err
	}
	var plan events.CellPlannedData
	if err := events.Into(pe, &plan); err != nil {
		return nil, err
	}
	dir := cellfs.Dir(plan.OutputDir)
	fail := func(err error) (*events.Envelope, error) {
		dir.Logf("verifier errored: %v", err)
		e := event(job, events.CellErrored, events.CellErroredData{ErrorClass: "infra", Error: err.Error()})
		return &e, nil
	}
	t, err := task.Load(plan.TaskDir)
	if err != nil {
		return fail(fmt.Errorf("load task: %w", err))
	}
	network := job.Sandbox.Network
	public := t.VerifierNetwork.Mode == task.NetworkPublic || t.VerifierNetwork.Mode == ""
	if public && network == sandbox.NetworkInternal {
		if err := s.docker.ConnectBridge(ctx, h); err != nil {
			return fail(fmt.Errorf("join the bridge for a public verifier: %w", err))
		}
		network = sandbox.NetworkBridge
	}
	if err := s.emit(ctx, job, events.VerifyStarted, events.VerifyStartedData{Node: s.cfg.Node, Network: network}); err != nil {
		return nil, err
	}
	v, err := s.runTests(ctx, t, h, dir)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return fail(err)
	}
	if v.Reward != nil && !v.TimedOut {
		_ = dir.WriteReward(*v.Reward)
	}
	e := event(job, events.Verdict, v)
	return &e, nil
}

// runTests copies the tests to /tests and /verifier, creates
// /logs/verifier fresh (nothing a solver wrote there counts), runs
// `bash /tests/test.sh` as root with [verifier].timeout_sec and the literal
// [verifier.env], and reads the reward. The script's exit code is recorded
// but does not decide the reward (as in Harbor). A timeout is reward 0 with
// TimedOut set, not an error.
func (s *Service) runTests(ctx context.Context, t *task.Task, h *sandbox.Handle, dir cellfs.Dir) (events.VerdictData, error) {
	var v events.VerdictData
	stage := harness.StagePath("tests")
	if err := s.docker.CopyIn(ctx, h, t.TestsDir, stage); err != nil {
		return v, fmt.Errorf("copy tests in: %w", err)
	}
	out, err := dir.OpenCapture("verifier.log")
	if err != nil {
		return v, err
	}
	dir.Logf("verify: bash /tests/%s (timeout %gs)", filepath.Base(t.TestScript), t.VerifierTimeoutSec)
	// One exec: a fresh /logs/verifier (nothing a solver wrote there
	// counts), fresh /tests and /verifier (nothing planted beside the
	// tests), then the test script.
	res, err := s.docker.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: harness.PlaceAndRun(stage, []string{"/tests", "/verifier"},
			[]string{"/logs/verifier", "/tests", "/verifier"}, []string{"/logs/verifier", "/logs/agent", "/logs/artifacts"},
			[]string{"bash", "/tests/" + filepath.Base(t.TestScript)}),
		Env:     t.VerifierEnv,
		Timeout: time.Duration(t.VerifierTimeoutSec * float64(time.Second)), Grace: time.Second,
		Stdout: out, Stderr: out,
	})
	_ = out.Close(dir, "")
	if err != nil {
		return v, fmt.Errorf("run test.sh: %w", err)
	}
	rc := res.ExitCode
	v.ReturnCode = &rc
	if rc == harness.PrepExitCode && strings.Contains(out.Tail.String(), "proctor: ") {
		return v, fmt.Errorf("prepare the verifier: %s", strings.TrimSpace(cellfs.Suffix(out.Tail.String(), 300)))
	}
	v.DurationSec = float64(res.Duration.Milliseconds()) / 1000
	v.StdoutTail = out.RowTail()
	if res.TimedOut {
		zero := 0.0
		v.Reward, v.TimedOut = &zero, true
		v.Rewards = map[string]float64{"reward": 0}
		dir.Logf("verifier timed out after %.3fs: reward 0", v.DurationSec)
		return v, nil
	}
	txt, js, err := s.readRewardFiles(ctx, h, dir)
	if err != nil {
		return v, err
	}
	r := harness.ParseReward(txt, js)
	v.Reward, v.Rewards, v.RawReward, v.Error = r.Value, r.Rewards, r.Raw, r.Err
	dir.Logf("verifier exit %d: reward %v %s", rc, deref(r.Value), r.Err)
	return v, nil
}

// readRewardFiles copies /logs out (the verifier's reward files and the
// task's agent and artifact logs, in one call) and reads
// logs/verifier/reward.txt and reward.json; a nil slice means the file is
// absent.
func (s *Service) readRewardFiles(ctx context.Context, h *sandbox.Handle, dir cellfs.Dir) (txt, js []byte, err error) {
	if err := os.RemoveAll(dir.Path("logs")); err != nil {
		return nil, nil, err
	}
	if err := s.docker.CopyOut(ctx, h, "/logs", dir.Path()); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("copy /logs out: %w", err)
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(dir.Path("logs", "verifier", name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if b == nil && err == nil {
			b = []byte{}
		}
		return b, err
	}
	if txt, err = read("reward.txt"); err != nil {
		return nil, nil, err
	}
	if js, err = read("reward.json"); err != nil {
		return nil, nil, err
	}
	return txt, js, nil
}

func deref(p *float64) any {
	if p == nil {
		return "none"
	}
	return *p
}

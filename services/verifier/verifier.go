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
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/cellrun"
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
	// Slots, when set, is given back the slot of each verify job once its
	// sandbox is destroyed (launcher.Slots: the launcher in the same
	// process passed it on with the job).
	Slots interface{ Release(jobID string) }
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
	driver sandbox.Driver
	log    *slog.Logger
}

// New returns a verifier for the sandboxes of this node, driven by driver:
// the launchers' driver, with the abilities sandbox.Freezer and
// sandbox.FileCopier (without them a cell is errored, infra: a reward read
// from a sandbox that could not be frozen, or through the host, is not
// trusted) and, for a public verifier of an internal sandbox,
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
// job of an ended run only destroys the sandbox. The error is non-nil only
// when the event log cannot be read or written or ctx ended (retry).
func (s *Service) Verify(ctx context.Context, job events.VerifyJob) error {
	h := &sandbox.Handle{Driver: job.Sandbox.Driver, ID: job.Sandbox.ID, State: job.Sandbox.State}
	end, err := s.verify(ctx, job, h)
	s.destroy(ctx, h)
	if s.cfg.Slots != nil {
		s.cfg.Slots.Release(fmt.Sprintf("%s/%s/%d", job.RunID, job.CellID, job.Attempt))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && end != nil {
		err = s.bus.PublishAll(ctx, *end)
	}
	return err
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
// CellErrored) for the caller to publish once the sandbox is gone; nil when
// the job belongs to an ended run. The error is non-nil only when the event
// log cannot be read or written.
func (s *Service) verify(ctx context.Context, job events.VerifyJob, h *sandbox.Handle) (*events.Envelope, error) {
	cr, err := cellrun.Open(ctx, s.bus, job.RunID, job.CellID)
	if err != nil {
		return nil, err
	}
	if cr.Ended() || cr.Stale(job.Epoch) {
		return nil, nil
	}
	dir := cr.Dir
	fail := func(err error) (*events.Envelope, error) {
		class, ok := events.ClassOf(err)
		if !ok {
			class = events.ClassInfra
		}
		dir.Logf("verifier errored: %v", err)
		e := event(job, events.CellErrored, events.CellErroredData{ErrorClass: string(class), Error: err.Error()})
		return &e, nil
	}
	t, err := cr.LoadTask()
	if err != nil {
		return fail(err)
	}
	arm, err := harness.Lookup(cr.Plan.Harness)
	if err != nil {
		return fail(err)
	}
	network := job.Sandbox.Network
	if want := arm.Networks(t).Verify; want == sandbox.NetworkBridge && network == sandbox.NetworkInternal {
		j, ok := s.driver.(sandbox.BridgeJoiner)
		if !ok {
			return fail(fmt.Errorf("join the bridge for a public verifier: the sandbox driver %T cannot", s.driver))
		}
		if err := j.ConnectBridge(ctx, h); err != nil {
			return fail(fmt.Errorf("join the bridge for a public verifier: %w", err))
		}
		network = sandbox.NetworkBridge
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
	v, err := s.runTests(ctx, t, h, dir, network)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return fail(err)
	}
	if oomErr == nil {
		if n, err := oc.OOMKills(ctx, h); err == nil && n > oomBefore {
			v.OOMKilled = true
			dir.Logf("verify: %d process(es) OOM-killed at the memory limit", n-oomBefore)
		}
	}
	if v.Reward != nil && !v.TimedOut {
		_ = dir.WriteReward(*v.Reward)
	}
	e := event(job, events.Verdict, v)
	return &e, nil
}

// exitHook is sourced by the test script's bash before the script runs
// (through BASH_ENV, which it then unsets so no other bash sources it): at
// the script's exit it stops (SIGSTOP) every other process in the
// container but PID 1, within the script's own exit, before the engine
// could be asked to freeze. A process the test started (an agent's code
// run as root) that would write the reward after the script's last write
// is stopped before it can. A script that sets its own EXIT trap or execs
// another program replaces the hook; Freeze, right after the exec ends,
// still stops everything before the reward is read. A task whose
// [verifier.env] sets BASH_ENV keeps its own and has only Freeze.
const exitHook = "unset BASH_ENV\ntrap 'kill -STOP -1 2>/dev/null' EXIT\n"

// exitHookPath is where the verifier's exec writes exitHook, fresh, before
// the script starts.
const exitHookPath = "/.proctor-verifier-exit.sh"

// TestSpec is what one verifier run needs of its task: the tests
// directories copied to /tests and /verifier in order (a later one's files
// win over an earlier one's, as Harbor uploads a step's tests/ over the
// task-level tests/), the test script's base name, the literal env and the
// budget in seconds.
type TestSpec struct {
	TestsDirs  []string
	Script     string
	Env        map[string]string
	TimeoutSec float64
	// Log names the capture file of the script's output in the cell
	// directory ("verifier.log" when "").
	Log string
	// Network is the sandbox's network during the run; on
	// sandbox.NetworkBridge the script gets the host's proxy variables
	// without their credentials.
	Network string
}

// TaskTests is the TestSpec of a single-step task.
func TaskTests(t *task.Task) TestSpec {
	return TestSpec{TestsDirs: []string{t.TestsDir}, Script: filepath.Base(t.TestScript), Env: t.VerifierEnv, TimeoutSec: t.VerifierTimeoutSec}
}

func (s *Service) runTests(ctx context.Context, t *task.Task, h *sandbox.Handle, dir cellfs.Dir, network string) (events.VerdictData, error) {
	spec := TaskTests(t)
	spec.Network = network
	return RunTests(ctx, s.driver, spec, h, dir)
}

// RunTests copies the tests to /tests and /verifier, creates
// /logs/verifier fresh (nothing a solver wrote there counts), runs
// `bash /tests/<script>` as root with the spec's timeout and literal env,
// freezes the sandbox when the script has ended (every process left is
// stopped and counted in LeftoverProcesses), copies /logs out into dir and
// reads the reward from the frozen sandbox. The script's exit code is
// recorded but does not decide the reward (as in Harbor). A timeout is
// reward 0 with TimedOut set, not an error. driver needs sandbox.Freezer
// and sandbox.FileCopier; without them the error says so.
func RunTests(ctx context.Context, driver sandbox.Driver, spec TestSpec, h *sandbox.Handle, dir cellfs.Dir) (events.VerdictData, error) {
	var v events.VerdictData
	freezer, ok := driver.(sandbox.Freezer)
	if !ok {
		return v, fmt.Errorf("the sandbox driver %T cannot freeze a sandbox before its reward is read", driver)
	}
	stage := harness.StagePath("tests")
	dirs := 0
	for _, td := range spec.TestsDirs {
		if td == "" {
			continue
		}
		// Each directory's contents land in the one stage, the later
		// ones over the earlier ones.
		if err := driver.CopyIn(ctx, h, td, stage); err != nil {
			return v, fmt.Errorf("copy tests in: %w", err)
		}
		dirs++
	}
	if dirs == 0 {
		return v, errors.New("no tests directory to copy in")
	}
	logName := spec.Log
	if logName == "" {
		logName = "verifier.log"
	}
	out, err := dir.OpenCapture(logName)
	if err != nil {
		return v, err
	}
	dir.Logf("verify: bash /tests/%s (timeout %gs)", spec.Script, spec.TimeoutSec)
	// One exec: a fresh /logs/verifier (nothing a solver wrote there
	// counts), fresh /tests and /verifier (nothing planted beside the
	// tests), then the test script.
	env := maps.Clone(spec.Env)
	if _, ok := env["BASH_ENV"]; !ok {
		if env == nil {
			env = map[string]string{}
		}
		env["BASH_ENV"] = exitHookPath
	}
	if spec.Network == sandbox.NetworkBridge {
		// A public verifier gets the host's proxy variables, without
		// their credentials (the task's own variables win).
		for k, v := range sandbox.HostProxyEnv(os.Getenv) {
			if _, ok := env[k]; !ok {
				env[k] = v
			}
		}
	}
	res, err := driver.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: harness.PlaceAndRun(stage, []string{"/tests", "/verifier"},
			[]string{"/logs/verifier", "/tests", "/verifier", exitHookPath}, []string{"/logs/verifier", "/logs/agent", "/logs/artifacts"},
			[]string{"sh", "-c", `printf '%s' "$1" > "$2" && exec bash "$3"`, "sh", exitHook, exitHookPath, "/tests/" + spec.Script}),
		Env:     env,
		Timeout: time.Duration(spec.TimeoutSec * float64(time.Second)), Grace: time.Second,
		Stdout: out, Stderr: out,
	})
	_ = out.Close(dir, "")
	if err != nil {
		return v, fmt.Errorf("run test.sh: %w", err)
	}
	// Nothing runs after the test script: a process it started (an
	// agent's code run as root, a daemon of the test) is frozen before the
	// reward files are read, so the reward is what the script left.
	alive, err := freezer.Freeze(ctx, h)
	if err != nil {
		return v, fmt.Errorf("freeze the sandbox before reading the reward: %w", err)
	}
	v.LeftoverProcesses = &alive
	if alive > 0 {
		dir.Logf("verify: %d processes still alive when the test script ended (frozen before the reward was read)", alive)
	}
	rc := res.ExitCode
	v.ReturnCode = &rc
	if rc == harness.PrepExitCode && strings.Contains(out.Tail.String(), "proctor: ") {
		return v, fmt.Errorf("prepare the verifier: %s", strings.TrimSpace(cellfs.Suffix(out.Tail.String(), 300)))
	}
	v.DurationSec = float64(res.Duration.Milliseconds()) / 1000
	v.StdoutTail = out.RowTail()
	files, copyErr := copyLogs(ctx, driver, h, dir)
	if res.TimedOut {
		zero := 0.0
		v.Reward, v.TimedOut = &zero, true
		v.Rewards = map[string]float64{"reward": 0}
		dir.Logf("verifier timed out after %.3fs: reward 0", v.DurationSec)
		return v, nil
	}
	if copyErr != nil {
		return v, fmt.Errorf("copy /logs out: %w", copyErr)
	}
	r := readReward(files)
	v.Reward, v.Rewards, v.RawReward, v.Error = r.Value, r.Rewards, r.Raw, r.Err
	dir.Logf("verifier exit %d: reward %v %s", rc, deref(r.Value), r.Err)
	return v, nil
}

// Paths of the reward files in the sandbox.
const (
	rewardTxt  = "/logs/verifier/reward.txt"
	rewardJSON = "/logs/verifier/reward.json"
)

// copyLogs copies the sandbox's /logs (the verifier's files and the task's
// agent and artifact logs, in one call) into the cell's logs/ directory,
// symlinks stored as symlinks and never followed, and returns the reward
// files read from the same stream (sandbox.FileCopier: regular
// files of at most harness.MaxRewardFileBytes, nothing resolved on the
// host). A missing /logs is no files. The error is the engine's.
func copyLogs(ctx context.Context, driver sandbox.Driver, h *sandbox.Handle, dir cellfs.Dir) (map[string]sandbox.FileResult, error) {
	if err := os.RemoveAll(dir.Path("logs")); err != nil {
		return nil, err
	}
	fc, ok := driver.(sandbox.FileCopier)
	if !ok {
		return nil, fmt.Errorf("the sandbox driver %T cannot read files out without the host", driver)
	}
	files, err := fc.CopyOutFiles(ctx, h, "/logs", dir.Path(),
		map[string]int64{rewardTxt: harness.MaxRewardFileBytes, rewardJSON: harness.MaxRewardFileBytes})
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, nil
	}
	return files, err
}

// readReward parses the reward files copyLogs read. A reward file that is
// a symlink (or under one), a device, a directory or over the cap is no
// verdict with the reason.
func readReward(files map[string]sandbox.FileResult) harness.Reward {
	var txt, js []byte
	for _, f := range []struct {
		path string
		into *[]byte
	}{{rewardTxt, &txt}, {rewardJSON, &js}} {
		got, ok := files[f.path]
		switch {
		case !ok:
		case got.Err != nil:
			return harness.Reward{Err: path.Base(f.path) + ": not read: " + got.Err.Error()}
		default:
			*f.into = got.Data
			if *f.into == nil {
				*f.into = []byte{}
			}
		}
	}
	return harness.ParseReward(txt, js)
}

func deref(p *float64) any {
	if p == nil {
		return "none"
	}
	return *p
}

package launcher

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/verify"
)

// A multi-step task (Harbor's [[steps]], DESIGN §3) runs here, in the
// launcher, from the first step to the last in the one sandbox the arm
// placed: for each step, StepStarted; its workdir/ uploaded to the working
// directory and its setup.sh run as the user the arm solves as
// (Placement.User), then removed; its healthcheck; the arm's Solve with
// the step's instruction, solution and budget (the arm sees the task
// through the step); the step's tests (the task-level tests/ with the
// step's tests/ over it) scored by verify.RunTests (the verifier
// service's own) on the network the arm's plan gives the verifier
// (verify.UseNetwork), the sandbox frozen before the reward is read; the
// task's and the step's artifacts collected (verify.CollectArtifacts);
// the sandbox thawed, the step's /tests, /verifier and /logs/verifier
// removed (the next step's agent must not read its grader), and back on
// its start network for the next step; then StepVerdict. A step whose solve made no attempt ends the cell errored
// by the single-step rule (harness.NoAttemptError), its tests unrun. A
// step whose reward misses its min_reward,
// or that has no verdict, stops the trial: each later step is recorded
// skipped. The cell then gets one Finished (the steps' solve time summed)
// and one Verdict (the steps' verifier time summed) whose reward is
// rolled up by multi_step_reward_strategy (harness.RollUpSteps); when
// none can be rolled up (a step that ran has no verdict) the Verdict has
// no reward and says why: missing data, never a pass. proctor's own
// failures (the engine, a sandbox that cannot be resumed) error the cell.
// No verify job is handed over: the steps alternate solve and verify on
// one sandbox, which one service drives.

// stepEnv is the arm's view of one step: the task as the step sees it, the
// step's own output directory, and Started recorded only once per cell.
type stepEnv struct {
	*cell
	t     *task.Task
	dir   cellfs.Dir
	quiet bool
}

func (e *stepEnv) Task() *task.Task { return e.t }
func (e *stepEnv) Dir() cellfs.Dir  { return e.dir }
func (e *stepEnv) Emit(ctx context.Context, t events.Type, data any, at time.Time) error {
	if e.quiet && t == events.Started {
		return nil
	}
	return e.cell.Emit(ctx, t, data, at)
}

// stepTask is t seen through step s: the step's instruction, solution,
// tests, budgets, users and verifier env in place of the task's.
func stepTask(t *task.Task, s *task.Step) *task.Task {
	v := *t
	v.Prompt, v.InstructionFile = s.Prompt, s.InstructionFile
	v.SolutionDir, v.SolutionScript = s.SolutionDir, s.SolutionScript
	v.TestScript = s.TestScript
	v.AgentTimeoutSec, v.AgentUser = s.AgentTimeoutSec, s.AgentUser
	v.VerifierTimeoutSec, v.VerifierUser, v.VerifierEnv = s.VerifierTimeoutSec, s.VerifierUser, s.VerifierEnv
	return &v
}

func (c *cell) runSteps(ctx context.Context, arm harness.Arm, p harness.Placement, h *sandbox.Handle, teardown func()) error {
	t := c.task
	workdir := p.Workdir
	if workdir == "" {
		workdir = p.Image.Workdir
	}
	if workdir == "" {
		workdir = "/"
	}
	// net is the network the sandbox is on: its start network, the
	// verifier's during a step's verifier (harness.Networks.Verify).
	net := p.Networks.Start
	scores := make([]harness.StepScore, len(t.Steps))
	var fin events.FinishedData
	// The cell's verdict: the steps' verifier time summed, the last
	// verifier's exit code, the rolled-up reward.
	var verdict events.VerdictData
	stop := ""
	for i := range t.Steps {
		s := &t.Steps[i]
		if stop != "" {
			if err := c.emit(ctx, events.StepVerdict, events.StepVerdictData{Index: i, Name: s.Name, Skipped: true, SkipReason: stop}); err != nil {
				return err
			}
			continue
		}
		if err := c.emit(ctx, events.StepStarted, events.StepStartedData{Index: i, Of: len(t.Steps), Name: s.Name}); err != nil {
			return err
		}
		sv, err := c.runStep(ctx, arm, p, h, i, s, workdir, &net)
		var sf *stepFailure
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &sf):
			sv.Error = sf.msg
			c.Dir().Logf("step %s has no verdict: %s", s.Name, sf.msg)
		default:
			// proctor's own failure (the engine, the files, the event
			// log): the cell has no verdict, never a roll-up of part of
			// its steps.
			teardown()
			return c.end(ctx, events.ClassInfra, fmt.Errorf("step %s: %w", s.Name, err))
		}
		scores[i].Name, scores[i].Ran, scores[i].NoVerdict = s.Name, true, sv.Error
		if sv.Solve != nil {
			fin.DurationSec += sv.Solve.DurationSec
			fin.Reason, fin.ExitCode, fin.StdoutTail, fin.Isolation = sv.Solve.Reason, sv.Solve.ExitCode, sv.Solve.StdoutTail, sv.Solve.Isolation
			fin.TimedOut = fin.TimedOut || sv.Solve.TimedOut
			fin.OOMKilled = fin.OOMKilled || sv.Solve.OOMKilled
		}
		if v := sv.Verdict; v != nil {
			verdict.DurationSec += v.DurationSec
			verdict.ReturnCode = v.ReturnCode
			if v.Reward != nil {
				scores[i].Rewards = v.Rewards
			} else if scores[i].NoVerdict == "" {
				scores[i].NoVerdict = v.Error
			}
		}
		switch {
		case scores[i].Rewards == nil:
			sv.Stop = "step " + s.Name + " has no verdict"
		case s.MinReward != nil:
			if why, miss := harness.MissesMinReward(s.MinReward, scores[i].Rewards); miss {
				sv.Stop = "step " + s.Name + ": " + why
			}
		}
		stop = sv.Stop
		// The task's artifacts and the step's own, after its verifier,
		// into steps/<name>/artifacts/ (as Harbor collects them per step).
		if _, err := verify.CollectArtifacts(ctx, p.Driver, h, append(append([]task.Artifact{}, t.Artifacts...), s.Artifacts...),
			workdir, cellfs.Dir(c.Dir().Path("steps", s.Name))); err != nil {
			c.Dir().Logf("step %s artifacts: %v", s.Name, err)
		}
		if stop == "" && i+1 < len(t.Steps) {
			// Thawed, the step's grader files gone, and back on the
			// solve's network for the next step.
			err := thaw(ctx, p.Driver, h)
			if err == nil {
				err = removeGraders(ctx, p.Driver, h)
			}
			if err == nil {
				net, err = verify.UseNetwork(ctx, p.Driver, h, net, p.Networks.Start)
			}
			if err != nil {
				// proctor's failure, not the step's: the cell has no
				// verdict, never a roll-up of the steps before.
				if ctx.Err() != nil {
					return ctx.Err()
				}
				teardown()
				return c.end(ctx, events.ClassSandbox, fmt.Errorf("step %s: resume the sandbox for the next step: %w", s.Name, err))
			}
		}
		if sv.Stop != "" {
			c.Dir().Logf("step %s stops the trial: %s", s.Name, sv.Stop)
		}
		if err := c.emit(ctx, events.StepVerdict, sv); err != nil {
			return err
		}
	}
	fin.DurationSec = float64(int64(fin.DurationSec*1000+0.5)) / 1000
	verdict.DurationSec = float64(int64(verdict.DurationSec*1000+0.5)) / 1000
	if fin.Reason == "" {
		fin.Reason = "no step solved"
	}
	teardown() // before the terminal events: an ended cell owns no container
	if err := c.emit(ctx, events.Finished, fin); err != nil {
		return err
	}
	reward, rewards, why := harness.RollUpSteps(t.MultiStepRewardStrategy, scores)
	if reward == nil {
		// No reward to roll up (a step that ran has no verdict): the
		// cell's verifier gave no verdict, missing data as for a
		// single-step cell whose verifier wrote no reward.
		verdict.Error = fmt.Sprintf("multi-step task (%s): no reward: %s", t.MultiStepRewardStrategy, why)
		c.Dir().Logf("steps not rolled up: %s", verdict.Error)
	} else {
		verdict.Reward, verdict.Rewards = reward, rewards
		c.Dir().Logf("steps rolled up (%s): reward %g", t.MultiStepRewardStrategy, *reward)
		_ = c.Dir().WriteReward(*reward)
	}
	if err := c.storeOutput(ctx, &verdict); err != nil {
		return c.end(ctx, events.ClassInfra, err)
	}
	return c.publishTerminal(ctx, events.Verdict, verdict, verdict.Output)
}

// stepFailure is a step that ran but has no verdict through the task's
// own doing (its setup.sh failed, its healthcheck never passed): recorded
// on its StepVerdict, and the trial stops. Every other error of a step is
// proctor's and errors the cell.
type stepFailure struct{ msg string }

func (e *stepFailure) Error() string { return e.msg }

// runStep runs step i in h and returns its StepVerdict data (Stop not
// decided). *net is the network h is on; the step's verifier moves it to
// the arm's verifier network.
func (c *cell) runStep(ctx context.Context, arm harness.Arm, p harness.Placement, h *sandbox.Handle, i int, s *task.Step, workdir string, net *string) (events.StepVerdictData, error) {
	sv := events.StepVerdictData{Index: i, Name: s.Name}
	dir := cellfs.Dir(c.Dir().Path("steps", s.Name))
	if err := dir.Ensure(); err != nil {
		return sv, events.Classed(events.ClassInfra, err)
	}
	c.Dir().Logf("step %d/%d %s", i+1, len(c.task.Steps), s.Name)
	d := p.Driver
	if s.WorkdirDir != "" {
		if err := harness.UploadStepWorkdir(ctx, d, h, s, workdir, harness.StepSolveUser(c.Spec(), c.task, s, p), dir); err != nil {
			var se *harness.StepSetupError
			if errors.As(err, &se) {
				return sv, &stepFailure{se.Error()}
			}
			return sv, err
		}
	}
	if s.Healthcheck != nil {
		if err := healthcheck(ctx, d, h, s.Healthcheck, workdir, dir); err != nil {
			return sv, err
		}
	}
	st := stepTask(c.task, s)
	st.InheritPriorSession = s.InheritPriorSession && i > 0
	env := &stepEnv{cell: c, t: st, dir: dir, quiet: i > 0}
	sctx, solved, err := c.beginSolve(ctx, p.Driver, h, s.Name)
	if err != nil {
		return sv, err
	}
	start := time.Now()
	out, err := arm.Solve(sctx, env, p, h)
	solved()
	if oerr := c.recordHarness(ctx, s.Name, start, out, err); oerr != nil && err == nil {
		return sv, oerr
	}
	if err == nil {
		err = harness.NoAttemptError(out.Finished) // as a single-step cell's
	}
	if err != nil {
		return sv, fmt.Errorf("solve: %w", err)
	}
	if out.Verdict != nil {
		return sv, fmt.Errorf("harness %s scores itself and cannot run steps", arm.Ref().Name)
	}
	fin := out.Finished
	sv.Solve = &fin
	network, err := verify.UseNetwork(ctx, d, h, *net, arm.Networks(c.task).Verify)
	*net = network
	if err != nil {
		return sv, fmt.Errorf("verify: %w", err)
	}
	v, err := verify.RunTests(ctx, d, verify.TestSpec{
		TestsDirs: []string{c.task.TestsDir, s.TestsDir}, Script: filepath.Base(s.TestScript),
		Env: s.VerifierEnv, TimeoutSec: s.VerifierTimeoutSec, Network: network, Getenv: c.s.cfg.Getenv,
	}, h, dir)
	if err != nil {
		return sv, fmt.Errorf("verify: %w", err)
	}
	sv.Verdict = &v
	if v.Reward != nil && !v.TimedOut {
		_ = dir.WriteReward(*v.Reward)
	}
	return sv, nil
}

// healthcheck runs hc until it exits 0, with Docker HEALTHCHECK semantics
// (task.Healthcheck): failures within the start period do not count.
func healthcheck(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, hc *task.Healthcheck, workdir string, dir cellfs.Dir) error {
	start := time.Now()
	failures := 0
	for attempt := 1; ; attempt++ {
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{
			Cmd: []string{"sh", "-c", hc.Command}, Workdir: workdir,
			Timeout: time.Duration(hc.TimeoutSec * float64(time.Second)),
		})
		if err != nil {
			return fmt.Errorf("healthcheck: %w", err)
		}
		if res.ExitCode == 0 && !res.TimedOut {
			dir.Logf("healthcheck passed on attempt %d", attempt)
			return nil
		}
		wait := hc.IntervalSec
		if time.Since(start).Seconds() < hc.StartPeriodSec {
			wait = hc.StartIntervalSec
		} else {
			failures++
			if failures >= hc.Retries {
				return &stepFailure{fmt.Sprintf("healthcheck %q failed %d times (last exit %d)", hc.Command, failures, res.ExitCode)}
			}
		}
		// The wait between attempts is the healthcheck's own interval.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(wait * float64(time.Second))):
		}
	}
}

// graderDirs are what a step's verifier leaves in the sandbox: the tests
// it copied in and its logs (already copied out).
var graderDirs = []string{"/tests", "/verifier", "/logs/verifier"}

// removeGraders removes graderDirs before the next step's solve, as root:
// the task-level tests grade every step, so the next step's agent would
// otherwise read its own grader.
func removeGraders(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) error {
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: append([]string{"rm", "-rf"}, graderDirs...), Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("remove the step's grader files (%s): %w", strings.Join(graderDirs, " "), err)
	}
	return nil
}

// thaw resumes the sandbox after a step's verifier froze it.
func thaw(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) error {
	th, ok := d.(sandbox.Thawer)
	if !ok {
		return fmt.Errorf("the sandbox driver %T cannot resume a frozen sandbox", d)
	}
	return th.Thaw(ctx, h)
}

package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ExpandTemplate fills a command:<template>'s placeholders {task_path},
// {task_name}, {model}, {output_dir} and {jobs_dir} with shell-quoted
// values (absolute paths), so the template must not quote them again.
func ExpandTemplate(tpl, taskPath, taskName, model, outputDir, jobsDir string) string {
	return strings.NewReplacer(
		"{task_path}", shq(taskPath), "{task_name}", shq(taskName),
		"{model}", shq(model), "{output_dir}", shq(outputDir), "{jobs_dir}", shq(jobsDir),
	).Replace(tpl)
}

// commandArm runs a command:<template> cell (DESIGN §5): a host command in
// the tasks root's parent directory with the caller's environment plus
// PROCTOR_OUTPUT_DIR and PROCTOR_OPERATIONS_FILE (and the same absolute
// paths as DOKIMI_OUTPUT_DIR and DOKIMI_OPERATIONS_FILE, the Dokimi
// harness's names), stdin closed, its own
// process group killed at [agent].timeout_sec. It does and scores its own
// work: reward.txt in {output_dir} is the reward; without one, exit 0 passes
// and any other exit fails. There is no test script to run. A solver.json
// it leaves in {output_dir} is its final claim (readSolverClaim).
//
// A template that names {jobs_dir} is a Harbor of its own (a local harbor
// with other flags, a wrapper around one): it keeps Harbor's output
// contract. {jobs_dir} is <cell>/jobs, emptied first; the run is bounded
// as a harbor arm's (agent + verifier + build budgets, then SIGTERM and
// DelegateGrace) and the cell is scored from the trial result.json it
// wrote there, by the harbor arms' rules (scoreHarbor), never from
// reward.txt or the exit code.
type commandArm struct{ ref Ref }

// commandState is what Prepare made for Solve; jobs is {jobs_dir} when the
// template names it.
type commandState struct{ outDir, opsFile, cwd, cmdline, jobs string }

func (a commandArm) Ref() Ref { return a.ref }

// Networks: a host command has no network plan (the host's network) and
// no verifier phase.
func (a commandArm) Networks(*task.Task) Networks            { return Networks{} }
func (a commandArm) Check(string, func(string) string) error { return nil }
func (a commandArm) SetupCheck() bool                        { return false }

func (a commandArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	return refusal(t, a.needs(t))
}

func (a commandArm) needs(*task.Task) task.Needs { return task.NeedsCommand }

// Prepare empties {output_dir} (when old files there cannot be deleted the
// cell is errored, infra, and not run) and places the command on the host
// driver in the tasks root's parent directory, with no network plan.
func (a commandArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	dir, t := env.Dir(), env.Task()
	// Absolute, as the PROCTOR_* and DOKIMI_* variables promise.
	outDir, err := filepath.Abs(dir.Path("output"))
	if err != nil {
		return Placement{}, events.Classed(events.ClassInfra, err)
	}
	if err := os.RemoveAll(outDir); err != nil {
		return Placement{}, events.Classf(events.ClassInfra, "cannot empty {output_dir} %s: %w; the command was not run", outDir, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Placement{}, events.Classed(events.ClassInfra, err)
	}
	opsFile := filepath.Join(filepath.Dir(outDir), "operations.jsonl")
	if err := os.Remove(opsFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Placement{}, events.Classed(events.ClassInfra, err)
	}
	st := commandState{outDir: outDir, opsFile: opsFile, cwd: filepath.Dir(env.Spec().TasksRoot)}
	if strings.Contains(a.ref.Arg, "{jobs_dir}") {
		jobs, err := emptyJobs(env, "the command")
		if err != nil {
			return Placement{}, err
		}
		st.jobs = jobs
	}
	st.cmdline = ExpandTemplate(a.ref.Arg, t.Dir, t.Name, env.Plan().Model, outDir, st.jobs)
	return Placement{Driver: env.Host(), Spec: sandbox.Spec{RunID: env.RunID(), CellID: env.CellID()}, Workdir: st.cwd, State: st}, nil
}

// Solve runs the command, turns its event lines and operations file into
// events, and scores it.
func (a commandArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(commandState)
	if !ok {
		return Outcome{}, errors.New("command arm: Solve without Prepare")
	}
	t, dir, plan := env.Task(), env.Dir(), env.Plan()
	out, err := dir.OpenCapture("solve.log")
	if err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	run := newStream(ctx, env, nil)
	lines := run.lines()
	timeout, grace := seconds(t.AgentTimeoutSec), sandbox.DefaultGrace
	if st.jobs != "" {
		timeout, grace = harborBudget(t), DelegateGrace()
	}
	errTail := &tailBuffer{n: stderrKeep}
	errLines := run.stderrLines()
	dir.Logf("command: %s (in %s, timeout %s, grace %s)", st.cmdline, st.cwd, timeout, grace)
	res, err := p.Driver.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"bash", "-c", st.cmdline}, Workdir: st.cwd,
		Env: map[string]string{
			"PROCTOR_OUTPUT_DIR": st.outDir, "PROCTOR_OPERATIONS_FILE": st.opsFile,
			"DOKIMI_OUTPUT_DIR": st.outDir, "DOKIMI_OPERATIONS_FILE": st.opsFile,
			"PROCTOR_TASK": t.Name, "PROCTOR_TASK_PATH": t.Dir, "PROCTOR_MODEL": plan.Model,
			"PROCTOR_RUN_ID": env.RunID(), "PROCTOR_CELL_ID": env.CellID(),
		},
		Timeout: timeout, Grace: grace,
		Stdout: io.MultiWriter(out, lines), Stderr: multiWriter{out, errTail, errLines},
	})
	_ = lines.Close()
	_ = errLines.Close()
	run.wait()
	_ = out.Close(dir, "stdout.tail.txt")
	if err != nil {
		return Outcome{}, events.Classed(events.ClassSandbox, err)
	}
	run.mu.Lock()
	run.ensureStarted(time.Time{})
	if err := readOperations(run, dir, st.opsFile); err != nil {
		dir.Logf("%s: %v", st.opsFile, err)
	}
	// A solver.json in {output_dir} is the command's final claim (the
	// row's agent_claim), as the seed's cell file is.
	claim, claimReported := readSolverClaim(dir, st.outDir)
	if claim != "" {
		run.publish(events.Message, events.MessageData{Role: "response", Text: responseTail(claim)}, time.Time{})
	}
	run.mu.Unlock()
	if run.publishErr != nil {
		return Outcome{}, run.publishErr
	}
	if st.jobs != "" {
		// Harbor's output contract: the trial result.json decides.
		return harborOutcome(ctx, env, "the command", st.jobs, st.cwd, delegatedRun{res: res, tail: out.RowTail(), stderr: errTail.String()})
	}
	fin := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", res.ExitCode), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationSec: round3(res.Duration.Seconds()), StdoutTail: out.RowTail(), Synthesized: run.finished == nil,
		Isolation: map[string]any{"sandbox": "host process", "cwd": st.cwd}, LowFidelityOps: run.lowFidelity(),
		AgentReported: claimReported,
	}
	if res.TimedOut {
		fin.Reason = "timeout"
	}
	v := events.VerdictData{ReturnCode: &res.ExitCode, DurationSec: 0}
	txt, err := os.ReadFile(filepath.Join(st.outDir, "reward.txt"))
	switch {
	case err == nil:
		r := ParseReward(txt, nil)
		v.Reward, v.Rewards, v.RawReward, v.Error = r.Value, r.Rewards, r.Raw, r.Err
	case errors.Is(err, os.ErrNotExist):
		reward := 0.0
		if res.ExitCode == 0 && !res.TimedOut {
			reward = 1
		}
		v.Reward, v.Rewards = &reward, map[string]float64{"reward": reward}
	default:
		v.Error = "read reward.txt: " + err.Error()
	}
	if v.Reward != nil {
		_ = dir.WriteReward(*v.Reward)
	}
	return Outcome{Finished: fin, Verdict: &v}, nil
}

// readOperations turns the JSON lines a command appended to
// PROCTOR_OPERATIONS_FILE into Operation events (publishOperationLines).
func readOperations(run *stream, dir cellfs.Dir, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return publishOperationLines(run, dir, filepath.Base(path), f)
}

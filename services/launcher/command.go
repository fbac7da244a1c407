package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ExpandTemplate fills a command:<template>'s placeholders {task_path},
// {task_name}, {model} and {output_dir} with shell-quoted values (absolute
// paths), so the template must not quote them again.
func ExpandTemplate(tpl, taskPath, taskName, model, outputDir string) string {
	return strings.NewReplacer(
		"{task_path}", shq(taskPath), "{task_name}", shq(taskName),
		"{model}", shq(model), "{output_dir}", shq(outputDir),
	).Replace(tpl)
}

// runCommand runs a command:<template> cell (DESIGN §5): a host command in
// the tasks root's parent directory with the caller's environment plus
// PROCTOR_OUTPUT_DIR and PROCTOR_OPERATIONS_FILE, stdin closed, its own
// process group killed at [agent].timeout_sec. It does and scores its own
// work: reward.txt in {output_dir} is the reward; without one, exit 0 passes
// and any other exit fails. {output_dir} is emptied first; when old files
// there cannot be deleted the cell is errored and not run. The launcher
// records the Verdict itself: there is no test script to run.
func (c *cell) runCommand(ctx context.Context, ref harness.Ref, t *task.Task) error {
	outDir := c.dir.Path("output")
	if err := os.RemoveAll(outDir); err != nil {
		return c.fail(ctx, "infra", fmt.Errorf("cannot empty {output_dir} %s: %w; the command was not run", outDir, err))
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return c.fail(ctx, "infra", err)
	}
	opsFile := c.dir.Path("operations.jsonl")
	if err := os.Remove(opsFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return c.fail(ctx, "infra", err)
	}
	cwd := filepath.Dir(c.spec.TasksRoot)
	cmdline := ExpandTemplate(ref.Arg, t.Dir, t.Name, c.plan.Model, outDir)
	proc := &sandbox.Process{Host: true}
	h, err := proc.Start(ctx, sandbox.Spec{RunID: c.job.RunID, CellID: c.job.CellID})
	if err != nil {
		return c.fail(ctx, "sandbox", err)
	}
	defer proc.Destroy(context.WithoutCancel(ctx), h)
	if err := c.emit(ctx, events.SandboxStarted, events.SandboxStartedData{Driver: h.Driver, ID: h.ID, State: h.State, Node: c.s.cfg.Node}); err != nil {
		return err
	}
	out, err := c.dir.OpenCapture("solve.log")
	if err != nil {
		return c.fail(ctx, "infra", err)
	}
	run := newAgentRun(c, ctx, nil)
	lines := sandbox.NewLines(run.feed, 0)
	c.dir.Logf("command: %s (in %s, timeout %gs)", cmdline, cwd, t.AgentTimeoutSec)
	res, err := proc.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"bash", "-c", cmdline}, Workdir: cwd,
		Env: map[string]string{
			"PROCTOR_OUTPUT_DIR": outDir, "PROCTOR_OPERATIONS_FILE": opsFile,
			"PROCTOR_TASK": t.Name, "PROCTOR_TASK_PATH": t.Dir, "PROCTOR_MODEL": c.plan.Model,
			"PROCTOR_RUN_ID": c.job.RunID, "PROCTOR_CELL_ID": c.job.CellID,
		},
		Timeout: seconds(t.AgentTimeoutSec), Grace: sandbox.DefaultGrace,
		Stdout: io.MultiWriter(out, lines), Stderr: out,
	})
	_ = lines.Close()
	run.wait()
	_ = out.Close(c.dir, "stdout.tail.txt")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.fail(ctx, "sandbox", err)
	}
	run.mu.Lock()
	run.ensureStarted(time.Time{})
	if err := c.readOperations(run, opsFile); err != nil {
		c.dir.Logf("%s: %v", opsFile, err)
	}
	run.mu.Unlock()
	if run.publishErr != nil {
		return run.publishErr
	}
	fin := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", res.ExitCode), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationSec: round3(res.Duration.Seconds()), StdoutTail: out.RowTail(), Synthesized: run.finished == nil,
		Isolation: map[string]any{"sandbox": "host process", "cwd": cwd},
	}
	if res.TimedOut {
		fin.Reason = "timeout"
	}
	if err := c.emit(ctx, events.Finished, fin); err != nil {
		return err
	}
	v := events.VerdictData{ReturnCode: &res.ExitCode, DurationSec: 0}
	txt, err := os.ReadFile(filepath.Join(outDir, "reward.txt"))
	switch {
	case err == nil:
		r := harness.ParseReward(txt, nil)
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
		_ = c.dir.WriteReward(*v.Reward)
	}
	if err := c.emit(ctx, events.Verdict, v); err != nil {
		return err
	}
	return c.s.bus.Flush(ctx)
}

// readOperations turns the JSON lines a command appended to
// PROCTOR_OPERATIONS_FILE into Operation events. Lines that are not JSON
// objects are skipped and counted in run.log.
func (c *cell) readOperations(run *agentRun, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	bad := 0
	for sc.Scan() {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			bad++
			continue
		}
		run.publish(events.Operation, harness.OperationFrom(m), time.Time{})
	}
	if bad > 0 {
		c.dir.Logf("%d lines of %s were not JSON objects", bad, filepath.Base(path))
	}
	return sc.Err()
}

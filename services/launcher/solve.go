package launcher

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// oracleGrace is the SIGTERM-to-SIGKILL grace of a reference solution at
// its timeout.
const oracleGrace = 2 * time.Second

// solve runs the harness's solve phase and returns its Finished data.
func (c *cell) solve(ctx context.Context, ref harness.Ref, t *task.Task, h *sandbox.Handle, n networks) (events.FinishedData, error) {
	switch ref.Kind {
	case harness.Oracle:
		return c.solveOracle(ctx, t, h, n)
	}
	return events.FinishedData{}, fmt.Errorf("harness %s cannot run in this version", ref.Name)
}

// solveOracle copies the reference solution to /solution and /oracle and
// runs `bash /solution/solve.sh` as root in the task's workdir with
// [agent].timeout_sec (as Harbor runs solve.sh; most public tasks ship it
// without the execute bit, some without a shebang).
func (c *cell) solveOracle(ctx context.Context, t *task.Task, h *sandbox.Handle, n networks) (events.FinishedData, error) {
	if err := c.emit(ctx, events.Started, events.StartedData{Harness: c.plan.Harness, Model: c.plan.Model}); err != nil {
		return events.FinishedData{}, err
	}
	stage := harness.StagePath("solution")
	if err := c.s.docker.CopyIn(ctx, h, t.SolutionDir, stage); err != nil {
		return events.FinishedData{}, fmt.Errorf("copy the solution in: %w", err)
	}
	out, err := c.dir.OpenCapture("solve.log")
	if err != nil {
		return events.FinishedData{}, err
	}
	c.dir.Logf("solve: bash /solution/solve.sh (timeout %gs, network %s)", t.AgentTimeoutSec, n.solve)
	res, err := c.s.docker.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: harness.PlaceAndRun(stage, []string{"/solution", "/oracle"}, []string{"/solution", "/oracle"}, nil,
			[]string{"bash", "/solution/" + filepath.Base(t.SolutionScript)}),
		Env:     t.OracleEnv,
		Timeout: seconds(t.AgentTimeoutSec), Grace: oracleGrace, Stdout: out, Stderr: out,
	})
	_ = out.Close(c.dir, "stdout.tail.txt")
	if err != nil {
		return events.FinishedData{}, fmt.Errorf("run solve.sh: %w", err)
	}
	if res.ExitCode == harness.PrepExitCode && strings.Contains(out.Tail.String(), "proctor: ") {
		return events.FinishedData{}, fmt.Errorf("put the solution in place: %s", strings.TrimSpace(cellfs.Suffix(out.Tail.String(), 300)))
	}
	fin := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", res.ExitCode), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationSec: round3(res.Duration.Seconds()), StdoutTail: out.RowTail(),
		Isolation: map[string]any{"network": n.solve},
	}
	if res.TimedOut {
		fin.Reason = "timeout"
	}
	c.dir.Logf("solve ended: %s after %.3fs", fin.Reason, fin.DurationSec)
	return fin, nil
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

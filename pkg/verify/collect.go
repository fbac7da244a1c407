package verify

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// RunCollect runs the task's [[verifier.collect]] hooks in h, in order,
// after the solve and before the tests, as Harbor does: each `sh -c
// COMMAND` as its user (root when none) with its budget, output appended
// to collect.log in dir. Only hooks of the main service reach here (the
// loader refuses the others). A hook that exits non-zero or times out is a
// collect_failed finding and the next one still runs: the verifier then
// scores what there is. The error is the engine's.
func RunCollect(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, hooks []task.Collect, dir cellfs.Dir) ([]events.VerifierFinding, error) {
	if len(hooks) == 0 {
		return nil, nil
	}
	out, err := dir.OpenCapture("collect.log")
	if err != nil {
		return nil, err
	}
	defer out.Close(dir, "")
	var found []events.VerifierFinding
	for i, c := range hooks {
		fmt.Fprintf(out, "# verifier.collect[%d]: %s\n", i, c.Command)
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{
			Cmd: []string{"sh", "-c", c.Command}, User: c.User,
			Timeout: time.Duration(c.TimeoutSec * float64(time.Second)), Grace: time.Second,
			Stdout: out, Stderr: out,
		})
		if err != nil {
			return found, fmt.Errorf("verifier.collect[%d]: %w", i, err)
		}
		switch {
		case res.TimedOut:
			found = append(found, events.VerifierFinding{Kind: FindingCollectFailed, Detail: fmt.Sprintf("verifier.collect[%d] (%s) timed out after %gs", i, oneLine(c.Command), c.TimeoutSec)})
		case res.ExitCode != 0:
			found = append(found, events.VerifierFinding{Kind: FindingCollectFailed, Detail: fmt.Sprintf("verifier.collect[%d] (%s) exited %d", i, oneLine(c.Command), res.ExitCode)})
		}
		dir.Logf("verifier.collect[%d]: exit %d in %.3fs", i, res.ExitCode, res.Duration.Seconds())
	}
	return found, nil
}

// oneLine is s on one line of at most 120 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = cellfs.Suffix(s, 117)
		s = "..." + s
	}
	return s
}

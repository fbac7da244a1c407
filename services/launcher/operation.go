package launcher

import (
	"context"
	"math"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
)

// HarnessOperation is the op_type of the Operation every cell records for
// its top-level harness invocation (recordHarness).
const HarnessOperation = "harness"

// recordHarness records one top-level harness invocation of the cell (an
// arm's Solve; one per step of a multi-step cell) as an Operation of type
// HarnessOperation, at the time it started, with fields harness (its
// name), elapsed_sec (the invocation's wall time, seconds, to the
// millisecond), exit_code and timed_out (when the solve ended with a
// Finished), failed (true when it returned an error) and step (a step's
// name). So every cell the launcher ran, the oracle's too, has at least
// one operation. Nothing is recorded once ctx is done. It returns the
// event log's error.
func (c *cell) recordHarness(ctx context.Context, step string, start time.Time, out harness.Outcome, solveErr error) error {
	if ctx.Err() != nil {
		return nil
	}
	f := map[string]any{
		"harness":     c.cr.Plan.Harness,
		"elapsed_sec": math.Round(time.Since(start).Seconds()*1000) / 1000,
	}
	switch {
	case solveErr != nil:
		f["failed"] = true
	default:
		f["exit_code"] = out.Finished.ExitCode
		if out.Finished.TimedOut {
			f["timed_out"] = true
		}
	}
	if step != "" {
		f["step"] = step
	}
	return c.Emit(ctx, events.Operation, events.OperationData{OpType: HarnessOperation, Fields: f}, start)
}

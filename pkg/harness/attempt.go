package harness

import (
	"github.com/proctor-eval/proctor/pkg/events"
)

// NoAttemptError is the one rule for a solve that made no attempt, the
// same for a single-step cell and for each step of a multi-step one: it
// returns an error of class solver_error ("the solver made no attempt:
// <reason>") when fin says the solver made no attempt (Finished.NoAttempt:
// no output and no event of the agent, its install failed, or the Claude
// CLI ended without an assistant turn of output or a tool call), and nil
// otherwise. The launcher ends such a cell errored with the error, after
// recording fin, and its verifier never runs: missing data, never a 0 (a
// step's no-attempt ends the whole multi-step cell, not only the step). An
// arm that knows the cause is the provider's (a 429 before any turn)
// returns its own error of class infra instead, which `--retries` runs
// again.
func NoAttemptError(fin events.FinishedData) error {
	if !fin.NoAttempt {
		return nil
	}
	return events.Classf(events.ClassSolverError, "the solver made no attempt: %s", fin.Reason)
}

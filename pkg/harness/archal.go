package harness

import (
	"strings"

	"github.com/proctor-eval/proctor/pkg/cellfs"
)

// NotReported labels an agent's own usage that its harness did not give
// proctor: an agent:<dir> agent that wrote no metrics.json (or one that
// could not be read) and printed no Usage line. The report and the viewer
// show it in place of the agent's figures.
const NotReported = "not reported by harness"

// exitReasons maps the exitReason values of Archal's metrics.json onto the
// terminal_reason vocabulary of the Claude arms' result (completed,
// max_turns, ...), so rows of both compare. Keys are lower case without
// '_', '-' or spaces.
var exitReasons = map[string]string{
	"completed": "completed", "complete": "completed", "success": "completed", "done": "completed",
	"endturn": "completed", "finished": "completed", "stop": "completed",
	"maxturns": "max_turns", "maxsteps": "max_turns", "maxiterations": "max_turns", "turnlimit": "max_turns", "steplimit": "max_turns",
	"timeout": "timeout", "timedout": "timeout", "deadline": "timeout",
	"error": "error", "failed": "error", "failure": "error", "crash": "error", "exception": "error",
	"apierror": "api_error", "llmerror": "api_error", "modelerror": "api_error", "ratelimited": "api_error",
	"maxtokens": "budget_exceeded", "budgetexceeded": "budget_exceeded", "costlimit": "budget_exceeded", "tokenlimit": "budget_exceeded",
	"aborted": "aborted", "cancelled": "aborted", "canceled": "aborted", "interrupted": "aborted", "killed": "aborted",
}

// TerminalReason maps an Archal exitReason onto terminal_reason: the
// known values (exitReasons) and whether it was one; an unknown value is
// returned verbatim.
func TerminalReason(exitReason string) (string, bool) {
	k := strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(strings.TrimSpace(exitReason)))
	if r, ok := exitReasons[k]; ok {
		return r, true
	}
	return exitReason, false
}

// archalReported is the row's agent_reported for an agent:<dir> agent:
// its metrics.json m as written, plus terminal_reason mapped from its
// exitReason (an unknown value kept verbatim and named in run.log); when
// m is missing or unreadable and the agent printed no Usage line
// (usageLines false), "metrics_json": NotReported says so beside the
// reason.
func archalReported(dir cellfs.Dir, m Metrics, usageLines bool) map[string]any {
	if m == nil {
		if usageLines {
			return nil
		}
		return map[string]any{"metrics_json": NotReported + " (no metrics.json)"}
	}
	if _, bad := m["error"]; bad && len(m) == 1 {
		if !usageLines {
			m["metrics_json"] = NotReported
		}
		return m
	}
	if er, ok := m["exitReason"].(string); ok && er != "" {
		tr, known := TerminalReason(er)
		if !known {
			dir.Logf("metrics.json: exitReason %q is not one proctor maps onto terminal_reason; kept as it is", er)
		}
		if _, own := m["terminal_reason"]; !own {
			m["terminal_reason"] = tr
		}
	}
	return m
}

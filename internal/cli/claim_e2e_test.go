package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestOverclaimingAgentFlagged runs examples/agents/overclaim (it does
// nothing and says "all tests pass. The task is solved.") beside the
// oracle on two example tasks in real containers: the verifier fails it,
// its rows carry the claim and are flagged, the headline counts them, and
// the report beside --out-json shows the ⚠️ cells, the difficulty rollup
// and the per-task cost. Its operations: the harness invocation, the line
// it appended to $PROCTOR_OPERATIONS_FILE (read from the container after
// the solve) and, apart from them, its stderr line that mentions a tool.
func TestOverclaimingAgentFlagged(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	liar := "agent:" + abs(t, "../../examples/agents/overclaim")
	a, out := runMain(t, "tasks", "run", "--tasks-root", examplesRoot(t), "--tasks", "fix-sum,count-words",
		"--harnesses", "oracle,"+liar)
	rows := byCell(a)
	for _, task := range []string{"fix-sum", "count-words"} {
		r := rows[task+" "+liar]
		if r.Outcome != "failed" || r.AgentClaim == nil || !r.AgentClaim.ClaimedSuccess || !r.Overclaimed() ||
			!strings.Contains(r.AgentClaim.Text, "The task is solved.") {
			t.Errorf("%s: %s, claim %+v", task, r.Outcome, r.AgentClaim)
		}
		if r.Metrics.OperationsByType["harness"] != 1 || r.Metrics.OperationsByType["inspect"] != 1 || r.Metrics.OperationCount != 2 ||
			r.Metrics.LowFidelityOperationCount != 1 || r.Metrics.LowFidelityOperationsByType["tool"] != 1 {
			t.Errorf("%s operations: %d %v, low-fidelity %d %v", task, r.Metrics.OperationCount, r.Metrics.OperationsByType,
				r.Metrics.LowFidelityOperationCount, r.Metrics.LowFidelityOperationsByType)
		}
		if o := rows[task+" oracle"]; o.Outcome != "passed" || o.AgentClaim != nil || o.Overclaimed() || o.Metrics.OperationCount != 1 {
			t.Errorf("%s oracle: %+v", task, o)
		}
	}
	if s := a.Summary.PerHarness[liar]; s.ClaimedButFailed != 2 || s.LowFidelityOperations != 2 || s.Operations != 4 {
		t.Errorf("summary %+v", s)
	}
	md, err := os.ReadFile(filepath.Join(out, "a.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"2 ⚠️ claimed success but scored below 1", "## Difficulty", "| `oracle` | easy | 2/2 |",
		"## Per-task pass and cost", "## Answers", "| ⚠️ | `fix-sum` |", "· ⚠️ claimed success",
		"Low-fidelity operations (unstructured output lines that mention tool, subagent or loop; not in the operations column)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestNoOpEarnsNothingOnCSVColumns: the example agent that does nothing
// (and claims success) earns no partial credit on csv-columns: each of its
// checks, "no text column printed" included, needs an answer, so an empty
// one scores 0 (failed), as `tasks check`'s no-op check requires.
func TestNoOpEarnsNothingOnCSVColumns(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	liar := "agent:" + abs(t, "../../examples/agents/overclaim")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", examplesRoot(t), "--tasks", "csv-columns", "--harnesses", liar)
	r := byCell(a)["csv-columns "+liar]
	if r.Outcome != "failed" || r.Reward == nil || *r.Reward != 0 || r.Rewards["no_text"] != 0 || !r.Overclaimed() {
		t.Errorf("csv-columns under an agent that does nothing: %s reward %v rewards %v (%s)", r.Outcome, r.Reward, r.Rewards, r.Error)
	}
}

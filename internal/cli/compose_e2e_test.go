package cli

import (
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestComposeTasks runs the compose tasks of testdata/compose-root end to
// end (embedded NATS, real Docker): the oracle passes the task whose
// verifier asks the `keys` sidecar (built from its own context, main
// waiting until it is healthy, reached by its name on the cell's network
// under no-network); a cheating agent that forges the answer and plants a
// reward fails; the oracle passes the task whose `api` sidecar is built as
// compose builds it (build.dockerfile Dockerfile.api, build.args choosing
// its base image and baking in the greeting the verifier asks for,
// build.target a stage before one that cannot be built); a compose file
// with network_mode: host is refused by name before any build; nothing of
// the run is left behind.
func TestComposeTasks(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	cheat := "agent:" + abs(t, "testdata/agents/compose-cheat")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/compose-root"), "--all", "--harnesses", "oracle,"+cheat, "--concurrency", "2")
	rows := byCell(a)
	for _, c := range []struct {
		cell, outcome, errPart string
	}{
		{"sidecar oracle", "passed", ""},
		{"built oracle", "passed", ""},
		{"sidecar " + cheat, "failed", ""},
		{"refused oracle", "errored", `service keys: network_mode "host" is refused`},
	} {
		r, ok := rows[c.cell]
		if !ok {
			t.Errorf("%s: no row", c.cell)
			continue
		}
		if r.Outcome != c.outcome || !strings.Contains(r.Error, c.errPart) {
			t.Errorf("%s: outcome %s error %q, want %s with %q", c.cell, r.Outcome, r.Error, c.outcome, c.errPart)
		}
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of the run left", c, n)
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// armsScript answers the tasks of testdata/arms-root as the replay agent
// does: the commands of the instruction's RUN lines, by tool use.
const armsScript = `
cases:
  - when: "CASE-SETUP-USER"
    replies:
      - tool_use: [{name: Bash, input: {command: "id -u > /app/solve_uid"}}]
        usage: {input_tokens: 100, output_tokens: 10}
      - text: "Recorded."
        usage: {input_tokens: 110, output_tokens: 5}
replies:
  - text: "I do not know how."
    usage: {input_tokens: 90, output_tokens: 7}
`

// TestStepSetupRunsAsTheSolvingUser: a step's setup.sh runs as the user
// the arm solves as, under every in-container arm: root under the oracle,
// uid 10001 under agent: and docker-claude (docker-claude ran it as root,
// and the agent arm as uid 10001: the launcher tested the harness kind).
// The step's test passes only when setup.sh and the solve ran as one user.
func TestStepSetupRunsAsTheSolvingUser(t *testing.T) {
	cli := claudeSetup(t)
	fakeModel(t, cli, armsScript)
	replay := "agent:" + abs(t, "testdata/agents/replay")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/arms-root"), "--tasks", "setup-user",
		"--harnesses", "oracle,"+replay+",docker-claude", "--concurrency", "3", "--agent-grace", "2")
	rows := byCell(a)
	for _, h := range []string{"oracle", replay, "docker-claude"} {
		r := rows["setup-user "+h]
		if r.Outcome != "passed" {
			tail := ""
			if len(r.Steps) == 1 {
				tail = r.Steps[0].Error
			}
			t.Errorf("%s: %s (%q %q), want passed: setup.sh and the solve as one user", h, r.Outcome, r.Error, tail)
		}
	}
}

// TestNoNetworkVerifierUnderAgentArms: the verifier of a no-network task
// has no network at all under an agent arm, as under the oracle: its test
// looks a name up, which fails at once (reward 1) with no network; on the
// agent's internal network the lookup went unanswered for 20 s, past the
// verifier's 12 s budget (verifier_timeout). The multi-step form moves
// the sandbox for each step's verifier and back: the second step's agent
// sees a network interface again.
func TestNoNetworkVerifierUnderAgentArms(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	replay := "agent:" + abs(t, "testdata/agents/replay")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/arms-root"), "--tasks", "no-net-dns,no-net-steps",
		"--harnesses", "oracle,"+replay, "--concurrency", "4")
	rows := byCell(a)
	for _, cell := range []string{"no-net-dns oracle", "no-net-dns " + replay, "no-net-steps oracle", "no-net-steps " + replay} {
		r := rows[cell]
		if r.Outcome != "passed" || r.Metrics.VerifySec == nil || *r.Metrics.VerifySec > 10 {
			t.Errorf("%s: %s after verify_sec %v (%q), want passed at once", cell, r.Outcome, ptrStr(r.Metrics.VerifySec), r.Error)
		}
	}
	r := rows["no-net-steps "+replay]
	b, err := os.ReadFile(filepath.Join(r.OutputDir, "steps", "two", "artifacts", "app", "nets"))
	if err != nil || strings.TrimSpace(strings.ReplaceAll(string(b), "lo\n", "")) == "" {
		t.Errorf("the second step's agent saw the interfaces %q (%v), want its network's back beside lo", b, err)
	}
}

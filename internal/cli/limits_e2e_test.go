package cli

import (
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestAgentResourceAttacks plays three hostile agents against real
// containers (testdata/limits-root, agent testdata/agents/attacker) and
// checks the rows: an agent that allocates past its task's memory_mb is
// OOM-killed and the row says so beside the verifier's outcome; an agent
// that forks 2000 processes is held at --pids-limit and the verifier still
// runs after it; a setuid-root binary in the image gives the agent no
// root, so its attempt to read /etc/shadow fails.
func TestAgentResourceAttacks(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	attacker := "agent:" + abs(t, "testdata/agents/attacker")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/limits-root"), "--all", "--harnesses", attacker,
		"--pids-limit", "300", "--default-memory-mb", "1024", "--default-cpus", "1.5")
	rows := byCell(a)

	hog := rows["memhog "+attacker]
	if hog.Outcome != "failed" || !hog.Metrics.OOMKilled || hog.Metrics.OOMPhase != "solve" ||
		!strings.Contains(hog.Error, "OOM-killed during the solve at the memory limit of 64 MiB (task)") {
		t.Errorf("memory hog: outcome %s oom %v/%q error %q", hog.Outcome, hog.Metrics.OOMKilled, hog.Metrics.OOMPhase, hog.Error)
	}
	if !strings.Contains(hog.StdoutTail, "tail exited 137") {
		t.Errorf("memory hog's output: %q", hog.StdoutTail)
	}
	if l := hog.Metrics.Limits; l == nil || l.MemoryMB != 64 || l.MemorySource != "task" || l.PidsLimit != 300 || l.CPUs != 1.5 || !l.NoNewPrivileges {
		t.Errorf("memory hog's limits: %+v", l)
	}

	bomb := rows["forkbomb "+attacker]
	forked := bomb.Rewards["forked"]
	if bomb.Outcome != "passed" || forked <= 0 || forked >= 300 || bomb.Metrics.OOMKilled {
		t.Errorf("fork bomb: outcome %s, forked %v under a pids limit of 300, error %q", bomb.Outcome, forked, bomb.Error)
	}
	if l := bomb.Metrics.Limits; l == nil || l.MemoryMB != 1024 || l.MemorySource != "default" || l.PidsLimit != 300 {
		t.Errorf("fork bomb's limits: %+v", l)
	}
	t.Logf("the bomb forked %v of 2000 processes", forked)

	esc := rows["setuid "+attacker]
	if esc.Outcome != "failed" || esc.Reward == nil || *esc.Reward != 0 {
		t.Errorf("setuid escalation: outcome %s reward %v (the agent read /etc/shadow)", esc.Outcome, esc.Reward)
	}
	if !strings.Contains(esc.StdoutTail, "uid 10001") {
		t.Errorf("setuid escalation: the agent saw %q, want uid 10001", esc.StdoutTail)
	}
}

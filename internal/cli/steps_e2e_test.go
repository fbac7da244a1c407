package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

func stepOutcomes(r artifact.Result) []string {
	var out []string
	for _, s := range r.Steps {
		out = append(out, s.Outcome)
	}
	return out
}

// TestMultiStepTasks runs the multi-step tasks of testdata/steps-root end
// to end (embedded NATS, real Docker) with the oracle and a cheating agent:
// early stopping on min_reward with later steps skipped and left out of
// the mean, per-key means, the final strategy, a failed healthcheck (no
// verdict anywhere: errored, never a 0), and a background process of one
// step still running in the next (one shared sandbox, thawed between
// steps). The cheating agent plants rewards and leaves a writer running;
// every step's verifier starts from a fresh /logs/verifier, so it earns
// nothing.
func TestMultiStepTasks(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	cheat := "agent:" + abs(t, "testdata/agents/step-cheat")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/steps-root"), "--all", "--harnesses", "oracle,"+cheat, "--concurrency", "2")
	rows := byCell(a)
	f := func(x float64) *float64 { return &x }
	for _, c := range []struct {
		cell    string
		outcome string
		reward  *float64
		rewards map[string]float64
		steps   []string
	}{
		{"early-stop oracle", "partial", f(0.5), nil, []string{"partial", "skipped", "skipped"}},
		{"mean-keys oracle", "partial", f(0.5), map[string]float64{"reward": 0.5, "style": 0.5}, []string{"passed", "failed"}},
		{"final oracle", "partial", f(0.25), nil, []string{"passed", "partial"}},
		{"no-health oracle", "errored", nil, nil, []string{"verifier_error", "skipped"}},
		{"shared-state oracle", "passed", f(1), nil, []string{"passed", "passed"}},
		{"early-stop " + cheat, "failed", f(0), nil, []string{"failed", "skipped", "skipped"}},
	} {
		r, ok := rows[c.cell]
		if !ok {
			t.Errorf("%s: no row", c.cell)
			continue
		}
		if r.Outcome != c.outcome || !reflect.DeepEqual(r.Reward, c.reward) || !reflect.DeepEqual(stepOutcomes(r), c.steps) {
			t.Errorf("%s: outcome %s reward %v steps %v (error %q), want %s %v %v", c.cell, r.Outcome, ptrStr(r.Reward), stepOutcomes(r), r.Error, c.outcome, ptrStr(c.reward), c.steps)
		}
		if c.rewards != nil && !reflect.DeepEqual(r.Rewards, c.rewards) {
			t.Errorf("%s: rewards %v, want %v", c.cell, r.Rewards, c.rewards)
		}
	}
	es := rows["early-stop oracle"]
	if len(es.Steps) == 3 {
		if !strings.Contains(es.Steps[0].Stop, "min_reward reward = 1") || !strings.Contains(es.Steps[1].Error, "step a") {
			t.Errorf("early stop reasons: stop %q, skip %q", es.Steps[0].Stop, es.Steps[1].Error)
		}
		if es.Steps[0].SolveSec == nil || es.Steps[0].VerifySec == nil || es.Steps[0].ElapsedSec == nil || es.Steps[1].SolveSec != nil {
			t.Errorf("step timings: %+v / %+v", es.Steps[0], es.Steps[1])
		}
		// Each step has its own output directory.
		if _, err := os.Stat(filepath.Join(es.OutputDir, "steps", "a", "verifier.log")); err != nil {
			t.Errorf("step a's verifier log: %v", err)
		}
	}
	if nh := rows["no-health oracle"]; len(nh.Steps) == 2 && !strings.Contains(nh.Steps[0].Error, "healthcheck") {
		t.Errorf("no-health step a error %q", nh.Steps[0].Error)
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

func ptrStr(p *float64) any {
	if p == nil {
		return "null"
	}
	return *p
}

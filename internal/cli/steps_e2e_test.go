package cli

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/sandbox"
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
// verdict: verifier_error, missing data, never a 0), and a background
// process of one step still running in the next (one shared sandbox,
// thawed between steps). A row's verify_sec is its steps' summed. The cheating agent plants rewards and leaves a writer running;
// every step's verifier starts from a fresh /logs/verifier, so it earns
// nothing.
func TestMultiStepTasks(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
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
		{"no-health oracle", "verifier_error", nil, nil, []string{"verifier_error", "skipped"}},
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
	for _, cell := range []string{"mean-keys oracle", "shared-state oracle"} {
		r := rows[cell]
		sum := 0.0
		for _, s := range r.Steps {
			if s.VerifySec != nil {
				sum += *s.VerifySec
			}
		}
		if v := r.Metrics.VerifySec; v == nil || *v <= 0 || math.Abs(*v-sum) > 0.002*float64(len(r.Steps)) {
			t.Errorf("%s: verify_sec %v, want the steps' sum %.3f", cell, ptrStr(r.Metrics.VerifySec), sum)
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

// TestMultiStepUnverifiedStepIsNoPass: a step whose verifier gives no
// verdict makes the cell missing data (verifier_error), never a pass. The
// agent does the first step's work and, in the second, leaves its
// verifier nothing to score (the test script aborts before it writes a
// reward); a mean over the verified steps only passed the cell with
// reward 1. The oracle passes both steps.
func TestMultiStepUnverifiedStepIsNoPass(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	skip := "agent:" + abs(t, "testdata/agents/step-skip")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/steps-root"), "--tasks", "unverified", "--harnesses", "oracle,"+skip, "--concurrency", "2")
	rows := byCell(a)
	if r := rows["unverified oracle"]; r.Outcome != "passed" || !reflect.DeepEqual(stepOutcomes(r), []string{"passed", "passed"}) {
		t.Errorf("oracle: %s %v (%q), want passed [passed passed]", r.Outcome, stepOutcomes(r), r.Error)
	}
	r := rows["unverified "+skip]
	if r.Outcome != "verifier_error" || r.Passed || r.Reward != nil || !r.Errored() || !reflect.DeepEqual(stepOutcomes(r), []string{"passed", "verifier_error"}) {
		t.Errorf("agent: outcome %s passed %v reward %v steps %v, want verifier_error (errored, no reward) [passed verifier_error]", r.Outcome, r.Passed, ptrStr(r.Reward), stepOutcomes(r))
	}
	if !strings.Contains(r.Error, "step 2 (b) has no verdict") {
		t.Errorf("agent: error %q does not name step b", r.Error)
	}
	if s := a.Summary.PerHarness[skip]; s == nil || s.Passed != 0 || s.Errored != 1 {
		t.Errorf("agent summary: %+v, want 0 passed, 1 errored", s)
	}
}

// TestMultiStepLostSandboxIsErrored: a sandbox that cannot be resumed for
// the next step (here removed while the launcher resumes it after step
// a) errors the cell, class sandbox; it stopped the trial as a step would
// and rolled up the steps before, passing the cell on step a alone.
func TestMultiStepLostSandboxIsErrored(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, errc := cli.Events(ctx, events.ListOptions{Filters: filters.NewArgs(filters.Arg("event", "pause"), filters.Arg("label", sandbox.LabelManaged))})
	removed := make(chan string, 1)
	go func() {
		for {
			select {
			case m := <-msgs:
				if strings.HasPrefix(m.Actor.Attributes[sandbox.LabelCell], "lost-sandbox/") {
					// Step a's freeze: its resume follows.
					err := cli.ContainerRemove(ctx, m.Actor.ID, container.RemoveOptions{Force: true})
					removed <- fmt.Sprint(err)
					return
				}
			case err := <-errc:
				removed <- fmt.Sprint(err)
				return
			}
		}
	}()
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/steps-fault-root"), "--tasks", "lost-sandbox", "--harnesses", "oracle")
	select {
	case got := <-removed:
		if got != "<nil>" {
			t.Fatalf("remove the container: %s", got)
		}
	default:
		t.Fatal("the step's pause was never seen")
	}
	r := byCell(a)["lost-sandbox oracle"]
	if r.Outcome != "errored" || r.ErrorClass != "sandbox" || r.Reward != nil || !strings.Contains(r.Error, "resume the sandbox") {
		t.Errorf("outcome %s class %s reward %v error %q, want errored (sandbox) without a reward, saying the sandbox could not be resumed", r.Outcome, r.ErrorClass, ptrStr(r.Reward), r.Error)
	}
}

// manyStepsTask writes a task of n steps under root: each step uploads a
// workdir whose setup.sh runs at once after the step boundary, its
// solution appends the step's number to /app/log, and its test checks
// the log so far and leaves a process holding its output, stopped at the
// test's exit (as a test that starts a server does): the engine then
// handles the container's pause events seconds late, which refused the
// next step's exec as "container is paused".
func manyStepsTask(t *testing.T, root string, n int) {
	t.Helper()
	files := map[string]string{
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"tests/test.sh": `#!/bin/bash
sleep 600 &
want=$(seq 1 "$STEP" | tr '\n' ' '); got=$(tr '\n' ' ' < /app/log)
echo "log: $got"
[ "$got" = "$want" ] && [ -f "/app/setup-$STEP" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
`,
	}
	toml := "[environment]\nworkdir = \"/app\"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n"
	for i := 1; i <= n; i++ {
		s := fmt.Sprintf("steps/s%02d/", i)
		toml += fmt.Sprintf("[[steps]]\nname = \"s%02d\"\nmin_reward = 1.0\n[steps.verifier.env]\nSTEP = \"%d\"\n", i, i)
		files[s+"instruction.md"] = fmt.Sprintf("Append %d to /app/log.\n", i)
		files[s+"solution/solve.sh"] = fmt.Sprintf("echo %d >> /app/log\n", i)
		files[s+"workdir/setup.sh"] = fmt.Sprintf("touch /app/setup-%d\n", i)
	}
	files["task.toml"] = toml
	for rel, body := range files {
		p := filepath.Join(root, "many-steps", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStepBoundariesUnderLoad runs 4 multi-step cells of 8 steps at once
// with every CPU busy: 28 step boundaries, each after a verifier that
// leaves the engine's event queue standing still. No cell may error:
// every step passes (a boundary refused as "container is paused" errored
// 1 or 2 cells of 4 in a loop).
func TestStepBoundariesUnderLoad(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()
	const steps = 8
	manyStepsTask(t, root, steps)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 1e6; i++ {
				}
			}
		})
	}
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--repeats", "4", "--concurrency", "4")
	close(stop)
	wg.Wait()
	if len(a.Results) != 4 {
		t.Fatalf("%d rows", len(a.Results))
	}
	for _, r := range a.Results {
		passed := 0
		for _, s := range r.Steps {
			if s.Outcome == "passed" {
				passed++
			}
		}
		if r.Outcome != "passed" || passed != steps {
			t.Errorf("%s: %s (%s %q), %d of %d steps passed %v", r.CellID, r.Outcome, r.ErrorClass, r.Error, passed, steps, stepOutcomes(r))
		}
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

// TestMultiStepGradersGoneBeforeNextStep: a step's verifier copies the
// tests to /tests and /verifier and writes /logs/verifier; none of it is
// left for the next step's agent, which lists those directories into its
// work tree. The second step's test scores 0 when the listing shows a
// grader file (the task-level tests/ grade every step, so step one's copy
// held step two's own test).
func TestMultiStepGradersGoneBeforeNextStep(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root, agent := t.TempDir(), t.TempDir()
	writeTaskFiles(t, agent, map[string]string{
		"agent.toml": "run = \"ls -la /tests /verifier /logs/verifier > /app/seen.txt 2>&1; echo looked\"\n",
	})
	writeTaskFiles(t, filepath.Join(root, "look"), map[string]string{
		"task.toml":                "schema_version = \"1.1\"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n[[steps]]\nname = \"one\"\n\n[[steps]]\nname = \"two\"\n",
		"environment/Dockerfile":   "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"steps/one/instruction.md": "Look around.\n",
		"steps/two/instruction.md": "Look again.\n",
		"tests/test.sh":            "#!/bin/bash\nmkdir -p /logs/verifier\nif grep -qs -e test.sh -e reward.txt /app/seen.txt; then echo 0 > /logs/verifier/reward.txt; else echo 1 > /logs/verifier/reward.txt; fi\nrm -f /app/seen.txt\n",
	})
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "agent:"+agent)
	if len(a.Results) != 1 {
		t.Fatalf("%d rows", len(a.Results))
	}
	r := a.Results[0]
	if r.Outcome != "passed" || !reflect.DeepEqual(stepOutcomes(r), []string{"passed", "passed"}) {
		t.Fatalf("outcome %s, steps %v (%s): the second step's agent saw the first step's grader files", r.Outcome, stepOutcomes(r), r.Error)
	}
	// Each step's solve has its own seed files: its prompt and its work
	// tree as the step's agent left it.
	for step, prompt := range map[string]string{"one": "Look around.\n", "two": "Look again.\n"} {
		dir := filepath.Join(r.OutputDir, "steps", step)
		if b, err := os.ReadFile(filepath.Join(dir, "prompt.txt")); err != nil || string(b) != prompt {
			t.Errorf("step %s prompt.txt: %q %v", step, b, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "work", "seen.txt")); err != nil {
			t.Errorf("step %s work/: %v", step, err)
		}
	}
}

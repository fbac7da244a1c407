package task

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// stepsToml is a multi-step definition using every step key.
const stepsToml = `schema_version = "1.1"
multi_step_reward_strategy = "final"
[agent]
timeout_sec = 100
user = "agent"
[verifier]
timeout_sec = 50
[verifier.env]
SHARED = "task"
LEVEL = "task"
[[steps]]
name = "one"
min_reward = 1.0
[steps.agent]
timeout_sec = 7
[steps.verifier]
timeout_sec = 3
user = "root"
[steps.verifier.env]
LEVEL = "step"
[[steps]]
name = "two"
min_reward = { reward = 0.5, style = 1 }
[steps.healthcheck]
command = "test -f /app/ready"
retries = 2
`

func writeStepsTask(t *testing.T, root string) {
	t.Helper()
	writeTask(t, root, "ms", map[string]string{
		"task.toml":                      stepsToml,
		"steps/one/instruction.md":       "First.\n",
		"steps/one/solution/solve.sh":    "echo one\n",
		"steps/one/tests/test.sh":        "echo 1 > /logs/verifier/reward.txt\n",
		"steps/one/workdir/setup.sh":     "touch ready\n",
		"steps/one/workdir/data.txt":     "x\n",
		"steps/two/instruction.md":       "Second.\n",
		"steps/two/solution/solve.sh":    "echo two\n",
		"tests/helper.sh":                "true\n",
		"instruction.md":                 "ignored for a multi-step task\n",
		"solution/solve.sh":              "echo root\n",
		"environment/Dockerfile":         "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"tests/test.sh":                  "echo 0 > /logs/verifier/reward.txt\n",
		"steps/two/tests/expected.txt":   "y\n",
		"steps/two/solution/extra.patch": "",
	})
}

// TestStepsParsed checks every [[steps]] key is read, budgets, users and
// verifier env inherit the task-level tables, and each step's files are
// found (a step without its own test.sh uses the task-level one).
func TestStepsParsed(t *testing.T) {
	root := t.TempDir()
	writeStepsTask(t, root)
	tk := mustLoad(t, root, "ms")
	if tk.MultiStepRewardStrategy != StepRewardFinal || len(tk.Steps) != 2 {
		t.Fatalf("strategy %q, %d steps", tk.MultiStepRewardStrategy, len(tk.Steps))
	}
	one, two := tk.Steps[0], tk.Steps[1]
	if one.Name != "one" || one.Prompt != "First.\n" || one.AgentTimeoutSec != 7 || one.VerifierTimeoutSec != 3 ||
		one.AgentUser != "agent" || one.VerifierUser != "root" {
		t.Errorf("step one: %+v", one)
	}
	if !reflect.DeepEqual(one.VerifierEnv, map[string]string{"SHARED": "task", "LEVEL": "step"}) {
		t.Errorf("step one verifier env %v", one.VerifierEnv)
	}
	if !reflect.DeepEqual(one.MinReward, map[string]float64{"reward": 1}) || one.Healthcheck != nil {
		t.Errorf("step one min_reward %v healthcheck %v", one.MinReward, one.Healthcheck)
	}
	if filepath.Base(filepath.Dir(one.TestScript)) != "tests" || !strings.Contains(one.TestScript, "steps/one/") {
		t.Errorf("step one test script %s", one.TestScript)
	}
	if one.WorkdirDir == "" || filepath.Base(one.SetupScript) != StepSetupScript || one.SolutionScript == "" {
		t.Errorf("step one files %+v", one)
	}
	if two.AgentTimeoutSec != 100 || two.VerifierTimeoutSec != 50 || two.VerifierUser != "" ||
		!reflect.DeepEqual(two.VerifierEnv, map[string]string{"SHARED": "task", "LEVEL": "task"}) {
		t.Errorf("step two inherits: %+v", two)
	}
	if two.TestScript != tk.TestScript || two.TestsDir == "" || two.WorkdirDir != "" {
		t.Errorf("step two uses the task-level test.sh %s, tests %s (task %s)", two.TestScript, two.TestsDir, tk.TestScript)
	}
	if !reflect.DeepEqual(two.MinReward, map[string]float64{"reward": 0.5, "style": 1}) {
		t.Errorf("step two min_reward %v", two.MinReward)
	}
	want := &Healthcheck{Command: "test -f /app/ready", IntervalSec: 5, TimeoutSec: 30, StartIntervalSec: 5, Retries: 2}
	if !reflect.DeepEqual(two.Healthcheck, want) {
		t.Errorf("healthcheck %+v, want Harbor's defaults %+v", two.Healthcheck, want)
	}
	if len(tk.Missing) != 0 || len(tk.UnknownKeys) != 0 || tk.Unsupported != "" {
		t.Errorf("missing %v unknown %v unsupported %q", tk.Missing, tk.UnknownKeys, tk.Unsupported)
	}
	if r := tk.Refusal(withSteps(NeedsOracle)); r != "" {
		t.Errorf("oracle refuses a complete multi-step task: %s", r)
	}
	if r := tk.Refusal(NeedsCommand); !strings.Contains(r, "cannot run steps") {
		t.Errorf("command harness: %q", r)
	}
}

// TestStepsDefaultMean checks an unset strategy is mean on a multi-step
// task and "" on a single-step one.
func TestStepsDefaultMean(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "ms", map[string]string{
		"task.toml":                 "[[steps]]\nname = \"a\"\n",
		"steps/a/instruction.md":    "A\n",
		"steps/a/solution/solve.sh": "true\n",
	})
	writeTask(t, root, "single", nil)
	if s := mustLoad(t, root, "ms").MultiStepRewardStrategy; s != StepRewardMean {
		t.Errorf("multi-step default %q", s)
	}
	if s := mustLoad(t, root, "single").MultiStepRewardStrategy; s != "" {
		t.Errorf("single-step %q", s)
	}
}

// TestStepsRefusals checks a step lacking its instruction, solution or any
// test script is refused by the step's name and file, and a task with
// neither a root instruction.md nor steps is refused naming instruction.md.
func TestStepsRefusals(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "ms", map[string]string{
		"task.toml":                 "[[steps]]\nname = \"a\"\n[[steps]]\nname = \"b\"\n",
		"steps/a/instruction.md":    "A\n",
		"steps/a/solution/solve.sh": "true\n",
	})
	writeTask(t, root, "none", nil)
	for _, f := range []string{"none/instruction.md", "ms/tests/test.sh"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	tk := mustLoad(t, root, "ms")
	for _, c := range []struct {
		n    Needs
		want string
	}{
		{withSteps(NeedsOracle), "no verifier for step a: neither steps/a/tests/test.sh nor tests/test.sh exists"},
		{NeedsCommand, "multi-step task (2 steps): this harness cannot run steps"},
		{Needs{Steps: true, SolutionScript: true}, "no reference solution for step b: steps/b/solution/solve.sh is missing"},
		{Needs{Steps: true, Prompt: true}, "no prompt for step b: steps/b/instruction.md is missing or empty"},
	} {
		if got := tk.Refusal(c.n); got != c.want {
			t.Errorf("%+v: refusal %q, want %q", c.n, got, c.want)
		}
	}
	if !reflect.DeepEqual(tk.Missing, []string{"steps/a/tests/test.sh", "steps/b/instruction.md", "steps/b/solution/solve.sh", "steps/b/tests/test.sh"}) {
		t.Errorf("missing %v", tk.Missing)
	}
	if got := mustLoad(t, root, "none").Refusal(NeedsContainerAgent); got != "no prompt: instruction.md is missing or empty" {
		t.Errorf("no instruction and no steps: %q", got)
	}
}

func withSteps(n Needs) Needs { n.Steps = true; return n }

// TestStepsErrors checks malformed steps are errors naming the key.
func TestStepsErrors(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{"[[steps]]\nmin_reward = 1\n", "steps[0].name: is required"},
		{"[[steps]]\nname = \"../x\"\n", "steps[0].name: \"../x\" must be a plain directory name"},
		{"[[steps]]\nname = \"a\"\n[[steps]]\nname = \"a\"\n", "steps[1].name: \"a\" is also the name of steps[0]"},
		{"multi_step_reward_strategy = \"max\"\n[[steps]]\nname = \"a\"\n", "multi_step_reward_strategy: must be \"mean\" or \"final\""},
		{"[[steps]]\nname = \"a\"\nmin_reward = \"high\"\n", "steps[0].min_reward: must be a finite number or a table"},
		{"[[steps]]\nname = \"a\"\nmin_reward = { reward = \"x\" }\n", "steps[0].min_reward.reward: must be a finite number"},
		{"[[steps]]\nname = \"a\"\n[steps.agent]\ntimeout_sec = 0\n", "steps[0].agent.timeout_sec: must be a finite number > 0"},
		{"[[steps]]\nname = \"a\"\n[steps.healthcheck]\nretries = 2\n", "steps[0].healthcheck.command: is required"},
		{"steps = 3\n", "steps: must be a list of tables"},
	} {
		root := t.TempDir()
		writeTask(t, root, "bad", map[string]string{"task.toml": c.toml})
		_, err := Discover(root)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "task.toml") {
			t.Errorf("%q: error %v, want one naming task.toml and %q", c.toml, err, c.want)
		}
	}
}

// TestStepsUnknownKey checks a misspelt step key is reported.
func TestStepsUnknownKey(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "ms", map[string]string{
		"task.toml":                 "[[steps]]\nname = \"a\"\nmin_rewrd = 1\n",
		"steps/a/instruction.md":    "A\n",
		"steps/a/solution/solve.sh": "true\n",
	})
	tk := mustLoad(t, root, "ms")
	if len(tk.UnknownKeys) != 1 || tk.UnknownKeys[0].Key != "steps[0].min_rewrd" {
		t.Errorf("unknown keys %+v", tk.UnknownKeys)
	}
}

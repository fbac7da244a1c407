package harness_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// TestLowFidelityType: a line is a low-fidelity operation by the first of
// tool(s), subagent(s), loop(s) it holds as a word (letters only, case
// ignored).
func TestLowFidelityType(t *testing.T) {
	for line, want := range map[string]string{
		"calling tool bash":                 "tool",
		"[TOOL] read_file":                  "tool",
		"tool_use: edit":                    "tool",
		"2 tools available":                 "tool",
		"Spawning subagent #2":              "subagent",
		"subagents=3, then tool":            "subagent",
		"agent loop iteration 4":            "loop",
		"LOOPS: 7":                          "loop",
		"loop over the tools":               "loop",
		"toolbox ready":                     "",
		"sub-agent started":                 "",
		"looping":                           "",
		"nothing to see":                    "",
		"":                                  "",
		"{\"_tag\":\"ToolCall\"}":           "",
		"the tool\x1b[2J escape is no word": "tool",
	} {
		if got := harness.LowFidelityType(line); got != want {
			t.Errorf("LowFidelityType(%q) = %q, want %q", line, got, want)
		}
	}
}

// TestAgentOperationsFile: an in-container agent gets
// PROCTOR_OPERATIONS_FILE and DOKIMI_OPERATIONS_FILE; the JSON lines it
// appended there become Operation events after the solve (a line that is
// not a JSON object is skipped); its stdout text and stderr lines that
// mention tool, subagent or loop are counted as low-fidelity operations on
// Finished, apart from the events (an event line that says ToolCall is
// not one).
func TestAgentOperationsFile(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	stdout := `{"_tag":"ToolCall","name":"bash"}
calling tool bash
PROCTOR_OP {"type":"plan"}
done
`
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Stdout: stdout,
		Stderr: "loop 1\nSpawning subagent reviewer\nloop 2\ntoolbox\n",
		Files: map[string]sandbox.FileResult{
			harness.AgentOperationsFile: {Data: []byte(`{"type":"search","hits":3}` + "\nnot json\n\n" + `{"op":"fetch"}` + "\n")},
		}}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Execs() {
		if strings.Contains(strings.Join(e.Spec.Cmd, " "), "agent.sh") {
			if e.Spec.Env["PROCTOR_OPERATIONS_FILE"] != "/agent-output/operations.jsonl" || e.Spec.Env["DOKIMI_OPERATIONS_FILE"] != "/agent-output/operations.jsonl" {
				t.Errorf("agent env: %v", e.Spec.Env)
			}
		}
	}
	var ops []string
	for _, e := range env.Events() {
		if e.Type == events.Operation {
			ops = append(ops, e.Data.(*events.OperationData).OpType)
		}
	}
	if strings.Join(ops, ",") != "plan,search,fetch" {
		t.Errorf("operations %v, want plan (stdout), search and fetch (the file)", ops)
	}
	if want := map[string]int{"tool": 1, "loop": 2, "subagent": 1}; !maps.Equal(out.Finished.LowFidelityOps, want) {
		t.Errorf("low-fidelity operations %v, want %v", out.Finished.LowFidelityOps, want)
	}
	if b, _ := os.ReadFile(env.Dir().Path("run.log")); !strings.Contains(string(b), "1 lines of operations.jsonl were not JSON objects") {
		t.Errorf("run.log does not count the bad line:\n%s", b)
	}
}

// TestAgentHostileOperationsFile: an operations file the agent made a
// symlink (to a host or grader file) or a device is never followed; the
// cell has no operation from it and run.log says why.
func TestAgentHostileOperationsFile(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Stdout: "hi\n", Files: map[string]sandbox.FileResult{
		harness.AgentOperationsFile: sandboxfake.Symlink(harness.AgentOperationsFile, "/tests/expected.jsonl"),
	}}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	if _, _, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env); err != nil {
		t.Fatal(err)
	}
	for _, e := range env.Events() {
		if e.Type == events.Operation {
			t.Errorf("an operation from a symlinked file: %+v", e.Data)
		}
	}
	if b, _ := os.ReadFile(env.Dir().Path("run.log")); !strings.Contains(string(b), "operations.jsonl not read") {
		t.Errorf("run.log:\n%s", b)
	}
}

// TestCommandDokimiNames: a command gets DOKIMI_OUTPUT_DIR and
// DOKIMI_OPERATIONS_FILE beside the PROCTOR_* names, the same absolute
// paths; operations appended through either name are read; its stderr
// and stdout text count as low-fidelity operations.
func TestCommandDokimiNames(t *testing.T) {
	var env map[string]string
	sc := sandboxfake.Script{Match: "my-solver", Stdout: "running the agent loop\n", Stderr: "tool: bash\n", Do: func(spec sandbox.ExecSpec) error {
		env = spec.Env
		return os.WriteFile(spec.Env["DOKIMI_OPERATIONS_FILE"], []byte(`{"type":"llm_call","tokens":12}`+"\n"), 0o644)
	}}
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{sc}}
	e := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "command:my-solver {task_path}", d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "command:my-solver {task_path}"), e)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"OUTPUT_DIR", "OPERATIONS_FILE"} {
		p, dk := env["PROCTOR_"+k], env["DOKIMI_"+k]
		if p == "" || p != dk || !filepath.IsAbs(dk) {
			t.Errorf("PROCTOR_%s %q, DOKIMI_%s %q: want the same absolute path", k, p, k, dk)
		}
	}
	var ops []string
	for _, ev := range e.Events() {
		if ev.Type == events.Operation {
			ops = append(ops, ev.Data.(*events.OperationData).OpType)
		}
	}
	if strings.Join(ops, ",") != "llm_call" {
		t.Errorf("operations %v", ops)
	}
	if want := map[string]int{"tool": 1, "loop": 1}; !maps.Equal(out.Finished.LowFidelityOps, want) {
		t.Errorf("low-fidelity operations %v, want %v", out.Finished.LowFidelityOps, want)
	}
}

package harness_test

import (
	"context"
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

// TestCommandSolverJSON: a solver.json a command leaves in {output_dir}
// (the Claude result event, as the task-runs seed writes it) is its final
// claim: a response Message, with the result's subtype and is_error kept
// for the claim rule; one that is a symlink or not a JSON object is
// ignored with the reason in run.log.
func TestCommandSolverJSON(t *testing.T) {
	run := func(t *testing.T, write func(out string) error) (*harnesstest.Env, harness.Outcome) {
		t.Helper()
		sc := sandboxfake.Script{Match: "my-solver", Do: func(spec sandbox.ExecSpec) error { return write(spec.Env["PROCTOR_OUTPUT_DIR"]) }}
		d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{sc}}
		env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "command:my-solver {task_path}", d)
		_, out, err := harnesstest.Run(context.Background(), arm(t, "command:my-solver {task_path}"), env)
		if err != nil {
			t.Fatal(err)
		}
		return env, out
	}
	responses := func(env *harnesstest.Env) []string {
		var out []string
		for _, e := range env.Events() {
			if m, ok := e.Data.(events.MessageData); ok && e.Type == events.Message && m.Role == "response" {
				out = append(out, m.Text)
			}
		}
		return out
	}
	t.Run("claude-result", func(t *testing.T) {
		env, out := run(t, func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "solver.json"), []byte(`{"type":"result","subtype":"error_max_turns","is_error":true,"result":"All tests pass.","num_turns":9}`), 0o644)
		})
		if got := responses(env); len(got) != 1 || got[0] != "All tests pass." {
			t.Errorf("response messages %q", got)
		}
		if r := out.Finished.AgentReported; r["subtype"] != "error_max_turns" || r["is_error"] != true || len(r) != 2 {
			t.Errorf("agent_reported %v", r)
		}
	})
	t.Run("claim", func(t *testing.T) {
		env, _ := run(t, func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "solver.json"), []byte(`{"claim":"Fixed the bug.","tokens":12}`), 0o644)
		})
		if got := responses(env); len(got) != 1 || got[0] != "Fixed the bug." {
			t.Errorf("response messages %q", got)
		}
	})
	for name, write := range map[string]func(string) error{
		"symlink": func(dir string) error { return os.Symlink("/etc/hostname", filepath.Join(dir, "solver.json")) },
		"not-json": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "solver.json"), []byte("solved!"), 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			env, out := run(t, write)
			if got := responses(env); len(got) != 0 || out.Finished.AgentReported != nil {
				t.Errorf("response messages %q, agent_reported %v", got, out.Finished.AgentReported)
			}
			if b, _ := os.ReadFile(env.Dir().Path("run.log")); !strings.Contains(string(b), "solver.json ignored") {
				t.Errorf("run.log:\n%s", b)
			}
		})
	}
}

package planner

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
)

func examples(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../examples/tasks")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMatrix(t *testing.T) {
	base, _ := filepath.Abs("../..")
	spec := events.RunSpec{TasksRoot: examples(t), Tasks: []string{"fix-sum", "needs-token", "home-workdir"},
		Harnesses: []string{"oracle", "agent:examples/agents/scripted"}, Models: []string{"m1", "m2"}, Repeats: 2, BaseDir: base}
	cells, err := Matrix(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 3*2*2*2 {
		t.Fatalf("%d cells", len(cells))
	}
	if cells[0].ID != "fix-sum/oracle/m1/1" || cells[1].ID != "fix-sum/oracle/m1/2" || cells[2].ID != "fix-sum/oracle/m2/1" {
		t.Fatalf("order: %s %s %s", cells[0].ID, cells[1].ID, cells[2].ID)
	}
	by := map[string]Cell{}
	for _, c := range cells {
		by[c.ID] = c
	}
	if c := by["needs-token/oracle/m1/1"]; c.RefusalClass != "unresolved_env" || !strings.Contains(c.Refusal, "API_TOKEN") {
		t.Errorf("needs-token: %+v", c)
	}
	if c := by["home-workdir/agent:examples/agents/scripted/m2/2"]; c.Refusal != "" {
		t.Errorf("home-workdir (WORKDIR /root) under an agent is refused: %s", c.Refusal)
	}
	if c := by["home-workdir/oracle/m1/1"]; c.Refusal != "" {
		t.Errorf("home-workdir under the oracle is refused: %s", c.Refusal)
	}
	for _, bad := range []events.RunSpec{
		{TasksRoot: examples(t), All: true},                                                          // no harness
		{TasksRoot: examples(t), All: true, Harnesses: []string{"oracle", "oracle"}},                 // twice
		{TasksRoot: examples(t), All: true, Harnesses: []string{"oracle"}, BaselineHarness: "other"}, // baseline not run
		{TasksRoot: examples(t), Tasks: []string{"nope"}, Harnesses: []string{"oracle"}},             // unknown task
		{TasksRoot: examples(t), All: true, Harnesses: []string{"agent:/nonexistent"}},               // no agent.toml
		{TasksRoot: examples(t), Harnesses: []string{"oracle"}},                                      // nothing selected
	} {
		if _, err := Matrix(bad, nil); err == nil {
			t.Errorf("%+v planned", bad)
		}
	}
	out := CellDir("/o", cells[len(cells)-1])
	if out != "/o/home-workdir/agent_examples_agents_scripted/m2/2" {
		t.Errorf("cell dir %s", out)
	}
}

// TestMatrixRefusesEmptyRunsAndStrictKeys: a root without any task fails
// with task.ErrNoTasks naming the root and what was skipped; with
// spec.Strict an unknown definition key fails with task.ErrUnknownKeys,
// while without it the task plans and carries the key.
func TestMatrixRefusesEmptyRunsAndStrictKeys(t *testing.T) {
	empty := t.TempDir()
	note := filepath.Join(empty, "idea", "task.md")
	if err := os.MkdirAll(filepath.Dir(note), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(note, []byte("# not yet a task\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Matrix(events.RunSpec{TasksRoot: empty, All: true, Harnesses: []string{"oracle"}}, nil)
	if !errors.Is(err, task.ErrNoTasks) || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "idea: task.md has no YAML frontmatter") {
		t.Errorf("empty root: %v", err)
	}

	root := t.TempDir()
	for rel, content := range map[string]string{
		"t/task.toml": "version = \"1.0\"\n[enviroment]\nnetwork_mode = \"no-network\"\n", "t/instruction.md": "x\n",
		"t/environment/Dockerfile": "FROM debian:bookworm-slim\n", "t/solution/solve.sh": "true\n", "t/tests/test.sh": "true\n",
	} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := events.RunSpec{TasksRoot: root, All: true, Harnesses: []string{"oracle"}}
	cells, err := Matrix(spec, nil)
	if err != nil || len(cells) != 1 || !reflect.DeepEqual(unknownKeys(cells[0].Task), []string{"enviroment"}) {
		t.Fatalf("lenient: %v %+v", err, cells)
	}
	spec.Strict = true
	if _, err := Matrix(spec, nil); !errors.Is(err, task.ErrUnknownKeys) || !strings.Contains(err.Error(), "t/task.toml:2: key enviroment") {
		t.Errorf("strict: %v", err)
	}
}

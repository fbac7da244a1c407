package subject

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadExample: the example descriptor loads, its ref and tasks
// resolved against its directory.
func TestLoadExample(t *testing.T) {
	d, err := Load("../../examples/subjects/sum-numbers.toml")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../../examples/tasks")
	if d.Subject.ID != "sum-numbers" || d.Baseline != "docker-claude" || d.TasksRoot != root ||
		strings.Join(d.TaskNames, ",") != "fix-sum,count-words" || len(d.Questions) != 1 || len(d.Cells) != 2 {
		t.Fatalf("%+v", d)
	}
}

// TestLoadErrors: a bad descriptor fails before anything runs, naming the
// file and the key.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"tasks/a/task.toml", "other/b/task.toml", "skill/SKILL.md"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("version = \"1.0\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ name, body, want string }{
		{"unknown key", "baseline = \"b\"\nbasline = \"x\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\n", "unknown keys: basline (line 2)"},
		{"unknown subject key", "baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\nrev = \"x\"\n", "subject.rev (line 6)"},
		{"missing baseline", "[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\n", "key baseline: missing"},
		{"missing subject", "baseline = \"b\"\n", "key subject: missing"},
		{"missing ref", "baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\n", "key subject.ref: missing"},
		{"ref that does not exist", "baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"nope\"\n", "key subject.ref: " + filepath.Join(dir, "nope") + " does not exist"},
		{"task that does not resolve", "baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\n[suite]\ntasks = [\"tasks/a\", \"tasks/zz\"]\n", "key suite.tasks[1]: " + filepath.Join(dir, "tasks/zz") + " holds no task.toml or task.md"},
		{"tasks of two parents", "baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\n[suite]\ntasks = [\"tasks/a\", \"other/b\"]\n", "key suite.tasks[1]"},
		{"a name under a root that does not resolve", "baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\n[suite]\ntasks = { root = \"tasks\", names = [\"a\", \"c\"] }\n", "key suite.tasks.names[1]"},
		{"bad TOML", "baseline = \n", "s.toml:1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, "s.toml")
			if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %s and %q", err, p, c.want)
			}
		})
	}
	p := filepath.Join(dir, "ok.toml")
	_ = os.WriteFile(p, []byte("baseline = \"b\"\n[subject]\nid = \"s\"\nkind = \"skill\"\nref = \"skill\"\n[suite]\ntasks = { root = \"tasks\", names = [\"a\"] }\n"), 0o644)
	if d, err := Load(p); err != nil || d.TasksRoot != filepath.Join(dir, "tasks") || d.TaskNames[0] != "a" {
		t.Fatalf("root and names: %+v %v", d, err)
	}
}

// Package subject reads the task-runs seed's subject descriptors (a
// subject, its work suite and its matrix) and writes the subject
// scorecard of `proctor subjects run` (schemas/subject_scorecard.v1).
package subject

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/proctor-eval/proctor/pkg/task"
)

// Descriptor is a subject descriptor (TOML, the task-runs seed's shape):
//
//	baseline = "no-skill"            # what the subject is compared with
//	[subject]
//	id = "pdf-skill"                 # names the scorecard
//	kind = "skill"                   # what the subject is (free text)
//	ref = "skills/pdf"               # a path relative to the descriptor; must exist
//	[suite]
//	products = ["pdf"]               # recorded
//	questions = [...]                # the judged Q&A track: recorded, not run by proctor
//	tasks = ["tasks/a", "tasks/b"]   # task directories sharing one parent, or
//	tasks = { root = "tasks", names = ["a", "b"] }
//	[[matrix.cells]]                 # recorded as given
//	harness = "docker-claude-skill:skills/pdf"
//
// Unknown keys, a missing baseline or subject key, a ref that does not
// exist and a task that does not resolve are errors naming the file and
// key (Load).
type Descriptor struct {
	// File is the descriptor's absolute path.
	File     string
	Baseline string
	Subject  Subject
	Products []string
	// Questions are suite.questions as written (the seed's judged Q&A
	// track), which proctor does not run.
	Questions []any
	// TasksRoot and TaskNames are suite.tasks resolved: the directory
	// holding the tasks and their names under it (nil: no work suite).
	TasksRoot string
	TaskNames []string
	// Cells are matrix.cells as written.
	Cells []map[string]any
}

// Subject is the descriptor's [subject] table.
type Subject struct {
	ID   string `toml:"id" json:"id"`
	Kind string `toml:"kind" json:"kind"`
	// Ref is the path as written; RefPath its absolute path.
	Ref     string `toml:"ref" json:"ref"`
	RefPath string `toml:"-" json:"ref_path"`
}

type file struct {
	Baseline *string  `toml:"baseline"`
	Subject  *Subject `toml:"subject"`
	Suite    struct {
		Products  []string `toml:"products"`
		Questions []any    `toml:"questions"`
		Tasks     any      `toml:"tasks"`
	} `toml:"suite"`
	Matrix struct {
		Cells []map[string]any `toml:"cells"`
	} `toml:"matrix"`
}

// Load reads and checks the descriptor at path, resolving subject.ref
// and suite.tasks against its directory. Every error names the file and
// the key (and the line for a TOML error).
func Load(path string) (*Descriptor, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	var f file
	dec := toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var de *toml.DecodeError
		var se *toml.StrictMissingError
		switch {
		case errors.As(err, &se):
			var keys []string
			for _, e := range se.Errors {
				row, _ := e.Position()
				keys = append(keys, fmt.Sprintf("%s (line %d)", strings.Join(e.Key(), "."), row))
			}
			return nil, fmt.Errorf("%s: unknown keys: %s", abs, strings.Join(keys, ", "))
		case errors.As(err, &de):
			row, _ := de.Position()
			return nil, fmt.Errorf("%s:%d: %s", abs, row, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("%s: key %s: %s", abs, key, fmt.Sprintf(format, a...))
	}
	if f.Baseline == nil || strings.TrimSpace(*f.Baseline) == "" {
		return nil, bad("baseline", "missing: name what the subject is compared with")
	}
	if f.Subject == nil {
		return nil, bad("subject", "missing: a [subject] table with id, kind and ref")
	}
	s := *f.Subject
	for _, k := range []struct{ key, v string }{{"subject.id", s.ID}, {"subject.kind", s.Kind}, {"subject.ref", s.Ref}} {
		if strings.TrimSpace(k.v) == "" {
			return nil, bad(k.key, "missing")
		}
	}
	if strings.ContainsAny(s.ID, "/\\") || s.ID == "." || s.ID == ".." {
		return nil, bad("subject.id", "%q names a file: no / or \\", s.ID)
	}
	dir := filepath.Dir(abs)
	s.RefPath = resolve(dir, s.Ref)
	if _, err := os.Stat(s.RefPath); err != nil {
		return nil, bad("subject.ref", "%s does not exist", s.RefPath)
	}
	d := &Descriptor{File: abs, Baseline: *f.Baseline, Subject: s, Products: f.Suite.Products,
		Questions: f.Suite.Questions, Cells: f.Matrix.Cells}
	if d.TasksRoot, d.TaskNames, err = tasks(dir, f.Suite.Tasks, bad); err != nil {
		return nil, err
	}
	if d.TasksRoot != "" {
		disc, err := (&task.Loader{}).Discover(d.TasksRoot)
		if err != nil {
			return nil, bad("suite.tasks", "%v", err)
		}
		if _, err := task.Select(disc, d.TaskNames); err != nil {
			return nil, bad("suite.tasks", "%v", err)
		}
	}
	return d, nil
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// tasks resolves suite.tasks: a list of task directories sharing one
// parent, or a table {root, names}.
func tasks(dir string, v any, bad func(key, format string, a ...any) error) (string, []string, error) {
	isTask := func(key, p string) error {
		for _, f := range []string{"task.toml", "task.md"} {
			if fi, err := os.Stat(filepath.Join(p, f)); err == nil && fi.Mode().IsRegular() {
				return nil
			}
		}
		return bad(key, "%s holds no task.toml or task.md", p)
	}
	switch t := v.(type) {
	case nil:
		return "", nil, nil
	case []any:
		var root string
		var names []string
		for i, e := range t {
			key := fmt.Sprintf("suite.tasks[%d]", i)
			s, ok := e.(string)
			if !ok || strings.TrimSpace(s) == "" {
				return "", nil, bad(key, "a task directory (a string), not %v", e)
			}
			p := resolve(dir, s)
			if err := isTask(key, p); err != nil {
				return "", nil, err
			}
			if root == "" {
				root = filepath.Dir(p)
			} else if filepath.Dir(p) != root {
				return "", nil, bad(key, "%s is not beside %s: list task directories of one parent, or write suite.tasks = { root = ..., names = [...] }", p, root)
			}
			names = append(names, filepath.Base(p))
		}
		if len(names) == 0 {
			return "", nil, nil
		}
		return root, names, nil
	case map[string]any:
		var root string
		var names []string
		for k, val := range t {
			switch k {
			case "root":
				s, ok := val.(string)
				if !ok || s == "" {
					return "", nil, bad("suite.tasks.root", "a directory (a string), not %v", val)
				}
				root = resolve(dir, s)
			case "names":
				l, ok := val.([]any)
				if !ok {
					return "", nil, bad("suite.tasks.names", "a list of task names, not %v", val)
				}
				for i, n := range l {
					s, ok := n.(string)
					if !ok || s == "" {
						return "", nil, bad(fmt.Sprintf("suite.tasks.names[%d]", i), "a task name (a string), not %v", n)
					}
					names = append(names, s)
				}
			default:
				return "", nil, bad("suite.tasks."+k, "unknown key (root and names are)")
			}
		}
		if root == "" {
			return "", nil, bad("suite.tasks.root", "missing")
		}
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
			return "", nil, bad("suite.tasks.root", "%s is not a directory", root)
		}
		if len(names) == 0 {
			return "", nil, bad("suite.tasks.names", "missing or empty")
		}
		for i, n := range names {
			if err := isTask(fmt.Sprintf("suite.tasks.names[%d]", i), filepath.Join(root, filepath.FromSlash(n))); err != nil {
				return "", nil, err
			}
		}
		return root, names, nil
	}
	return "", nil, bad("suite.tasks", "a list of task directories or { root, names }, not %T", v)
}

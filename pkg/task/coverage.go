package task

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// CoverageReport is `proctor tasks coverage` for one tasks root: what loads,
// what was skipped, what is malformed, what files are missing per layout,
// and what each harness would refuse. It marshals to JSON.
type CoverageReport struct {
	// Root is the tasks root, absolute and symlink-resolved.
	Root string `json:"root"`
	// Tasks are the names of the tasks that load, sorted.
	Tasks []string `json:"tasks"`
	// Layouts counts the loaded tasks per layout.
	Layouts map[Layout]int `json:"layouts"`
	// Skipped are author's notes and other directories passed over.
	Skipped []Skipped `json:"skipped,omitempty"`
	// Malformed are definition files that would fail discovery (here they
	// are skipped instead), sorted by file.
	Malformed []*Error `json:"malformed,omitempty"`
	// Missing maps layout -> missing file (as the layout names it) -> the
	// tasks lacking it, sorted.
	Missing map[Layout]map[string][]string `json:"missing,omitempty"`
	// Unsupported lists the tasks every harness refuses (a refused
	// compose file, a symlink leaving the root).
	Unsupported []TaskReason `json:"unsupported,omitempty"`
	// UnresolvedEnv maps task -> env keys that make its cells errored before
	// any build.
	UnresolvedEnv map[string][]string `json:"unresolved_env,omitempty"`
	// UnknownKeys maps task -> its unknown definition keys with line and
	// suggestion ("unknown table enviroment (line 3; did you mean
	// environment?)"): ignored when run, refused by a strict Loader (whose
	// Coverage lists such a task under Malformed instead).
	UnknownKeys map[string][]string `json:"unknown_keys,omitempty"`
	// Refusals maps each harness column (the Loader's Refusers, else
	// HarnessNeeds') to the tasks it refuses, with the reason (an empty
	// list when it refuses none).
	Refusals map[string][]TaskReason `json:"refusals"`
	// Runnable maps each harness to how many loaded tasks it can run.
	Runnable map[string]int `json:"runnable"`
}

// TaskReason is a task name with a reason.
type TaskReason struct {
	Task   string `json:"task"`
	Reason string `json:"reason"`
}

// Coverage reports on root with the default Loader; see Loader.Coverage.
func Coverage(root string) (*CoverageReport, error) { return defaultLoader.Coverage(root) }

// Coverage walks root like Discover but never fails on a malformed file:
// it is listed in Malformed and the walk goes on. It returns an error only
// when root itself cannot be read.
func (l *Loader) Coverage(root string) (*CoverageReport, error) {
	d, malformed, err := l.discover(root, true)
	if err != nil {
		return nil, err
	}
	rep := &CoverageReport{
		Root:      d.Root,
		Tasks:     []string{},
		Layouts:   map[Layout]int{},
		Skipped:   d.Skipped,
		Malformed: malformed,
		Refusals:  map[string][]TaskReason{},
		Runnable:  map[string]int{},
	}
	needs := HarnessNeeds
	if l.Refusers != nil {
		needs = nil // the arms' own columns
	}
	for h := range needs {
		rep.Refusals[h] = []TaskReason{}
	}
	for h := range l.Refusers {
		rep.Refusals[h] = []TaskReason{}
	}
	for _, t := range d.Tasks {
		rep.Tasks = append(rep.Tasks, t.Name)
		rep.Layouts[t.Layout]++
		for _, m := range t.Missing {
			if rep.Missing == nil {
				rep.Missing = map[Layout]map[string][]string{}
			}
			if rep.Missing[t.Layout] == nil {
				rep.Missing[t.Layout] = map[string][]string{}
			}
			rep.Missing[t.Layout][m] = append(rep.Missing[t.Layout][m], t.Name)
		}
		if why := firstNonEmpty(t.Unsupported, t.Blocked); why != "" {
			rep.Unsupported = append(rep.Unsupported, TaskReason{Task: t.Name, Reason: why})
		}
		if len(t.UnresolvedEnv) > 0 {
			if rep.UnresolvedEnv == nil {
				rep.UnresolvedEnv = map[string][]string{}
			}
			rep.UnresolvedEnv[t.Name] = t.UnresolvedEnv
		}
		for _, u := range t.UnknownKeys {
			if rep.UnknownKeys == nil {
				rep.UnknownKeys = map[string][]string{}
			}
			rep.UnknownKeys[t.Name] = append(rep.UnknownKeys[t.Name], u.String())
		}
		for h, n := range needs {
			if r := t.Refusal(n); r != "" {
				rep.Refusals[h] = append(rep.Refusals[h], TaskReason{Task: t.Name, Reason: r})
			} else {
				rep.Runnable[h]++
			}
		}
		for h, refuse := range l.Refusers {
			if r := refuse(t); r != "" {
				rep.Refusals[h] = append(rep.Refusals[h], TaskReason{Task: t.Name, Reason: r})
			} else {
				rep.Runnable[h]++
			}
		}
	}
	return rep, nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// WriteText writes the report for a terminal (through textsafe.Text).
func (c *CoverageReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "root %s\n", c.Root)
	var layouts []string
	for _, l := range []Layout{LayoutHarbor, LayoutBenchFlow} {
		if c.Layouts[l] > 0 {
			layouts = append(layouts, fmt.Sprintf("%s %d", l, c.Layouts[l]))
		}
	}
	if len(layouts) > 0 {
		fmt.Fprintf(&b, "tasks: %d (%s)\n", len(c.Tasks), strings.Join(layouts, ", "))
	} else {
		fmt.Fprintf(&b, "tasks: %d\n", len(c.Tasks))
	}
	fmt.Fprintf(&b, "notes skipped: %d\n", len(c.Skipped))
	for _, s := range c.Skipped {
		fmt.Fprintf(&b, "  %s: %s\n", s.Dir, s.Reason)
	}
	fmt.Fprintf(&b, "malformed (skipped): %d\n", len(c.Malformed))
	for _, e := range c.Malformed {
		fmt.Fprintf(&b, "  %s\n", oneLine(e.Error()))
	}
	if len(c.Missing) > 0 {
		b.WriteString("missing files:\n")
		for _, l := range []Layout{LayoutHarbor, LayoutBenchFlow} {
			files := c.Missing[l]
			names := make([]string, 0, len(files))
			for f := range files {
				names = append(names, f)
			}
			sort.Strings(names)
			for _, f := range names {
				fmt.Fprintf(&b, "  %s %s: %d (%s)\n", l, f, len(files[f]), strings.Join(files[f], ", "))
			}
		}
	}
	if len(c.UnresolvedEnv) > 0 {
		b.WriteString("unresolved env (errored before build):\n")
		names := make([]string, 0, len(c.UnresolvedEnv))
		for n := range c.UnresolvedEnv {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&b, "  %s: %s\n", n, strings.Join(c.UnresolvedEnv[n], ", "))
		}
	}
	if len(c.UnknownKeys) > 0 {
		b.WriteString("unknown keys (ignored; refused with --strict):\n")
		names := make([]string, 0, len(c.UnknownKeys))
		for n := range c.UnknownKeys {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&b, "  %s: %s\n", n, strings.Join(c.UnknownKeys[n], "; "))
		}
	}
	harnesses := make([]string, 0, len(c.Refusals))
	for h := range c.Refusals {
		harnesses = append(harnesses, h)
	}
	sort.Strings(harnesses)
	b.WriteString("refusals per harness:\n")
	for _, h := range harnesses {
		fmt.Fprintf(&b, "  %s: runs %d, refuses %d\n", h, c.Runnable[h], len(c.Refusals[h]))
		for _, r := range c.Refusals[h] {
			fmt.Fprintf(&b, "    %s: %s\n", r.Task, r.Reason)
		}
	}
	// Task names, reasons and errors come from the task files: shown
	// through textsafe, so none acts on the terminal.
	_, err := io.WriteString(w, textsafe.Text(b.String()))
	return err
}

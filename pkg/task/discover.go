package task

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/agnivade/levenshtein"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// Discovery is every task under one tasks root.
type Discovery struct {
	// Root is the tasks root, absolute and symlink-resolved.
	Root string `json:"root"`
	// Tasks are sorted by Name.
	Tasks []*Task `json:"tasks"`
	// Skipped are directories that are not tasks but were worth a warning
	// (a lone task.md without frontmatter, a symlinked directory), sorted by
	// Dir.
	Skipped []Skipped `json:"skipped,omitempty"`
}

// Skipped is a directory discovery passed over, with the reason.
type Skipped struct {
	// Dir is the directory relative to the root, with forward slashes.
	Dir string `json:"dir"`
	// File is the file that decided it (relative to the root), or "".
	File string `json:"file,omitempty"`
	// Reason is the warning shown to the user.
	Reason string `json:"reason"`
}

// Discover walks root with the default Loader; see Loader.Discover.
func Discover(root string) (*Discovery, error) { return defaultLoader.Discover(root) }

// Discover walks root and loads every task under it, in both layouts.
//
// A directory holding task.toml or task.md is a task directory and is not
// descended into, except a directory whose only definition is a task.md
// without frontmatter: that is an author's note, skipped with a warning, and
// its subdirectories are still searched. Directories whose names start with
// "." are not entered; symbolic links to directories are not followed (they
// are listed in Skipped). When root itself is a task, its Name is root's
// base name.
//
// Discovery fails as a whole — no partial result — when any definition is
// malformed (a task.md that opens with --- but does not parse, a malformed
// task.toml, a rejected key): the *Error names the file relative to root
// and the line when known. When several files are malformed, the error
// names every one, a line each in path order, so an author fixes them in
// one pass; errors.As finds the first in path order. Coverage and
// ScanCatalog list them instead.
func (l *Loader) Discover(root string) (*Discovery, error) {
	d, _, err := l.discover(root, false)
	return d, err
}

// Notes walks root as Discover does and returns only what Discover would
// skip with a warning (Discovery.Skipped: an author's note, a symbolic
// link to a directory, an unreadable directory), sorted by Dir, without
// loading a task. A run that selects every task says these too, so a task
// whose task.md lost its frontmatter is never left out of --all in
// silence. A task.md that does not parse is not a note (Discover fails on
// it).
func Notes(root string) ([]Skipped, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("tasks root %s: %w", root, err)
	}
	cands, skipped, err := walkRoot(real)
	if err != nil {
		return nil, err
	}
	for _, c := range cands {
		pr := c.probe
		if pr.hasTOML || !pr.hasMD || pr.mdErr != nil {
			continue
		}
		if doc, err := SplitFrontmatter(pr.md); err == nil && !doc.HasFrontmatter {
			name := c.rel
			if name == "." {
				name = filepath.Base(real)
			}
			file := MarkdownFile
			if c.rel != "." {
				file = c.rel + "/" + MarkdownFile
			}
			skipped = append(skipped, Skipped{Dir: name, File: file, Reason: noteReason(pr.md)})
		}
	}
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Dir < skipped[j].Dir })
	return skipped, nil
}

// DiscoverEach walks root as Discover does but does not stop at a
// malformed definition: it returns every task that loaded, and every
// malformed definition as an *Error naming the file (relative to root),
// the line when known and the key when one is at fault, sorted by file.
// err is non-nil only when root itself cannot be walked.
func (l *Loader) DiscoverEach(root string) (d *Discovery, malformed []*Error, err error) {
	return l.discover(root, true)
}

type candidate struct {
	rel   string // relative to root, "." for the root itself
	dir   string // absolute
	probe *dirProbe
}

// discover walks and loads; lenient collects malformed files instead of
// failing.
func (l *Loader) discover(root string, lenient bool) (*Discovery, []*Error, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, nil, fmt.Errorf("tasks root %s: %w", root, err)
	}
	if !isDir(real) {
		return nil, nil, fmt.Errorf("tasks root %s: not a directory", root)
	}
	cands, skipped, err := walkRoot(real)
	if err != nil {
		return nil, nil, err
	}

	results := make([]dirResult, len(cands))
	workers := runtime.GOMAXPROCS(0) * 4
	if workers > len(cands) {
		workers = len(cands)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := cands[i]
				name := c.rel
				if name == "." {
					name = filepath.Base(real)
				}
				results[i] = l.loadDir(real, c.dir, name, c.rel, c.probe)
			}
		}()
	}
	for i := range cands {
		next <- i
	}
	close(next)
	wg.Wait()

	d := &Discovery{Root: real, Tasks: []*Task{}}
	d.Skipped = append(d.Skipped, skipped...)
	var malformed []*Error
	for _, r := range results {
		switch {
		case r.err != nil:
			malformed = append(malformed, r.err)
		case r.note != nil:
			d.Skipped = append(d.Skipped, *r.note)
		case r.task != nil:
			d.Tasks = append(d.Tasks, r.task)
		}
	}
	sort.Slice(malformed, func(i, j int) bool { return malformed[i].File < malformed[j].File })
	if len(malformed) > 0 && !lenient {
		return nil, nil, malformedError(malformed)
	}
	sort.Slice(d.Tasks, func(i, j int) bool { return d.Tasks[i].Name < d.Tasks[j].Name })
	sort.Slice(d.Skipped, func(i, j int) bool { return d.Skipped[i].Dir < d.Skipped[j].Dir })
	return d, malformed, nil
}

// malformedError is Discover's error for the malformed definitions of a
// root (sorted by file): the one *Error itself, or every one on its own
// line under a count.
func malformedError(malformed []*Error) error {
	if len(malformed) == 1 {
		return malformed[0]
	}
	errs := make([]error, len(malformed))
	for i, e := range malformed {
		errs[i] = e
	}
	return fmt.Errorf("%d task definitions are malformed:\n%w", len(malformed), errors.Join(errs...))
}

// walkRoot finds candidate task directories under root (absolute, real).
func walkRoot(root string) ([]candidate, []Skipped, error) {
	var cands []candidate
	var skipped []Skipped
	var visit func(dir, rel string) error
	visit = func(dir, rel string) error {
		pr, err := probeDir(dir)
		if err != nil {
			if rel == "." {
				return fmt.Errorf("tasks root: %w", err)
			}
			skipped = append(skipped, Skipped{Dir: rel, Reason: "unreadable directory: " + err.Error()})
			return nil
		}
		descend := true
		switch {
		case pr.hasTOML:
			cands = append(cands, candidate{rel: rel, dir: dir, probe: pr})
			descend = false
		case pr.hasMD:
			cands = append(cands, candidate{rel: rel, dir: dir, probe: pr})
			doc, splitErr := SplitFrontmatter(pr.md)
			descend = pr.mdErr == nil && splitErr == nil && !doc.HasFrontmatter
		}
		if !descend {
			return nil
		}
		for _, de := range pr.entries {
			name := de.Name()
			if strings.HasPrefix(name, ".") {
				continue
			}
			childRel := name
			if rel != "." {
				childRel = rel + "/" + name
			}
			p := filepath.Join(dir, name)
			if de.Type()&os.ModeSymlink != 0 {
				if isDir(p) {
					skipped = append(skipped, Skipped{Dir: childRel, Reason: "symbolic link to a directory: not followed"})
				}
				continue
			}
			if de.IsDir() {
				if err := visit(p, childRel); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit(root, "."); err != nil {
		return nil, nil, err
	}
	return cands, skipped, nil
}

func entryIsFile(dir string, de os.DirEntry) bool {
	if de.Type().IsRegular() {
		return true
	}
	if de.Type()&os.ModeSymlink != 0 {
		return isFile(filepath.Join(dir, de.Name()))
	}
	return false
}

// Nearest is the candidate closest to name within a few edits (at most a
// third of the candidate's length, at least 1, 2 from 5 letters: a swap),
// the alphabetically first of equals; "" when none is that close. It is
// the "did you mean" of every misspelt name: tasks, harnesses.
func Nearest(name string, candidates []string) string {
	best, bestD := "", 0
	for _, cand := range candidates {
		d := levenshtein.ComputeDistance(name, cand)
		limit := max(1, len(cand)/3)
		if len(cand) >= 5 {
			limit = max(2, limit)
		}
		if d <= limit && (best == "" || d < bestD || (d == bestD && cand < best)) {
			best, bestD = cand, d
		}
	}
	return best
}

// Select returns the tasks of d named in names, in the order given and
// without repeats. Names are matched exactly against Task.Name (a leading
// "./" and a trailing "/" are ignored). Every unknown name is listed in one
// error wrapping ErrTaskNotFound; a name that is a skipped author's note
// says so. An empty names selects nothing.
func Select(d *Discovery, names []string) ([]*Task, error) {
	byName := make(map[string]*Task, len(d.Tasks))
	for _, t := range d.Tasks {
		byName[t.Name] = t
	}
	notes := map[string]string{}
	for _, s := range d.Skipped {
		notes[s.Dir] = s.Reason
	}
	var out []*Task
	var unknown []string
	seen := map[string]bool{}
	for _, n := range names {
		key := strings.TrimSuffix(strings.TrimPrefix(filepath.ToSlash(n), "./"), "/")
		if seen[key] {
			continue
		}
		seen[key] = true
		if t, ok := byName[key]; ok {
			out = append(out, t)
			continue
		}
		if why, ok := notes[key]; ok {
			unknown = append(unknown, fmt.Sprintf("%q (skipped: %s)", n, why))
			continue
		}
		if near := Nearest(key, slices.Collect(maps.Keys(byName))); near != "" {
			unknown = append(unknown, fmt.Sprintf("%q (did you mean %s?)", n, near))
			continue
		}
		unknown = append(unknown, fmt.Sprintf("%q", n))
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w under %s: %s", ErrTaskNotFound, d.Root, strings.Join(unknown, ", "))
	}
	return out, nil
}

// ShortRevision is the first 12 hex digits of a revision.
func ShortRevision(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// Remarks returns everything worth telling a user about t in one list:
// why it cannot run (unsupported, blocked), the files it is missing, the
// unresolved env keys no load warning explains, and its load warnings
// (each unresolved key's warning says why and what to write instead, so
// the key is not said twice).
func (t *Task) Remarks() []string {
	var out []string
	if t.Unsupported != "" {
		out = append(out, "unsupported: "+t.Unsupported)
	}
	if t.Blocked != "" {
		out = append(out, "blocked: "+t.Blocked)
	}
	if len(t.Missing) > 0 {
		out = append(out, "missing "+strings.Join(t.Missing, ", "))
	}
	var unexplained []string
	for _, k := range t.UnresolvedEnv {
		if !slices.ContainsFunc(t.Warnings, func(w string) bool { return strings.Contains(w, "."+k+" not forwarded: ") }) {
			unexplained = append(unexplained, k)
		}
	}
	if len(unexplained) > 0 {
		out = append(out, "unresolved env "+strings.Join(unexplained, ", "))
	}
	return append(out, t.Warnings...)
}

// WriteTable writes `proctor tasks list`: one row per task with NAME,
// LAYOUT, DIFFICULTY, CATEGORY, REVISION (12 hex digits) and WARNINGS (how
// many Remarks the task has, "-" when none), so the table stays narrow;
// verbose adds UNCHECKED, the keys read past without being interpreted.
// After the table every remark follows in full, one "warning: NAME: remark"
// line each, then the skipped directories, one "skipped DIR: reason" line
// each. Every line is shown
// through textsafe.Line (task files write the names and values).
func (d *Discovery) WriteTable(w io.Writer, verbose bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "NAME\tLAYOUT\tDIFFICULTY\tCATEGORY\tREVISION\tWARNINGS"
	if verbose {
		header += "\tUNCHECKED"
	}
	fmt.Fprintln(tw, header)
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	var notes []string
	for _, t := range d.Tasks {
		remarks := t.Remarks()
		count := "-"
		if len(remarks) > 0 {
			count = fmt.Sprintf("%d (below)", len(remarks))
		}
		for _, r := range remarks {
			notes = append(notes, t.Name+": "+oneLine(r))
		}
		row := strings.Join([]string{
			t.Name, string(t.Layout), dash(t.Difficulty()), dash(t.Category()),
			ShortRevision(t.Revision), count,
		}, "\t")
		if verbose {
			row += "\t" + dash(strings.Join(t.UncheckedKeys, ", "))
		}
		fmt.Fprintln(tw, textsafe.Line(row))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, textsafe.Line("warning: "+n)); err != nil {
			return err
		}
	}
	for _, s := range d.Skipped {
		if _, err := fmt.Fprintf(w, "%s\n", textsafe.Line("skipped "+s.Dir+": "+s.Reason)); err != nil {
			return err
		}
	}
	return nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\t", " ")), " ")
}

package task

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Definition and layout file names.
const (
	TOMLFile        = "task.toml"
	MarkdownFile    = "task.md"
	InstructionFile = "instruction.md"
)

// Loader discovers and loads tasks. The zero value is ready to use and reads
// proctor's environment with os.LookupEnv. A Loader is safe for concurrent
// use.
type Loader struct {
	// LookupEnv resolves ${VAR:-default} in env tables (see the Task field
	// UnresolvedEnv); nil means os.LookupEnv.
	LookupEnv LookupEnv
}

var defaultLoader Loader

// Load loads the task in dir with the default Loader; see Loader.Load.
func Load(dir string) (*Task, error) { return defaultLoader.Load(dir) }

// Load loads one task directory directly. Its Name is the directory's base
// name and symbolic links may point anywhere inside the directory's parent
// (its sibling tasks). It returns an *Error naming the file (as dir/task.toml
// or dir/task.md) and line for a malformed definition; an error wrapping
// ErrNoFrontmatter for a lone task.md without frontmatter (an author's note);
// an error wrapping ErrNotTask when dir holds neither definition file.
func (l *Loader) Load(dir string) (*Task, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	res := l.loadDir(filepath.Dir(real), real, filepath.Base(real), filepath.ToSlash(filepath.Clean(dir)), nil)
	switch {
	case res.err != nil:
		return nil, res.err
	case res.note != nil:
		return nil, &Error{File: res.note.File, Msg: res.note.Reason, Err: ErrNoFrontmatter}
	case res.task == nil:
		return nil, fmt.Errorf("%s: %w", dir, ErrNotTask)
	}
	return res.task, nil
}

// dirResult is what examining one directory gave: a task, an author's note
// that was skipped, or an error.
type dirResult struct {
	task *Task
	note *Skipped
	err  *Error
}

// mdPeek is a task.md read during the walk, so it is not read twice.
type mdPeek struct {
	data []byte
}

// loadDir examines dir (absolute, symlink-resolved, inside root). name is
// the task's name; prefix is how files are named in errors ("t1" gives
// "t1/task.md").
func (l *Loader) loadDir(root, dir, name, prefix string, peek *mdPeek) dirResult {
	fileName := func(f string) string {
		if f == "" {
			return prefix
		}
		if prefix == "" || prefix == "." {
			return f
		}
		return prefix + "/" + f
	}
	hasTOML := isFile(filepath.Join(dir, TOMLFile))
	hasMD := isFile(filepath.Join(dir, MarkdownFile))
	if !hasTOML && !hasMD {
		return dirResult{}
	}
	t := &Task{Name: name, Dir: dir}
	var warnings []string

	var doc Document
	var splitErr error
	var fm map[string]any
	var fmPos positions
	var fmErr error
	hugo := false
	if hasMD {
		var data []byte
		if peek != nil {
			data = peek.data
		} else {
			var err error
			if data, err = os.ReadFile(filepath.Join(dir, MarkdownFile)); err != nil {
				return dirResult{err: inFile(fileName(MarkdownFile), err)}
			}
		}
		doc, splitErr = SplitFrontmatter(data)
		if splitErr == nil && doc.HasFrontmatter {
			fm, fmPos, fmErr = parseYAMLMapping(doc.Frontmatter, doc.FrontmatterLine)
		}
		first, _, _ := strings.Cut(normalizeText(data), "\n")
		hugo = strings.TrimSpace(first) == "+++"
	}

	useMarkdown := false
	switch {
	case hasMD && !hasTOML:
		if splitErr != nil {
			return dirResult{err: inFile(fileName(MarkdownFile), splitErr)}
		}
		if !doc.HasFrontmatter {
			reason := "task.md has no YAML frontmatter: an author's note, not a task"
			if hugo {
				reason = "task.md opens with +++ (Hugo TOML frontmatter), not YAML frontmatter: an author's note, not a task"
			}
			return dirResult{note: &Skipped{Dir: name, File: fileName(MarkdownFile), Reason: reason}}
		}
		if fmErr != nil {
			return dirResult{err: inFile(fileName(MarkdownFile), fmErr)}
		}
		useMarkdown = true
	case hasMD && hasTOML:
		why := ""
		switch {
		case splitErr != nil:
			why = "its frontmatter block is never closed"
		case !doc.HasFrontmatter:
			// A note without frontmatter (or with Hugo's +++): no warning.
		case fmErr != nil:
			why = "its frontmatter does not parse (" + fmErr.Error() + ")"
		default:
			ok, reason := isBenchFlowDocument(fm)
			if ok {
				useMarkdown = true
				warnings = append(warnings, "task.toml ignored: task.md is a BenchFlow document")
			} else {
				why = reason
			}
		}
		if why != "" {
			warnings = append(warnings, "task.md is an author's note, not a BenchFlow document: "+why+"; loaded task.toml")
		}
	}

	r := &configReader{lookup: l.LookupEnv, markdown: useMarkdown}
	if useMarkdown {
		t.Layout = LayoutBenchFlow
		t.DefinitionFile = filepath.Join(dir, MarkdownFile)
		r.pos = fmPos
		if err := r.apply(t, fm); err != nil {
			return dirResult{err: inFile(fileName(MarkdownFile), err)}
		}
		ps, err := extractPrompt(doc.Body, doc.BodyLine)
		if err != nil {
			return dirResult{err: inFile(fileName(MarkdownFile), err)}
		}
		t.Prompt = ps.prompt
		t.InstructionFile = t.DefinitionFile
		if t.Prompt == "" && t.Unsupported == "" {
			warnings = append(warnings, "task.md has an empty prompt")
		}
	} else {
		t.Layout = LayoutHarbor
		t.DefinitionFile = filepath.Join(dir, TOMLFile)
		data, err := os.ReadFile(t.DefinitionFile)
		if err != nil {
			return dirResult{err: inFile(fileName(TOMLFile), err)}
		}
		m, pos, err := parseTOMLMapping(normalizeText(data))
		if err != nil {
			return dirResult{err: inFile(fileName(TOMLFile), err)}
		}
		r.pos = pos
		if err := r.apply(t, m); err != nil {
			return dirResult{err: inFile(fileName(TOMLFile), err)}
		}
		if p, ok := l.resolveFile(root, dir, InstructionFile); ok {
			b, err := os.ReadFile(p)
			if err != nil {
				return dirResult{err: inFile(fileName(InstructionFile), err)}
			}
			t.Prompt = normalizeText(b)
			t.InstructionFile = p
		} else if t.Unsupported == "" {
			// Multi-step tasks keep their instructions in steps/<name>/.
			t.Missing = append(t.Missing, InstructionFile)
		}
	}
	t.Warnings = append(r.warnings, warnings...)
	t.UncheckedKeys = r.unchecked

	if err := l.locateFiles(t, root, dir); err != nil {
		return dirResult{err: inFile(fileName(""), err)}
	}
	rev, issues, err := revision(dir, root)
	if err != nil {
		return dirResult{err: inFile(fileName(""), fmt.Errorf("hashing task files: %w", err))}
	}
	t.Revision = rev
	for _, is := range issues {
		switch is.kind {
		case linkOutside:
			if t.Blocked == "" {
				t.Blocked = fmt.Sprintf("%s is a symlink leaving the tasks root (-> %s)", is.rel, is.target)
			}
		case linkDangling:
			t.Warnings = append(t.Warnings, fmt.Sprintf("%s is a dangling symlink (-> %s)", is.rel, is.target))
		case linkCycle:
			t.Warnings = append(t.Warnings, fmt.Sprintf("%s is a symlink back into its own tree (-> %s), not followed", is.rel, is.target))
		}
	}
	sort.Strings(t.Missing)
	return dirResult{task: t}
}

// locateFiles fills the environment, solution and verifier paths, the
// Dockerfile's WORKDIR, Missing, and the compose check. As BenchFlow does,
// oracle/ is used when it exists, else solution/; verifier/ when it exists,
// else tests/ — in both layouts.
func (l *Loader) locateFiles(t *Task, root, dir string) error {
	if p, ok := l.resolveFile(root, dir, "environment"); ok && isDir(p) {
		t.EnvironmentDir = p
		if df, ok := l.resolveFile(root, dir, "environment/Dockerfile"); ok && isFile(df) {
			t.Dockerfile = df
			if data, err := os.ReadFile(df); err == nil {
				t.DockerfileWorkdir = dockerfileWorkdir(data)
			}
		}
		for _, name := range []string{"docker-compose.yaml", "docker-compose.yml"} {
			cf, ok := l.resolveFile(root, dir, "environment/"+name)
			if !ok || !isFile(cf) {
				continue
			}
			data, err := os.ReadFile(cf)
			if err != nil {
				return err
			}
			hasMain, err := composeHasMain(data)
			if err != nil {
				t.Warnings = append(t.Warnings, fmt.Sprintf("environment/%s does not parse as YAML (%v); treated as a data file", name, err))
				continue
			}
			if hasMain && t.Unsupported == "" {
				t.Unsupported = fmt.Sprintf("compose environment (environment/%s defines a main service): not supported yet, listed only", name)
			}
		}
	}
	if t.Dockerfile == "" && t.DockerImage == "" {
		t.Missing = append(t.Missing, "environment/Dockerfile")
	}

	solDir, testDir := "solution", "tests"
	if t.Layout == LayoutBenchFlow {
		solDir, testDir = "oracle", "verifier"
	}
	for _, d := range []string{"oracle", "solution"} {
		if p, ok := l.resolveFile(root, dir, d); ok && isDir(p) {
			solDir = d
			break
		}
	}
	for _, d := range []string{"verifier", "tests"} {
		if p, ok := l.resolveFile(root, dir, d); ok && isDir(p) {
			testDir = d
			break
		}
	}
	if p, ok := l.resolveFile(root, dir, solDir); ok && isDir(p) {
		t.SolutionDir = p
	}
	if p, ok := l.resolveFile(root, dir, solDir+"/solve.sh"); ok && isFile(p) {
		t.SolutionScript = p
	} else if t.Unsupported == "" || !strings.HasPrefix(t.Unsupported, "multi-step") {
		t.Missing = append(t.Missing, solDir+"/solve.sh")
	}
	if p, ok := l.resolveFile(root, dir, testDir); ok && isDir(p) {
		t.TestsDir = p
	}
	if p, ok := l.resolveFile(root, dir, testDir+"/test.sh"); ok && isFile(p) {
		t.TestScript = p
	} else if t.Unsupported == "" || !strings.HasPrefix(t.Unsupported, "multi-step") {
		t.Missing = append(t.Missing, testDir+"/test.sh")
	}
	return nil
}

// resolveFile resolves dir/rel through symbolic links and reports whether it
// exists inside root. A path that leaves root is reported as absent (the
// revision walk records it and the task is blocked).
func (l *Loader) resolveFile(root, dir, rel string) (string, bool) {
	p, err := filepath.EvalSymlinks(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil || !within(p, root) {
		return "", false
	}
	return p, true
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// composeHasMain reports whether a compose file defines a `main` service
// (Harbor's marker for a compose environment); a compose file without one
// is only data copied into the image. Anchors are allowed here since only
// the keys are inspected and nothing is expanded.
func composeHasMain(data []byte) (bool, error) {
	text := normalizeText(data)
	if err := checkYAMLDepth(text, 1); err != nil {
		return false, err
	}
	f, err := parser.ParseBytes([]byte(text), 0)
	if err != nil {
		return false, errors.New(firstLine(yamlSyntaxError(err, 0).Error()))
	}
	for _, d := range f.Docs {
		if d == nil {
			continue
		}
		for _, mv := range mappingPairs(d.Body) {
			if scalarKey(mv.Key) != "services" {
				continue
			}
			for _, svc := range mappingPairs(mv.Value) {
				if scalarKey(svc.Key) == "main" {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

func mappingPairs(n ast.Node) []*ast.MappingValueNode {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}
	case *ast.TagNode:
		return mappingPairs(m.Value)
	case *ast.AnchorNode:
		return mappingPairs(m.Value)
	}
	return nil
}

func scalarKey(n ast.Node) string {
	if mk, ok := n.(*ast.MappingKeyNode); ok {
		n = mk.Value
	}
	if s, ok := n.(*ast.StringNode); ok {
		return s.Value
	}
	return ""
}

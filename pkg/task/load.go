package task

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
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
//
// Env tables ([verifier.env], [solution.env] / [oracle.env] and the sandbox
// table's env) resolve as follows. A literal string is forwarded as
// written; an integer, float or boolean as its text. ${VAR:-default} takes
// default when VAR is unset or empty in proctor's environment (as read by
// LookupEnv); when VAR is set to a value the key is not forwarded, because
// proctor never passes its own environment into a task and silently using
// the default would ignore what the operator set. ${VAR} without a default
// is never forwarded. Null, lists and tables are not forwarded. Every key
// not forwarded is listed in Task.UnresolvedEnv (sorted, deduplicated
// across the tables) with a warning saying why; such a cell is errored
// before any image is built.
type Loader struct {
	// LookupEnv reads proctor's environment for ${VAR:-default}; nil means
	// os.LookupEnv. Tests inject a map so they stay hermetic.
	LookupEnv LookupEnv
	// Strict makes an unknown definition key (Task.UnknownKeys: a table or
	// key neither proctor, Harbor nor BenchFlow defines) an *Error naming
	// the file, the first such key and its line, instead of a warning.
	Strict bool
	// Refusers are Coverage's refusal columns: harness name -> why it
	// refuses a task ("" when it runs it); nil, HarnessNeeds' columns.
	// The CLI fills it with every registered arm's own Refusal
	// (harness.CoverageRefusers), so `tasks coverage` and `--dry-run` give
	// one answer.
	Refusers map[string]func(*Task) string
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
	pr, err := probeDir(real)
	if err != nil {
		return nil, err
	}
	res := l.loadDir(filepath.Dir(real), real, filepath.Base(real), filepath.ToSlash(filepath.Clean(dir)), pr)
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

// dirProbe is what one ReadDir of a directory says about it: whether it
// holds the definition files, and a lone task.md's bytes (read to tell a
// note from a task).
type dirProbe struct {
	entries        []os.DirEntry
	hasTOML, hasMD bool
	md             []byte
	mdErr          error
}

func probeDir(dir string) (*dirProbe, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pr := &dirProbe{entries: des}
	for _, de := range des {
		switch de.Name() {
		case TOMLFile:
			pr.hasTOML = entryIsFile(dir, de)
		case MarkdownFile:
			pr.hasMD = entryIsFile(dir, de)
		}
	}
	if pr.hasMD && !pr.hasTOML {
		pr.md, pr.mdErr = os.ReadFile(filepath.Join(dir, MarkdownFile))
	}
	return pr, nil
}

// noteReason is why a task.md without YAML frontmatter (md) is skipped as
// an author's note.
func noteReason(md []byte) string {
	if first, _, _ := strings.Cut(normalizeText(md), "\n"); strings.TrimSpace(first) == "+++" {
		return "task.md opens with +++ (Hugo TOML frontmatter), not YAML frontmatter: an author's note, not a task"
	}
	return "task.md has no YAML frontmatter: an author's note, not a task"
}

// loadDir examines dir (absolute, symlink-resolved, inside root). name is
// the task's name; prefix is how files are named in errors ("t1" gives
// "t1/task.md"). pr is the directory's probe.
func (l *Loader) loadDir(root, dir, name, prefix string, pr *dirProbe) dirResult {
	fileName := func(f string) string {
		if f == "" {
			return prefix
		}
		if prefix == "" || prefix == "." {
			return f
		}
		return prefix + "/" + f
	}
	hasTOML, hasMD := pr.hasTOML, pr.hasMD
	if !hasTOML && !hasMD {
		return dirResult{}
	}

	// A lone task.md is looked at before anything else is read: a note's
	// directory may hold a whole suite below it.
	if hasMD && !hasTOML {
		if pr.mdErr != nil {
			return dirResult{err: inFile(fileName(MarkdownFile), pr.mdErr)}
		}
		mdData := pr.md
		doc, err := SplitFrontmatter(mdData)
		if err != nil {
			return dirResult{err: inFile(fileName(MarkdownFile), err)}
		}
		if !doc.HasFrontmatter {
			return dirResult{note: &Skipped{Dir: name, File: fileName(MarkdownFile), Reason: noteReason(mdData)}}
		}
	}

	tree, err := scanTask(dir, root, pr.entries)
	if err != nil {
		return dirResult{err: inFile(fileName(""), fmt.Errorf("reading task files: %w", err))}
	}
	content := func(f string) ([]byte, *Error) {
		if _, ok := tree.file(f); !ok {
			return nil, &Error{File: fileName(f), Msg: "not readable inside the tasks root (a symlink leaving it?)"}
		}
		return tree.contents[f], nil
	}

	t := &Task{Name: name, Dir: dir, Revision: tree.revision}
	var warnings []string
	var doc Document
	var splitErr error
	var fm map[string]any
	var fmPos positions
	var fmErr error
	if hasMD {
		data, e := content(MarkdownFile)
		if e != nil {
			return dirResult{err: e}
		}
		doc, splitErr = SplitFrontmatter(data)
		if splitErr == nil && doc.HasFrontmatter {
			fm, fmPos, fmErr = parseYAMLMapping(doc.Frontmatter, doc.FrontmatterLine)
		}
	}

	useMarkdown := false
	switch {
	case hasMD && !hasTOML:
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
				useMarkdown = true // the split files are compared below
			} else {
				why = reason
			}
		}
		if why != "" {
			warnings = append(warnings, "task.md is an author's note, not a BenchFlow document: "+why+"; loaded task.toml")
		}
	}

	r := &configReader{lookup: l.LookupEnv, markdown: useMarkdown, strict: l.Strict}
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
		t.OmittedSections = ps.omitted
		t.InstructionFile = t.DefinitionFile
		if t.Prompt == "" && t.Unsupported == "" {
			warnings = append(warnings, "task.md has an empty prompt")
		}
	} else {
		t.Layout = LayoutHarbor
		t.DefinitionFile = filepath.Join(dir, TOMLFile)
		data, e := content(TOMLFile)
		if e != nil {
			return dirResult{err: e}
		}
		m, pos, err := parseTOMLMapping(normalizeText(data))
		if err != nil {
			return dirResult{err: inFile(fileName(TOMLFile), err)}
		}
		r.lazyPos = pos
		if err := r.apply(t, m); err != nil {
			return dirResult{err: inFile(fileName(TOMLFile), err)}
		}
		if p, ok := tree.file(InstructionFile); ok {
			t.Prompt = normalizeText(tree.contents[InstructionFile])
			t.InstructionFile = p
		} else if t.Unsupported == "" && len(t.Steps) == 0 {
			// Multi-step tasks keep their instructions in steps/<name>/.
			t.Missing = append(t.Missing, InstructionFile)
		}
	}
	if useMarkdown && hasTOML {
		// A migrated directory: warn only when what Harbor-layout tools
		// would run differs from what task.md says.
		if d := l.splitDiffers(t, tree); len(d) > 0 {
			t.SplitDiffers = d
			warnings = append(warnings, "task.md and its split files differ (proctor runs task.md; Harbor-layout tools run task.toml, instruction.md, tests/ and solution/): "+strings.Join(d, "; "))
		}
	}
	t.Warnings = append(r.warnings, warnings...)
	if _, err := t.ProbeExpect(); err != nil {
		t.Warnings = append(t.Warnings, err.Error()+" (the isolation probe refuses the task)")
	}
	t.UncheckedKeys = r.unchecked

	locateFiles(t, tree)
	for _, is := range tree.issues {
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
// Dockerfile's WORKDIR, Missing, and the compose check from the walked
// tree. As BenchFlow does, oracle/ is used when it exists, else solution/;
// verifier/ when it exists, else tests/ — in both layouts.
func locateFiles(t *Task, tree *taskTree) {
	multiStep := len(t.Steps) > 0
	if p, ok := tree.dir("environment"); ok {
		t.EnvironmentDir = p
		if df, ok := tree.file("environment/Dockerfile"); ok {
			t.Dockerfile = df
			t.DockerfileWorkdir = dockerfileWorkdir(tree.contents["environment/Dockerfile"])
		}
		for _, name := range []string{"docker-compose.yaml", "docker-compose.yml"} {
			rel := "environment/" + name
			if _, ok := tree.file(rel); !ok {
				continue
			}
			hasMain, err := composeHasMain(tree.contents[rel])
			if err != nil {
				// Harbor hands the file to compose, which refuses it: the
				// task cannot run, and never without its services.
				if t.Unsupported == "" {
					t.Unsupported = fmt.Sprintf("compose environment refused: %s does not parse as YAML: %v", rel, err)
				}
				continue
			}
			if !hasMain || t.Compose != nil {
				continue
			}
			c, err := LoadCompose(p+"/"+name, p)
			if err != nil {
				if t.Unsupported == "" {
					t.Unsupported = fmt.Sprintf("compose environment refused: environment/%v", err)
				}
				continue
			}
			t.Compose = c
			t.Warnings = append(t.Warnings, c.Rewrites...)
			t.Warnings = append(t.Warnings, c.Unset...)
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
		if _, ok := tree.dir(d); ok {
			solDir = d
			break
		}
	}
	for _, d := range []string{"verifier", "tests"} {
		if _, ok := tree.dir(d); ok {
			testDir = d
			break
		}
	}
	t.SolutionDir, _ = tree.dir(solDir)
	if p, ok := tree.file(solDir + "/solve.sh"); ok {
		t.SolutionScript = p
	} else if !multiStep {
		t.Missing = append(t.Missing, solDir+"/solve.sh")
	}
	t.TestsDir, _ = tree.dir(testDir)
	if p, ok := tree.file(testDir + "/test.sh"); ok {
		t.TestScript = p
	} else if !multiStep {
		t.Missing = append(t.Missing, testDir+"/test.sh")
	}
	locateSteps(t, tree)
	locateVerifierEnv(t, tree)
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
	toks := lexer.Tokenize(text)
	if err := checkYAMLDepth(toks, 1); err != nil {
		return false, err
	}
	f, err := parser.Parse(toks, 0)
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

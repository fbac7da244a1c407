package harness_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
)

// kindTest finds, in the Go files of one package, the places that test a
// harness kind: a comparison, a switch case or a strings prefix/suffix
// call with a kind name (a literal "oracle" or "agent:", a harness.Kind
// constant, or a package-level constant or variable built of those
// constants).
type kindTest struct {
	fset   *token.FileSet
	kinds  map[string]bool
	consts map[string]bool // package-level names whose value is kind-like
	found  []string
}

// kindLike reports whether e names a harness kind.
func (k *kindTest) kindLike(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return false
		}
		s, err := strconv.Unquote(e.Value)
		if err != nil {
			return false
		}
		kind, _, _ := strings.Cut(s, ":")
		return k.kinds[kind] && (s == kind || strings.HasPrefix(s, kind+":"))
	case *ast.SelectorExpr:
		id, ok := e.X.(*ast.Ident)
		return ok && id.Name == "harness" && k.kinds["const:"+e.Sel.Name]
	case *ast.Ident:
		return k.consts[e.Name]
	case *ast.CallExpr: // string(harness.Oracle)
		return len(e.Args) == 1 && k.kindLike(e.Args[0])
	case *ast.BinaryExpr:
		return e.Op == token.ADD && (k.kindLike(e.X) || k.kindLike(e.Y))
	case *ast.ParenExpr:
		return k.kindLike(e.X)
	}
	return false
}

func (k *kindTest) report(n ast.Node, what string) {
	k.found = append(k.found, k.fset.Position(n.Pos()).String()+": "+what)
}

func (k *kindTest) inspect(f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (k.kindLike(n.X) || k.kindLike(n.Y)) {
				k.report(n, "compares a harness kind")
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if k.kindLike(e) {
					k.report(e, "switches on a harness kind")
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "strings" {
				switch sel.Sel.Name {
				case "HasPrefix", "HasSuffix", "TrimPrefix", "CutPrefix", "TrimSuffix", "CutSuffix":
					for _, a := range n.Args[1:] {
						if k.kindLike(a) {
							k.report(n, "tests a harness reference's kind with strings."+sel.Sel.Name)
						}
					}
				}
			}
		}
		return true
	})
}

// TestNoKindTestedOutsideHarness: no Go code outside pkg/harness (tests
// aside) tests a harness kind: a fact about a kind (who it runs as, what it
// refuses, whether it checks the setup, what makes a run's identity, how
// its reference is written) is the arm's to say (Arm, Ref, Registry), or
// the log's once the planner recorded it (CellPlanned.setup_check). The
// test itself is checked on a file that compares, switches and prefixes.
func TestNoKindTestedOutsideHarness(t *testing.T) {
	kinds := map[string]bool{}
	for _, in := range harness.Registry() {
		kinds[string(in.Kind)] = true
	}
	for _, c := range []string{"Oracle", "Agent", "Command", "Probe", "DockerProbe", "ClaudeCode", "Codex", "TerminalBench",
		"BenchFlow", "BenchFlowSkill", "BenchFlowSelfGen", "DockerClaude", "DockerClaudeSkill"} {
		kinds["const:"+c] = true
	}
	check := func(dir string, files map[string]*ast.File, fset *token.FileSet) []string {
		k := &kindTest{fset: fset, kinds: kinds, consts: map[string]bool{}}
		for _, f := range files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, v := range vs.Values {
						// A constant named by a literal alone ("benchflow",
						// the task layout) is not taken for a kind: one
						// built of harness.Kind constants is.
						if _, lit := v.(*ast.BasicLit); !lit && k.kindLike(v) && i < len(vs.Names) {
							k.consts[vs.Names[i].Name] = true
						}
					}
				}
			}
		}
		for _, f := range files {
			k.inspect(f)
		}
		return k.found
	}

	// The check itself finds each form.
	fset := token.NewFileSet()
	bad, err := parser.ParseFile(fset, "bad.go", `package bad
import ("strings"; "github.com/proctor-eval/proctor/pkg/harness")
const prefix = string(harness.Command) + ":"
func f(name string, r harness.Ref) bool {
	switch r.Kind { case harness.DockerClaude: return true }
	if name == "oracle" { return true }
	return strings.HasPrefix(name, "agent:") || strings.HasPrefix(name, prefix)
}`, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := check("bad", map[string]*ast.File{"bad.go": bad}, fset); len(got) != 4 {
		t.Fatalf("the check found %d of the 4 kind tests of its own example: %q", len(got), got)
	}

	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	byDir := map[string]map[string]*ast.File{}
	fset = token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch {
			case rel == "pkg/harness", strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, rel, src, 0)
		if err != nil {
			return err
		}
		dir := filepath.Dir(rel)
		if byDir[dir] == nil {
			byDir[dir] = map[string]*ast.File{}
		}
		byDir[dir][rel] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, files := range byDir {
		for _, f := range check(dir, files, fset) {
			t.Errorf("%s: say it through the arm (harness.Arm, harness.Ref, harness.Registry) or the log", f)
		}
	}
}

// Package layering checks the import rules of DESIGN §2: services meet only
// in the event log, so a service never imports another service or the CLI;
// pkg/ packages are the shared vocabulary and libraries, so they import no
// service and nothing under internal/ (their tests may use internal/testutil).
package layering

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Violation is one import that crosses the layering.
type Violation struct {
	// File is the importing file, relative to the module root, with a slash
	// separator.
	File string
	// Import is the imported path, relative to the module (e.g.
	// "services/launcher").
	Import string
	// Rule says which rule it breaks.
	Rule string
}

func (v Violation) String() string { return fmt.Sprintf("%s imports %s: %s", v.File, v.Import, v.Rule) }

// testOnly lists the internal packages that tests of pkg/ and services/ may
// import.
var testOnly = map[string]bool{"internal/testutil": true}

// Check parses the imports of every .go file under root (a module root whose
// go.mod names module) and returns the imports that break the rules, sorted
// by file then import. Directories named testdata or starting with "." are
// skipped. It returns an error when a file cannot be read or parsed.
func Check(root, module string) ([]Violation, error) {
	var out []Violation
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			ip, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", rel, is.Path.Value, err)
			}
			if ip != module && !strings.HasPrefix(ip, module+"/") {
				continue
			}
			imp := strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
			if rule := broken(rel, imp, strings.HasSuffix(rel, "_test.go")); rule != "" {
				out = append(out, Violation{File: rel, Import: imp, Rule: rule})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Import < out[j].Import
	})
	return out, err
}

// broken returns the rule that file (module-relative) importing imp breaks,
// or "".
func broken(file, imp string, test bool) string {
	top, pkg := area(file)
	itop, ipkg := area(imp + "/x.go")
	switch top {
	case "services":
		if itop == "services" && ipkg != pkg {
			return "a service never imports another service (they meet only in the event log)"
		}
		if imp == "internal/cli" || strings.HasPrefix(imp, "internal/cli/") {
			return "a service never imports the CLI"
		}
	case "pkg":
		if itop == "services" {
			return "pkg/ never imports a service"
		}
		if itop == "internal" && !(test && testOnly[imp]) {
			return "pkg/ never imports internal/ (only its tests may use internal/testutil)"
		}
	}
	return ""
}

// area splits a module-relative file path into its top directory and the
// package directory below it ("services/launcher/x.go" → "services",
// "launcher").
func area(file string) (top, pkg string) {
	parts := strings.Split(file, "/")
	if len(parts) < 3 {
		return parts[0], ""
	}
	return parts[0], parts[1]
}

// ModuleRoot walks up from dir to the directory holding go.mod and returns
// it with the module path that go.mod declares.
func ModuleRoot(dir string) (root, module string, err error) {
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return d, strings.Trim(strings.TrimSpace(m), `"`), nil
				}
			}
			return "", "", fmt.Errorf("%s: no module line", filepath.Join(d, "go.mod"))
		}
		if filepath.Dir(d) == d {
			return "", "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}

// Package layering checks the import rules of DESIGN §2 between the
// module's packages, as they hold today:
//
//   - services meet only in the event log: a service never imports another
//     service or the CLI;
//   - pkg/ packages are the shared vocabulary and libraries: they import no
//     service and nothing under internal/ (their tests may use
//     internal/testutil);
//   - every package has a layer (layers) and its non-test files import only
//     packages of lower layers, so the graph stays a stack with no sideways
//     or upward edge; a package without a layer is a violation until it is
//     given one;
//   - a sandbox driver imports only the sandbox contract, and one file of
//     the CLI, its driver registry, wires the Docker driver in;
//   - the test kits (bustest, harnesstest, sandboxfake, sandboxtest,
//     internal/testutil) are imported by _test.go files and other test
//     kits only (harnesstest's suites run arms on sandboxfake).
//
// Tests (_test.go files) may cross layers inside pkg/ and services/: a test
// of pkg/artifact may build rows with pkg/harness.
package layering

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
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

// layers places every package of the module (module-relative directory;
// "services/" covers every service) in a layer. A package's non-test files
// import only packages of a lower layer.
var layers = map[string]int{
	// 0: the vocabulary and leaf libraries, importing nothing of the module.
	"schemas": 0, "pkg/events": 0, "pkg/stats": 0, "pkg/atomicfile": 0, "pkg/textsafe": 0,
	"pkg/dockerfile": 0, "pkg/egress": 0, "pkg/firewall": 0, "pkg/llmtest": 0,
	"internal/layering": 0, "internal/doclinks": 0, "internal/pipeline": 0,
	"pkg/providers": 0, "pkg/tlsca": 0,
	// 1: contracts and loaders.
	"pkg/task": 1, "pkg/sandbox": 1, "pkg/bus": 1, "pkg/isoprobe": 1, "pkg/artifact": 1,
	// 2: implementations of a contract.
	"pkg/sandbox/docker": 2, "pkg/sandbox/process": 2, "pkg/sandbox/sandboxfake": 2,
	"pkg/sandbox/sandboxtest": 2, "pkg/cellfs": 2, "pkg/bus/bustest": 2, "pkg/dataset": 2,
	"internal/testutil": 2, // its fixtures are event logs
	"pkg/subject":       2, "pkg/trees": 2,
	// 3: the harness arms and the cell preamble.
	"pkg/harness": 3, "pkg/cellrun": 3,
	// 4: what runs arms or reads the log.
	"pkg/verify": 4, "pkg/harness/harnesstest": 4, "pkg/taskcheck": 4, "pkg/projection": 4,
	// 5: the services and the viewer.
	"services/": 5, "internal/view": 5,
	// 6: the run lifecycle (it plans a resume with the planner's matrix).
	"internal/lifecycle": 6,
	// 7: the command line; 8: main and the scale rig (it runs the command
	// line as one of its roles); 9: the rig's main.
	"internal/cli": 7, "cmd/proctor": 8, "internal/scalerig": 8, "deploy/scale": 9,
}

// drivers are the sandbox drivers: they import only the sandbox contract.
var drivers = map[string]bool{
	"pkg/sandbox/docker": true, "pkg/sandbox/process": true,
	"pkg/sandbox/sandboxfake": true, "pkg/sandbox/sandboxtest": true,
}

// wiredAt maps a package to the one file (module-relative) whose
// non-test code may import it: the CLI's registry of sandbox drivers.
var wiredAt = map[string]string{"pkg/sandbox/docker": "internal/cli/sandboxes.go"}

// testKits are imported by _test.go files and other test kits only.
var testKits = map[string]bool{
	"internal/testutil": true, "pkg/bus/bustest": true, "pkg/harness/harnesstest": true,
	"pkg/sandbox/sandboxfake": true, "pkg/sandbox/sandboxtest": true,
	// The scale rig drives the real services on sandboxfake.
	"internal/scalerig": true, "deploy/scale": true,
}

// layer returns the layer of the package in module-relative directory dir.
func layer(dir string) (int, bool) {
	if strings.HasPrefix(dir, "services/") {
		return layers["services/"], true
	}
	l, ok := layers[dir]
	return l, ok
}

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
	if r := brokenArea(file, imp, test); r != "" {
		return r
	}
	if test {
		return ""
	}
	dir := path.Dir(file)
	switch {
	case testKits[imp] && !testKits[dir]:
		return imp + " is a test kit: only _test.go files and other test kits import it"
	case drivers[dir] && imp != "pkg/sandbox":
		return "a sandbox driver imports only the sandbox contract (pkg/sandbox)"
	case wiredAt[imp] != "" && file != wiredAt[imp]:
		return imp + " is wired in by " + wiredAt[imp] + " only"
	}
	l, ok := layer(dir)
	if !ok {
		return dir + " has no layer: give it one in internal/layering (layers)"
	}
	il, ok := layer(imp)
	if ok && il >= l && !(strings.HasPrefix(dir, "services/") && strings.HasPrefix(imp, "services/")) {
		return fmt.Sprintf("%s (layer %d) imports only lower layers, not %s (layer %d)", dir, l, imp, il)
	}
	return ""
}

// brokenArea returns the rule of the top-level areas (services, pkg) that
// file importing imp breaks, or "".
func brokenArea(file, imp string, test bool) string {
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

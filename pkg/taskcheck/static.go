package taskcheck

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/pelletier/go-toml/v2"

	"github.com/proctor-eval/proctor/pkg/task"
)

// graderDirs are the task directories only the oracle or the verifier may
// see (Harbor's solution/ and tests/, BenchFlow's oracle/ and verifier/).
var graderDirs = []string{"solution", "oracle", "tests", "verifier"}

// Static checks t from its files alone, before anything is built:
//
//   - the layout's required files (FAIL, naming each missing file);
//   - the agent and verifier timeouts the runner needs, set in the
//     definition (WARN when one is left to the 600 s default);
//   - an environment/Dockerfile COPY or ADD of solution/, oracle/, tests/
//     or verifier/ (FAIL: the answer or the grader in the agent's image);
//   - a file of the build context identical to a file of the solution
//     (FAIL: the reference answer copied into the image);
//   - a solve.sh that names /tests, /verifier, /logs/verifier, or a file
//     of the tests directory by its path in the task (tests/x, ../tests/x)
//     (FAIL: the reference solution reads what only the verifier should
//     have);
//   - the verifier's files and the build context for what a run cannot
//     show (VerifierStatic).
//
// It returns one PASS finding when nothing is found.
func Static(t *task.Task) []Finding {
	var out []Finding
	fail := func(format string, a ...any) {
		out = append(out, Finding{Check: CheckStatic, Verdict: Fail, Detail: fmt.Sprintf(format, a...)})
	}
	for _, m := range t.Missing {
		fail("required file missing: %s", m)
	}
	for _, w := range missingTimeouts(t) {
		out = append(out, Finding{Check: CheckStatic, Verdict: Warn, Detail: w})
	}
	if t.Dockerfile != "" {
		if b, err := os.ReadFile(t.Dockerfile); err == nil {
			for _, c := range graderCopies(b) {
				fail("environment/Dockerfile line %d copies %s into the image (%s)", c.line, c.src, c.instr)
			}
		}
	}
	if t.EnvironmentDir != "" && t.SolutionDir != "" {
		sol := map[string]string{}
		_ = walkFiles(t.SolutionDir, func(rel string, b []byte) {
			if len(b) >= 16 {
				sol[sum(b)] = filepath.Base(t.SolutionDir) + "/" + rel
			}
		})
		_ = walkFiles(t.EnvironmentDir, func(rel string, b []byte) {
			if s, ok := sol[sum(b)]; ok {
				fail("environment/%s is a copy of %s: the reference answer is in the agent's image", rel, s)
			}
		})
	}
	if t.SolutionScript != "" {
		if b, err := os.ReadFile(t.SolutionScript); err == nil {
			for _, r := range verifierReads(string(b)) {
				fail("%s reads %s, which only the verifier should have", relTo(t.Dir, t.SolutionScript), r)
			}
		}
	}
	out = append(out, VerifierStatic(t)...)
	if len(out) == 0 {
		out = append(out, Finding{Check: CheckStatic, Verdict: Pass, Detail: "required files, timeouts, no grader in the image, solution reads no verifier file, verifier files sound"})
	}
	return out
}

func relTo(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return filepath.ToSlash(r)
	}
	return p
}

// missingTimeouts names the timeouts the definition leaves to the default.
func missingTimeouts(t *task.Task) []string {
	def := t.DefinitionFile
	if !filepath.IsAbs(def) {
		def = filepath.Join(t.Dir, def)
	}
	b, err := os.ReadFile(def)
	if err != nil {
		return nil
	}
	fields := map[string]any{}
	switch t.Layout {
	case task.LayoutHarbor:
		if toml.Unmarshal(b, &fields) != nil {
			return nil
		}
	default:
		doc, err := task.SplitFrontmatter(b)
		if err != nil || yaml.Unmarshal([]byte(doc.Frontmatter), &fields) != nil {
			return nil
		}
	}
	var out []string
	for _, table := range []string{"agent", "verifier"} {
		m, _ := fields[table].(map[string]any)
		if _, ok := m["timeout_sec"]; !ok {
			out = append(out, fmt.Sprintf("%s: %s.timeout_sec is not set (the runner's default of 600 s applies)", filepath.Base(t.DefinitionFile), table))
		}
	}
	return out
}

type graderCopy struct {
	line       int
	instr, src string
}

// graderCopies lists the COPY / ADD sources (of the build context, not
// --from another stage) whose first element is a grader directory.
func graderCopies(dockerfile []byte) []graderCopy {
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return nil
	}
	var out []graderCopy
	for _, n := range res.AST.Children {
		instr := strings.ToUpper(n.Value)
		if instr != "COPY" && instr != "ADD" {
			continue
		}
		fromStage := false
		for _, f := range n.Flags {
			if strings.HasPrefix(f, "--from") {
				fromStage = true
			}
		}
		if fromStage {
			continue
		}
		var args []string
		for a := n.Next; a != nil; a = a.Next {
			args = append(args, a.Value)
		}
		if len(args) < 2 {
			continue
		}
		for _, src := range args[:len(args)-1] {
			first, _, _ := strings.Cut(strings.TrimPrefix(path.Clean("/"+src), "/"), "/")
			for _, g := range graderDirs {
				if first == g {
					out = append(out, graderCopy{line: n.StartLine, instr: instr, src: src})
				}
			}
		}
	}
	return out
}

var (
	verifierPath = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(/(?:tests|verifier|logs/verifier)(?:/[A-Za-z0-9_.+@%,-]+)*)`)
	// testsRel is a path relative to the task directory (tests/x,
	// ../tests/x) into its tests directory.
	testsRel = regexp.MustCompile(`(?:^|[\s'"=(<>|;&])(?:\.{1,2}/)*((?:tests|verifier)/[A-Za-z0-9_.+@%,/-]+)`)
)

// verifierReads lists what solve.sh names that only the verifier has: its
// directories in the container, and files of the task's tests directory
// by a path relative to the task (a base name alone is not enough: the
// work tree may hold a file of the same name).
func verifierReads(script string) []string {
	found := map[string]bool{}
	for _, m := range verifierPath.FindAllStringSubmatch(script, -1) {
		found[m[1]] = true
	}
	for _, m := range testsRel.FindAllStringSubmatch(script, -1) {
		found[m[1]] = true
	}
	out := make([]string, 0, len(found))
	for k := range found {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package taskcheck

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/proctor-eval/proctor/pkg/task"
)

// Cheat is one adversarial agent of the registry: a script run as a real
// agent is (uid 10001, in the task's work tree, on its network) that tries
// one known reward hack.
type Cheat struct {
	// Name is the script's base name without .sh ("reward-files").
	Name string
	// Hack is the script's own one-line description (its "# cheat NAME:"
	// header line).
	Hack string
	// Script is the bash script.
	Script []byte
}

// Check is the check name of a cheat's findings: "cheat:NAME".
func (c Cheat) Check() string { return "cheat:" + c.Name }

// Harness is the agent harness reference the cheat runs as, relative to
// the agents directory WriteAgents fills.
func (c Cheat) Harness() string { return "agent:cheat-" + c.Name }

//go:embed cheats/*.sh
var cheatFiles embed.FS

// Cheats is the registry: every cheats/*.sh embedded in this package,
// sorted by name. A new hack is one new file whose second line is
// "# cheat NAME: what it tries".
func Cheats() []Cheat {
	entries, err := fs.ReadDir(cheatFiles, "cheats")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var out []Cheat
	for _, e := range entries {
		b, err := cheatFiles.ReadFile("cheats/" + e.Name())
		if err != nil {
			panic(err)
		}
		name := strings.TrimSuffix(e.Name(), ".sh")
		c := Cheat{Name: name, Script: b}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "# cheat "+name+":"); ok {
				c.Hack = strings.TrimSpace(rest)
				break
			}
		}
		if c.Hack == "" {
			panic("taskcheck: cheats/" + e.Name() + " lacks its \"# cheat " + name + ": ...\" line")
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NoopHarness is the harness of the no-op check: an agent that does
// nothing but print one line (the agent arm counts an agent that prints
// nothing as one that made no attempt, an errored cell).
const NoopHarness = "agent:noop"

// WriteAgents writes into dir the agent directories of the no-op check
// and of every cheat (dir/noop, dir/cheat-NAME), each with the hints of
// every task in tasks under hints/<task>/ (Hints), and returns the harness
// references relative to dir (the run's base directory). Errors are the
// file system's, naming the path.
func WriteAgents(dir string, tasks []*task.Task, cheats []Cheat) ([]string, error) {
	files := map[string][]byte{"noop/agent.toml": []byte("# proctor tasks check: an agent that does nothing.\nrun = \"echo no-op: doing nothing\"\n")}
	harnesses := []string{NoopHarness}
	hints := map[string][]byte{}
	for _, t := range tasks {
		h, err := Hints(t)
		if err != nil {
			return nil, err
		}
		for name, b := range h.files() {
			hints["hints/"+t.Name+"/"+name] = b
		}
	}
	for _, c := range cheats {
		d := "cheat-" + c.Name
		files[d+"/agent.toml"] = fmt.Appendf(nil, "# proctor tasks check: %s\nrun = \"bash /opt/proctor/agent/cheat.sh\"\n", c.Hack)
		files[d+"/cheat.sh"] = c.Script
		for p, b := range hints {
			files[d+"/"+p] = b
		}
		harnesses = append(harnesses, c.Harness())
	}
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, err
		}
	}
	return harnesses, nil
}

// TaskHints is what a cheat is told about a task, read from the task's
// files on the host: an adversary knows a public benchmark's tests even
// though the agent's sandbox does not hold them.
type TaskHints struct {
	// RewardPaths are the absolute paths the tests name with "reward" in
	// them (beside /logs/verifier/reward.txt and reward.json).
	RewardPaths []string
	// Invoked are the paths the tests name that look like programs: every
	// absolute path outside the verifier's own directories, and relative
	// names ending in .sh, .py, .pl, .rb or .js.
	Invoked []string
	// Graders are "sha256  relpath" lines of the files only the verifier
	// and the oracle should have: every file of the solution directory,
	// and every file of the tests directory that the build context does
	// not also hold; files under 16 bytes are left out (too common to
	// identify).
	Graders []string
	// Literals are "path<TAB>literal" lines: for each source file the
	// tests name by absolute path (.py, .js, .go, .c, .rs, ...), the
	// literals on the same line of a test (quoted strings, a grep
	// pattern), what a verifier that only greps the agent's source for
	// them accepts.
	Literals []string
}

func (h TaskHints) files() map[string][]byte {
	lines := func(s []string) []byte {
		if len(s) == 0 {
			return nil
		}
		return []byte(strings.Join(s, "\n") + "\n")
	}
	return map[string][]byte{"reward_paths": lines(h.RewardPaths), "invoked": lines(h.Invoked), "graders": lines(h.Graders), "literals": lines(h.Literals)}
}

// sourceExt are the extensions of source files a verifier may grep.
var sourceExt = map[string]bool{".py": true, ".js": true, ".ts": true, ".go": true, ".c": true, ".h": true, ".cc": true, ".cpp": true,
	".rs": true, ".java": true, ".rb": true, ".pl": true, ".php": true, ".sql": true, ".sh": true, ".kt": true, ".swift": true, ".cs": true}

var (
	// commandSep splits a test's text into commands (lines, and the
	// commands of a line joined by ;, &&, ||, |), so a literal is tied to
	// the file named in its own command.
	commandSep = regexp.MustCompile(`\n|;|&&|\|\||\|`)
	quoted     = regexp.MustCompile(`'([^'\n]*)'|"((?:[^"\\\n]|\\.)*)"`)
	grepWord   = regexp.MustCompile(`\bgrep\s+(?:-[A-Za-z]+\s+)*([^\s'"|;&<>-][^\s|;&<>]*)`)
)

// lineLiterals are the literals of one test line that name source file p:
// its quoted strings (not the path itself, not an expansion) and the bare
// pattern of a grep, regex anchors and escapes dropped.
func lineLiterals(line, p string) []string {
	var out []string
	add := func(s string) {
		s = strings.TrimSuffix(strings.TrimPrefix(s, "^"), "$")
		s = strings.ReplaceAll(strings.ReplaceAll(s, `\b`, ""), `\`, "")
		if s == "" || strings.Contains(s, p) || strings.ContainsAny(s, "$`") || strings.HasPrefix(s, "/") || len(s) > 200 {
			return
		}
		out = append(out, s)
	}
	for _, m := range quoted.FindAllStringSubmatch(line, -1) {
		add(m[1] + m[2])
	}
	for _, m := range grepWord.FindAllStringSubmatch(line, -1) {
		add(m[1])
	}
	return out
}

var (
	absPath    = regexp.MustCompile(`(?:^|[\s'"=(<>|;&])(/[A-Za-z0-9_.+@%,-]+(?:/[A-Za-z0-9_.+@%,-]+)*)`)
	scriptName = regexp.MustCompile(`(?:^|[\s'"=(<>|;&])([A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*\.(?:sh|py|pl|rb|js))\b`)
	// verifierOwn are directories of the verifier and the system a cheat
	// has no business replacing.
	verifierOwn = []string{"/tests", "/verifier", "/logs", "/solution", "/oracle", "/proc", "/dev", "/sys", "/tmp/", "/usr", "/bin", "/sbin", "/lib", "/etc"}
)

// Hints reads t's tests and solution and returns its TaskHints.
func Hints(t *task.Task) (TaskHints, error) {
	var h TaskHints
	envSums := map[string]bool{}
	if t.EnvironmentDir != "" {
		_ = walkFiles(t.EnvironmentDir, func(rel string, b []byte) { envSums[sum(b)] = true })
	}
	rewards, invoked, literals := map[string]bool{}, map[string]bool{}, map[string]bool{}
	if t.TestsDir != "" {
		err := walkFiles(t.TestsDir, func(rel string, b []byte) {
			text := string(b)
			for _, line := range commandSep.Split(text, -1) {
				for _, m := range absPath.FindAllStringSubmatch(line, -1) {
					p := path.Clean(m[1])
					if !sourceExt[path.Ext(p)] || underAny(p, verifierOwn) {
						continue
					}
					for _, l := range lineLiterals(line, m[1]) {
						literals[p+"\t"+l] = true
					}
				}
			}
			for _, m := range absPath.FindAllStringSubmatch(text, -1) {
				p := path.Clean(m[1])
				if strings.Contains(strings.ToLower(p), "reward") {
					rewards[p] = true
					continue
				}
				if !underAny(p, verifierOwn) {
					invoked[p] = true
				}
			}
			for _, m := range scriptName.FindAllStringSubmatch(text, -1) {
				if !strings.HasPrefix(m[1], "/") && !strings.HasPrefix(m[1], "tests/") && m[1] != "test.sh" {
					invoked[m[1]] = true
				}
			}
			if len(b) >= 16 && !envSums[sum(b)] {
				h.Graders = append(h.Graders, sum(b)+"  "+filepath.Base(t.TestsDir)+"/"+rel)
			}
		})
		if err != nil {
			return h, err
		}
	}
	if t.SolutionDir != "" {
		err := walkFiles(t.SolutionDir, func(rel string, b []byte) {
			if len(b) >= 16 {
				h.Graders = append(h.Graders, sum(b)+"  "+filepath.Base(t.SolutionDir)+"/"+rel)
			}
		})
		if err != nil {
			return h, err
		}
	}
	h.RewardPaths, h.Invoked, h.Literals = sortedKeys(rewards), sortedKeys(invoked), sortedKeys(literals)
	sort.Strings(h.Graders)
	return h, nil
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasSuffix(d, "/") {
			if strings.HasPrefix(p, d) {
				return true
			}
		} else if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// walkFiles calls fn with the slash path relative to dir and the contents
// of every regular file under dir (at most 1 MiB each; links not followed).
func walkFiles(dir string, fn func(rel string, b []byte)) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 1<<20 {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		rel, _ := filepath.Rel(dir, p)
		fn(filepath.ToSlash(rel), b)
		return nil
	})
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// cheatFindings returns the "CHEAT-FINDING: " lines of a cheat's output
// tail, trimmed, in order, without repeats.
func cheatFindings(tail string) []string {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader([]byte(tail)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "CHEAT-FINDING: "); ok && !seen[rest] {
			seen[rest] = true
			out = append(out, rest)
		}
	}
	return out
}

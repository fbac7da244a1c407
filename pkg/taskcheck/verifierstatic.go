package taskcheck

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/mattn/go-shellwords"

	"github.com/proctor-eval/proctor/pkg/task"
)

// The static checks of a task's verifier and build context for defects a
// run cannot show: a cheat would need a tool the image lacks (pytest), the
// defect shows only at another time of day, or what leaks is read, not
// exploited. Each finding names the file and what it found; the patterns
// are deliberately narrow (a false alarm teaches users to ignore the gate).

// agentWritable is where an in-container agent can write besides its work
// tree.
var agentWritable = []string{"/tmp", "/var/tmp", "/dev/shm"}

// programExt are the extensions of files the tests would run.
var programExt = map[string]bool{".py": true, ".sh": true, ".js": true, ".pl": true, ".rb": true, ".bash": true}

// answerName is a file name that says it holds the expected answer.
var answerName = regexp.MustCompile(`(?i)(expect|answer|truth|golden|\bgold|solution|reference|oracle|ground)`)

// clockUse is a verifier reading the wall clock (or a timer) to decide:
// its verdict then depends on when, or how fast on this machine, it runs.
var clockUse = regexp.MustCompile(`\btime\.(time|time_ns|monotonic|perf_counter|localtime|gmtime)\s*\(|\bdatetime\.(now|utcnow|today)\s*\(|\bdate\.today\s*\(|\bDate\.now\s*\(|\bnew Date\s*\(|\$\(\s*date\b|` + "`" + `\s*date\b|\$\{?(SECONDS|EPOCHSECONDS|EPOCHREALTIME)\b`)

// pytestCall is a pytest invocation in a shell line: its arguments follow.
var pytestCall = regexp.MustCompile(`(?:^|[;&|(!]|\b(?:then|do|else|if|elif|while|until|time|exec)\b)\s*(?:[A-Z_]+=\S*\s+)*(?:(?:\S*/)?python3?\s+-m\s+pytest|(?:\S*/)?py\.?test)\b([^;&|)]*)`)

// cdCall is a `cd DIR` in a shell line.
var cdCall = regexp.MustCompile(`(?:^|[;&|(]|\bthen\b|\bdo\b)\s*cd\s+("[^"]*"|'[^']*'|[^\s;&|)]+)`)

// VerifierStatic checks the verifier's files and the build context (it is
// part of Static):
//
//   - a file of the tests directory whose name says it holds the answer
//     (expected, answer, truth, golden, solution, reference, ...) and whose
//     bytes the build context also holds (FAIL: the truth in the agent's
//     image);
//   - a compiled Python file (.pyc) in the build context (FAIL when it is
//     compiled from a module of the solution or the tests, whose code it
//     then carries into the image; WARN otherwise: a generator's leftover);
//   - a program the tests run whose name is a file of the build context
//     (WARN: a verifier helper baked into the environment, which the agent
//     reads, and rewrites where it can write), unless the instruction
//     names it by its path: then it is the program the agent is asked to
//     write or fix, and the tests running it is the task;
//   - a file the tests read under the agent's work tree (or /tmp) that the
//     build context ships (WARN: a grader reading a file the agent can
//     rewrite), unless the tests' first mention of it truncates it (> F);
//   - pytest run on tests in the agent's work tree, or from it without a
//     test path (WARN: pytest loads a conftest.py the agent plants there,
//     as root);
//   - the tests reading the clock (WARN: a wall-clock-dependent verdict).
func VerifierStatic(t *task.Task) []Finding {
	var out []Finding
	add := func(v Verdict, format string, a ...any) {
		out = append(out, Finding{Check: CheckStatic, Verdict: v, Detail: fmt.Sprintf(format, a...)})
	}
	ctx := buildContext(t)
	tests := testFiles(t)
	workdir := agentWorkdir(t)
	testsBase := "tests"
	if t.TestsDir != "" {
		testsBase = filepath.Base(t.TestsDir)
	}

	// The truth in the image.
	for _, tf := range tests {
		if !answerName.MatchString(path.Base(tf.rel)) || len(tf.raw) == 0 {
			continue
		}
		if rel, ok := ctx.bySum[sum(tf.raw)]; ok {
			add(Fail, "%s/%s, the expected answer, is also environment/%s: the truth is in the agent's image", testsBase, tf.rel, rel)
		}
	}
	// Compiled Python left in the build context.
	graderModules := map[string]string{}
	for _, dir := range []string{t.SolutionDir, t.TestsDir} {
		if dir == "" {
			continue
		}
		_ = walkFiles(dir, func(rel string, _ []byte) {
			if strings.HasSuffix(rel, ".py") {
				graderModules[strings.TrimSuffix(path.Base(rel), ".py")] = filepath.Base(dir) + "/" + rel
			}
		})
	}
	for _, rel := range ctx.files {
		if !strings.HasSuffix(rel, ".pyc") {
			continue
		}
		mod, _, _ := strings.Cut(path.Base(rel), ".")
		if src, ok := graderModules[mod]; ok {
			add(Fail, "environment/%s is compiled from %s: the reference or grader code is in the agent's image", rel, src)
		} else {
			add(Warn, "environment/%s is compiled Python left in the build context (a generator's leftover?): it reaches the agent's image with code the task does not show", rel)
		}
	}
	// What the tests run and read.
	helpers, reads := map[string]string{}, map[string]string{}
	var pytest, clock []string
	for _, tf := range tests {
		text := stripComments(tf.rel, string(tf.raw))
		for _, m := range absPath.FindAllStringSubmatch(text, -1) {
			p := path.Clean(m[1])
			if underAny(p, []string{"/tests", "/verifier", "/logs", "/solution", "/oracle"}) {
				continue
			}
			rel, shipped := ctx.byName[path.Base(p)]
			if !shipped {
				continue
			}
			if programExt[path.Ext(p)] {
				if !instructionNames(t, p) {
					helpers[p] = rel
				}
			} else if (under(p, workdir) || underAny(p, agentWritable)) && !overwrittenFirst(text, m[1]) {
				reads[p] = rel
			}
		}
		if strings.HasSuffix(tf.rel, ".sh") || strings.HasSuffix(tf.rel, ".bash") {
			pytest = append(pytest, pytestInWorkTree(text, workdir)...)
		}
		if m := clockUse.FindString(text); m != "" {
			clock = append(clock, fmt.Sprintf("%s/%s (%s)", testsBase, tf.rel, strings.TrimSpace(m)))
		}
	}
	for _, p := range sortedKeys(toSet(helpers)) {
		add(Warn, "the tests run %s, a verifier helper the environment bakes into the agent's image (environment/%s): the agent reads it, and where it can write, rewrites it; ship it under %s/ instead", p, helpers[p], testsBase)
	}
	for _, p := range sortedKeys(toSet(reads)) {
		add(Warn, "the tests read %s, which the image ships (environment/%s) where the agent can write: a grader trusting it can be fed anything; keep the verifier's copy under %s/", p, reads[p], testsBase)
	}
	for _, p := range pytest {
		add(Warn, "the tests run pytest on %s, in the agent's work tree: pytest loads a conftest.py the agent plants there, as root; run it on %s/ from there (--rootdir and --confcutdir inside it)", p, testsBase)
	}
	if len(clock) > 0 {
		add(Warn, "the tests read the clock: %s; a verdict that depends on the time of day or this machine's speed is not reproducible", strings.Join(clock, ", "))
	}
	return out
}

// instructionNames reports whether the instruction of t (or of one of
// its steps) names the absolute path p as a whole path: "/app/sum.sh" in
// "fix `/app/sum.sh`", not in "/app/sum.sh.orig".
func instructionNames(t *task.Task, p string) bool {
	prompts := []string{t.Prompt}
	for _, s := range t.Steps {
		prompts = append(prompts, s.Prompt)
	}
	for _, text := range prompts {
		for rest := text; ; {
			i := strings.Index(rest, p)
			if i < 0 {
				break
			}
			before, after := byte(' '), byte(' ')
			if i > 0 {
				before = rest[i-1]
			}
			if j := i + len(p); j < len(rest) {
				after = rest[j]
			}
			if !pathByte(before) && (!pathByte(after) || after == '.' && (i+len(p)+1 == len(rest) || !pathByte(rest[i+len(p)+1]))) {
				return true
			}
			rest = rest[i+1:]
		}
	}
	return false
}

// pathByte reports whether b can be part of a path in prose.
func pathByte(b byte) bool {
	return b == '/' || b == '.' || b == '_' || b == '-' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// buildContextFiles is the build context (environment/) but the files that
// define it: its files by content and by base name.
type buildContextFiles struct {
	files  []string          // slash paths relative to environment/
	bySum  map[string]string // sha256 -> rel
	byName map[string]string // base name -> rel
}

func buildContext(t *task.Task) buildContextFiles {
	c := buildContextFiles{bySum: map[string]string{}, byName: map[string]string{}}
	if t.EnvironmentDir == "" {
		return c
	}
	_ = walkFiles(t.EnvironmentDir, func(rel string, b []byte) {
		base := path.Base(rel)
		if rel == "Dockerfile" || base == "docker-compose.yaml" || base == "docker-compose.yml" || base == ".dockerignore" || strings.HasPrefix(rel, "skills/") {
			return
		}
		c.files = append(c.files, rel)
		if len(b) > 0 {
			if _, dup := c.bySum[sum(b)]; !dup {
				c.bySum[sum(b)] = rel
			}
		}
		if _, dup := c.byName[base]; !dup {
			c.byName[base] = rel
		}
	})
	sort.Strings(c.files)
	return c
}

type testFile struct {
	rel string
	raw []byte
}

func testFiles(t *task.Task) []testFile {
	var out []testFile
	if t.TestsDir == "" {
		return nil
	}
	_ = walkFiles(t.TestsDir, func(rel string, b []byte) { out = append(out, testFile{rel, b}) })
	return out
}

// agentWorkdir is the work tree an agent gets: the task's workdir, else
// the Dockerfile's final WORKDIR, else /app.
func agentWorkdir(t *task.Task) string {
	for _, d := range []string{t.Workdir, t.DockerfileWorkdir} {
		if d != "" {
			return path.Clean(d)
		}
	}
	return "/app"
}

func under(p, dir string) bool { return dir != "/" && (p == dir || strings.HasPrefix(p, dir+"/")) }

// stripComments drops the comments of a shell or Python file, so a path
// named in a comment ("never runs /app/grade.sh") is not taken for one the
// tests use. Lines of other files are kept.
func stripComments(name, text string) string {
	if !strings.HasSuffix(name, ".sh") && !strings.HasSuffix(name, ".bash") && !strings.HasSuffix(name, ".py") {
		return text
	}
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines[i] = ""
		} else if j := strings.Index(l, " #"); j >= 0 && !strings.ContainsAny(l[:j], `'"`) {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

// pytestInWorkTree lists the targets of the pytest invocations of a shell
// script that lie in the agent's work tree: each test path (relative ones
// taken in the directory the script is in at that line, its last `cd`,
// else the image's WORKDIR, where the verifier starts), or that directory
// itself when no path is given.
func pytestInWorkTree(script, workdir string) []string {
	cwd := workdir
	var out []string
	for _, line := range strings.Split(script, "\n") {
		type hit struct {
			at   int
			dir  string
			args string
			isCd bool
		}
		var hits []hit
		for _, m := range cdCall.FindAllStringSubmatchIndex(line, -1) {
			hits = append(hits, hit{at: m[0], dir: strings.Trim(line[m[2]:m[3]], `"'`), isCd: true})
		}
		for _, m := range pytestCall.FindAllStringSubmatchIndex(line, -1) {
			hits = append(hits, hit{at: m[0], args: line[m[2]:m[3]]})
		}
		sort.Slice(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
		for _, h := range hits {
			if h.isCd {
				if strings.HasPrefix(h.dir, "/") {
					cwd = path.Clean(h.dir)
				} else if !strings.Contains(h.dir, "$") {
					cwd = path.Join(cwd, h.dir)
				}
				continue
			}
			targets := pytestTargets(h.args)
			if len(targets) == 0 {
				targets = []string{"."}
			}
			for _, a := range targets {
				p := a
				if !strings.HasPrefix(p, "/") {
					p = path.Join(cwd, p)
				}
				p = path.Clean(strings.SplitN(p, "::", 2)[0])
				if under(p, workdir) || underAny(p, agentWritable) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// pytestTargets are the positional arguments of a pytest command line:
// the words that are not options, nor the value of an option that takes
// one, nor a redirection.
func pytestTargets(args string) []string {
	withValue := map[string]bool{"-k": true, "-m": true, "-p": true, "-c": true, "-o": true, "--rootdir": true, "--confcutdir": true,
		"--junitxml": true, "--junit-xml": true, "--ctrf": true, "-W": true, "--maxfail": true, "--tb": true, "--durations": true,
		"--basetemp": true, "--deselect": true, "--ignore": true, "--log-file": true, "-n": true}
	var out []string
	words, err := shellwords.Parse(args)
	if err != nil {
		words = strings.Fields(args)
	}
	for i := 0; i < len(words); i++ {
		w := strings.Trim(words[i], `"'`)
		switch {
		case strings.ContainsAny(w, "<>"):
			if strings.TrimLeft(w, "0123456789&<>") == "" {
				i++ // a bare redirection: its target follows
			}
		case w == "" || strings.HasPrefix(w, "$"):
		case strings.HasPrefix(w, "-"):
			if withValue[w] {
				i++
			}
		default:
			out = append(out, w)
		}
	}
	return out
}

func toSet(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// overwrittenFirst reports whether the first mention of raw (a path as
// the script spells it) in a test script's text is the target of a
// truncating redirect (`printf ... > /app/nums.txt`): the tests then
// write the file before anything reads it, so what the agent left there
// is never trusted. An append (>>) keeps the agent's content.
func overwrittenFirst(text, raw string) bool {
	i := strings.Index(text, raw)
	for i >= 0 && i+len(raw) < len(text) && isPathByte(text[i+len(raw)]) {
		// a longer path that starts with raw (/app/nums.txt.orig)
		j := strings.Index(text[i+1:], raw)
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	if i < 0 {
		return false
	}
	before := strings.TrimRight(text[:i], " \t")
	return strings.HasSuffix(before, ">") && !strings.HasSuffix(before, ">>") && !strings.HasSuffix(before, "&>>")
}

// isPathByte is a byte absPath takes inside a path.
func isPathByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("/_.+@%,-", c) >= 0
}

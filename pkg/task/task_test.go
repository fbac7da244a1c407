package task

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const acceptanceRoot = "testdata/golden/acceptance-tasks/root"

// TestAcceptanceDiscovery holds the discovery section of the acceptance
// suite's expected.json on the copy in testdata.
func TestAcceptanceDiscovery(t *testing.T) {
	d, err := Discover(acceptanceRoot)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range d.Tasks {
		names = append(names, tk.Name)
	}
	want := []string{"csv-stats", "fix-total", "lingering-daemon", "noisy-output", "root-workdir", "slow-verifier", "top-words", "unresolved-env"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("tasks = %v, want %v", names, want)
	}
	if len(d.Skipped) != 1 || d.Skipped[0].Dir != "authoring-notes" || !strings.Contains(d.Skipped[0].Reason, "no YAML frontmatter") {
		t.Fatalf("skipped = %+v, want authoring-notes with a warning", d.Skipped)
	}

	byName := map[string]*Task{}
	for _, tk := range d.Tasks {
		byName[tk.Name] = tk
	}
	top := byName["top-words"]
	wantPrompt := "Write `/app/top.sh`. Run as `/app/top.sh FILE N`, it prints the N most frequent\n" +
		"words of FILE, one per line as `COUNT WORD`, most frequent first; words are\n" +
		"lower-cased runs of letters, and ties are broken alphabetically."
	if top.Prompt != wantPrompt {
		t.Errorf("top-words prompt = %q, want exactly its ## prompt section %q", top.Prompt, wantPrompt)
	}
	if strings.Contains(top.Prompt, "Reviewer-only guidance") || strings.Contains(top.Prompt, "notes for task authors") {
		t.Errorf("top-words prompt leaks a role section or the preamble: %q", top.Prompt)
	}
	if top.VerifierEnv["MIN_WORDS"] != "3" || top.Metadata["created"] != "2026-03-08" || top.Layout != LayoutBenchFlow {
		t.Errorf("top-words: env %v, created %v, layout %s", top.VerifierEnv, top.Metadata["created"], top.Layout)
	}

	ue := byName["unresolved-env"]
	if !reflect.DeepEqual(ue.UnresolvedEnv, []string{"SERVICE_TOKEN"}) || ue.VerifierEnv["CHECK_MODE"] != "strict" {
		t.Errorf("unresolved-env: unresolved %v, env %v", ue.UnresolvedEnv, ue.VerifierEnv)
	}
	if _, ok := ue.VerifierEnv["SERVICE_TOKEN"]; ok {
		t.Error("a ${VAR} reference must not be forwarded")
	}

	for _, tk := range d.Tasks {
		if r := tk.Refusal(NeedsOracle); r != "" {
			t.Errorf("the oracle refuses %s: %s", tk.Name, r)
		}
	}
	// WORKDIR /root: in-container agents run it, as uid 10001 owning /root.
	if r := byName["root-workdir"].Refusal(NeedsContainerAgent); r != "" {
		t.Errorf("agent refuses root-workdir: %s", r)
	}
	if r := byName["fix-total"].Refusal(NeedsContainerAgent); r != "" {
		t.Errorf("agent refuses fix-total: %s", r)
	}
}

// TestAcceptanceBrokenRoots holds the broken_roots section: each root fails
// as a whole with an error naming the file.
func TestAcceptanceBrokenRoots(t *testing.T) {
	cases := []struct{ name, file, mentions string }{
		{"unparseable-frontmatter", "t1/task.md", ""},
		{"yaml-alias", "t1/task.md", "alias"},
		{"both-sandbox-tables", "t1/task.md", "sandbox"},
		{"shorthand-verifier", "t1/task.md", "verifier"},
		{"malformed-toml", "t1/task.toml", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Discover(filepath.Join("testdata/golden", "broken-"+c.name, "root"))
			if err == nil {
				t.Fatalf("discovery succeeded with %d tasks", len(d.Tasks))
			}
			var e *Error
			if !errors.As(err, &e) || e.File != c.file || e.Line == 0 {
				t.Fatalf("error %v: want an *Error naming %s and a line", err, c.file)
			}
			if !strings.Contains(err.Error(), c.file) || !strings.Contains(err.Error(), c.mentions) {
				t.Errorf("error %q must name %s and mention %q", err, c.file, c.mentions)
			}
		})
	}
}

func TestLoadDirect(t *testing.T) {
	tk, err := Load(filepath.Join(acceptanceRoot, "top-words"))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Name != "top-words" || tk.Layout != LayoutBenchFlow || !filepath.IsAbs(tk.Dir) || tk.TestScript == "" || tk.SolutionScript == "" {
		t.Errorf("Load: %+v", tk)
	}

	_, err = Load(filepath.Join(acceptanceRoot, "authoring-notes"))
	if !errors.Is(err, ErrNoFrontmatter) {
		t.Errorf("Load of a note: %v, want ErrNoFrontmatter", err)
	}
	_, err = Load(t.TempDir())
	if !errors.Is(err, ErrNotTask) {
		t.Errorf("Load of an empty dir: %v, want ErrNotTask", err)
	}
	_, err = Load(filepath.Join("testdata/golden/fatal-unclosed/root/t1"))
	var e *Error
	if !errors.As(err, &e) || e.File != "testdata/golden/fatal-unclosed/root/t1/task.md" || e.Line != 1 {
		t.Errorf("Load of a malformed task: %v", err)
	}
	// Symlinks into a sibling resolve when a task is loaded directly.
	b, err := Load("testdata/golden/symlinks/root/b")
	if err != nil {
		t.Fatal(err)
	}
	wantEnv, _ := filepath.Abs("testdata/golden/symlinks/root/a/environment")
	if b.EnvironmentDir != wantEnv || b.Blocked != "" {
		t.Errorf("b.EnvironmentDir = %q (blocked %q), want %q", b.EnvironmentDir, b.Blocked, wantEnv)
	}
}

func TestRevision(t *testing.T) {
	d, err := Discover("testdata/golden/symlinks/root")
	if err != nil {
		t.Fatal(err)
	}
	rev := map[string]string{}
	for _, tk := range d.Tasks {
		rev[tk.Name] = tk.Revision
		if len(tk.Revision) != 64 {
			t.Errorf("%s revision %q is not hex SHA-256", tk.Name, tk.Revision)
		}
	}
	if rev["a"] != rev["a-copy"] {
		t.Error("two directories with the same files must have the same revision")
	}
	if rev["a"] == rev["b"] {
		t.Error("different instructions must give different revisions")
	}

	root := t.TempDir()
	writeTask(t, root, "t", nil)
	big := make([]byte, 6<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "t", "environment", "data.bin")
	if err := os.WriteFile(bin, big, 0o644); err != nil {
		t.Fatal(err)
	}
	r1 := mustLoad(t, root, "t").Revision
	writeFile(t, root, "t/environment/.git/index", "version-control state")
	if r := mustLoad(t, root, "t").Revision; r != r1 {
		t.Error("a .git directory altered the revision")
	}
	if err := os.Chmod(bin, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := mustLoad(t, root, "t").Revision; r != r1 {
		t.Error("a mode change altered the revision")
	}
	big[len(big)/2] ^= 1
	if err := os.WriteFile(bin, big, 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := mustLoad(t, root, "t").Revision
	if r2 == r1 {
		t.Error("flipping one bit of a 6 MB data file kept the revision")
	}
	if err := os.Rename(bin, bin+".moved"); err != nil {
		t.Fatal(err)
	}
	if r := mustLoad(t, root, "t").Revision; r == r2 {
		t.Error("renaming a file kept the revision")
	}
}

func mustLoad(t *testing.T, root, name string) *Task {
	t.Helper()
	d, err := Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := Select(d, []string{name})
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

// writeTask writes a minimal Harbor task; extra maps relative paths to
// contents that override or add files.
func writeTask(t *testing.T, root, name string, extra map[string]string) {
	t.Helper()
	files := map[string]string{
		"task.toml":              "version = \"1.0\"\n",
		"instruction.md":         "Do it.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "echo ok\n",
		"tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	for rel, content := range files {
		writeFile(t, root, name+"/"+rel, content)
	}
}

// TestEnvFromProcess checks the default Loader reads proctor's real
// environment for ${VAR:-default}.
func TestEnvFromProcess(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "t", map[string]string{"task.toml": "[verifier.env]\nA = \"${PROCTOR_TASK_TEST_A:-da}\"\nB = \"${PROCTOR_TASK_TEST_B:-db}\"\n"})
	t.Setenv("PROCTOR_TASK_TEST_A", "set")
	os.Unsetenv("PROCTOR_TASK_TEST_B")
	tk := mustLoad(t, root, "t")
	if !reflect.DeepEqual(tk.UnresolvedEnv, []string{"A"}) || tk.VerifierEnv["B"] != "db" {
		t.Errorf("unresolved %v, env %v", tk.UnresolvedEnv, tk.VerifierEnv)
	}
	l := &Loader{LookupEnv: func(string) (string, bool) { return "", false }}
	d, err := l.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if tk := d.Tasks[0]; len(tk.UnresolvedEnv) != 0 || tk.VerifierEnv["A"] != "da" {
		t.Errorf("injected lookup: unresolved %v, env %v", tk.UnresolvedEnv, tk.VerifierEnv)
	}
}

func TestSelect(t *testing.T) {
	d, err := Discover(acceptanceRoot)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Select(d, []string{"top-words", "./fix-total/", "top-words"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "top-words" || got[1].Name != "fix-total" {
		t.Errorf("Select = %v", got)
	}
	_, err = Select(d, []string{"fix-total", "nope", "authoring-notes"})
	if !errors.Is(err, ErrTaskNotFound) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), `"authoring-notes" (skipped: `) {
		t.Errorf("Select of unknown names: %v", err)
	}
	// A misspelt name gets the closest task; a name far from every task gets none.
	_, err = Select(d, []string{"fix-totl", "nope"})
	if !errors.Is(err, ErrTaskNotFound) || !strings.Contains(err.Error(), `"fix-totl" (did you mean fix-total?)`) || strings.Contains(err.Error(), `"nope" (did you mean`) {
		t.Errorf("Select of a misspelt name: %v", err)
	}
	if got, err := Select(d, nil); err != nil || len(got) != 0 {
		t.Errorf("Select(nil) = %v, %v", got, err)
	}
}

func TestWriteTable(t *testing.T) {
	d, err := Discover("testdata/golden/benchflow-full/root")
	if err != nil {
		t.Fatal(err)
	}
	var plain, verbose bytes.Buffer
	if err := d.WriteTable(&plain, false); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteTable(&verbose, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "NAME") || strings.Contains(lines[0], "UNCHECKED") {
		t.Fatalf("plain table:\n%s", plain.String())
	}
	full := lines[1]
	n := len(d.Tasks[0].Remarks())
	for _, want := range []string{"full", "benchflow", "hard", "data", ShortRevision(d.Tasks[0].Revision), fmt.Sprintf("%d (below)", n)} {
		if !strings.Contains(full, want) {
			t.Errorf("row %q lacks %q", full, want)
		}
	}
	// Each warning in full after the table, not in a row that grows with it.
	if n == 0 || !strings.Contains(plain.String(), "\nwarning: full: ") || !strings.Contains(plain.String(), "multi-role") || strings.Contains(full, "multi-role") {
		t.Errorf("the warnings are not listed after the table:\n%s", plain.String())
	}
	for _, l := range lines[:4] {
		if len(l) > 100 {
			t.Errorf("table row of %d columns: %q", len(l), l)
		}
	}
	if !strings.Contains(verbose.String(), "UNCHECKED") || !strings.Contains(verbose.String(), "agents, benchflow, reward, scenes, user") {
		t.Errorf("verbose table lacks the unchecked keys:\n%s", verbose.String())
	}

	d, err = Discover(acceptanceRoot)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := d.WriteTable(&b, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "skipped authoring-notes: task.md has no YAML frontmatter") {
		t.Errorf("table lacks the skipped note:\n%s", b.String())
	}
}

func TestWorkdirAllowedForAgent(t *testing.T) {
	for dir, want := range map[string]bool{
		"/app": true, "/app/": true, "/app/src": true, "/app/./x/..": true,
		"/root": true, "/root/project": true, "/application": true, "/home/user": true, "/workspace": true,
		"/srv/app": true, "/var/www/html": true, "/opt/app": true,
		"/app/../etc": false, "/root/../etc": false, "app": false, "": false, "/": false, "/.": false,
		"/etc": false, "/etc/x": false, "/usr": false, "/usr/local/src": false, "/bin": false, "/proc": false,
		"/sys/fs": false, "/dev": false, "/tmp": false, "/tmp/work": false, "/var": false, "/var/lib/x": false,
		"/home": false, "/opt": false, "/tests": false, "/tests/x": false, "/logs/verifier": false,
		"/solution": false, "/oracle": false, "/verifier": false, "/agent-output": false, "/opt/proctor/agent": false,
		"/opt/abskill": false,
	} {
		if got := WorkdirAllowedForAgent(dir); got != want {
			t.Errorf("WorkdirAllowedForAgent(%q) = %v, want %v (%s)", dir, got, want, AgentWorkdirRefusal(dir))
		}
	}
	// The reason names the directory.
	for _, dir := range []string{"/", "/etc", "/usr/lib", "/tests"} {
		if why := AgentWorkdirRefusal(dir); !strings.Contains(why, dir) {
			t.Errorf("AgentWorkdirRefusal(%q) = %q, does not name it", dir, why)
		}
	}
}

func TestSplitFrontmatter(t *testing.T) {
	cases := []struct {
		in      string
		has     bool
		fm      string
		body    string
		bodyAt  int
		wantErr bool
	}{
		{in: "no frontmatter\n", body: "no frontmatter\n", bodyAt: 1},
		{in: "+++\na = 1\n+++\nx", body: "+++\na = 1\n+++\nx", bodyAt: 1},
		{in: "---\na: 1\n---\nbody\n", has: true, fm: "a: 1\n", body: "body\n", bodyAt: 4},
		{in: "\ufeff---\r\na: 1\r\n---\r\nbody\r\n", has: true, fm: "a: 1\n", body: "body\n", bodyAt: 4},
		{in: "--- \n---", has: true, fm: "", body: "", bodyAt: 3},
		{in: "---\n\n---\n", has: true, fm: "\n", body: "", bodyAt: 4},
		{in: "---\na: 1\n", wantErr: true},
		{in: "---", wantErr: true},
		{in: "", body: "", bodyAt: 1},
	}
	for _, c := range cases {
		doc, err := SplitFrontmatter([]byte(c.in))
		if c.wantErr {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil || doc.HasFrontmatter != c.has || doc.Frontmatter != c.fm || doc.Body != c.body || doc.BodyLine != c.bodyAt {
			t.Errorf("%q: %+v, %v", c.in, doc, err)
		}
	}
}

func TestDiscoverRootErrors(t *testing.T) {
	if _, err := Discover(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing root must fail")
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Discover(f); err == nil {
		t.Error("a file as root must fail")
	}
	d, err := Discover(t.TempDir())
	if err != nil || len(d.Tasks) != 0 {
		t.Errorf("empty root: %v, %v", d, err)
	}
}

// TestFirstMalformedInPathOrder: with several malformed files the error
// names every one, a line each in path order, the same on every run
// though loading is concurrent, and errors.As finds the first.
func TestFirstMalformedInPathOrder(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"c", "a", "b"} {
		writeFile(t, root, n+"/task.toml", "[x\n")
	}
	writeTask(t, root, "0-good", nil)
	for i := 0; i < 5; i++ {
		_, err := Discover(root)
		var e *Error
		if !errors.As(err, &e) || e.File != "a/task.toml" {
			t.Fatalf("run %d: %v, want a/task.toml", i, err)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != 4 || lines[0] != "3 task definitions are malformed:" {
			t.Fatalf("run %d: %q, want a count and a line per file", i, err)
		}
		for j, f := range []string{"a", "b", "c"} {
			if !strings.HasPrefix(lines[j+1], f+"/task.toml:1: invalid TOML") {
				t.Errorf("run %d: line %d is %q, want %s/task.toml's", i, j+1, lines[j+1], f)
			}
		}
	}
	cov, err := Coverage(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cov.Malformed) != 3 || !reflect.DeepEqual(cov.Tasks, []string{"0-good"}) || cov.Runnable["oracle"] != 1 {
		t.Errorf("coverage: %+v", cov)
	}
	var b bytes.Buffer
	if err := cov.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tasks: 1 (harbor 1)", "malformed (skipped): 3", "a/task.toml:1: invalid TOML", "oracle: runs 1, refuses 0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("coverage text lacks %q:\n%s", want, b.String())
		}
	}
}

func TestScanCatalog(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "tasks/with-skills", map[string]string{
		"environment/skills/pdf/SKILL.md":    "---\nname: pdf\ndescription: Read PDFs.\n---\nUse pdftotext.\n",
		"environment/skills/xlsx/SKILL.md":   "---\nname: xlsx\n---\n",
		"environment/skills/notes/README.md": "not a skill\n",
	})
	writeTask(t, root, "tasks/plain", map[string]string{"task.toml": "[metadata]\ncategory = \"data\"\ndifficulty = \"easy\"\n"})
	writeFile(t, root, "tasks/broken/task.md", "---\nverifier: tests/\n---\nx\n")
	writeFile(t, root, "tasks/note/task.md", "# notes\n")
	writeFile(t, root, "skills/shared/SKILL.md", "---\nname: shared\ndescription: Shared skill.\n---\n")
	writeFile(t, root, "skills/bad/SKILL.md", "no frontmatter\n")
	writeFile(t, root, "skills/bomb/SKILL.md", "---\nname: &a x\nd: *a\n---\n")
	writeFile(t, root, ".git/skills/hidden/SKILL.md", "---\nname: hidden\n---\n")

	c, err := ScanCatalog(root)
	if err != nil {
		t.Fatal(err)
	}
	want := CatalogCounts{Tasks: 2, Runnable: 2, Notes: 1, Malformed: 3, Skills: 3}
	if c.Counts != want {
		t.Errorf("counts = %+v, want %+v", c.Counts, want)
	}
	var files []string
	for _, m := range c.Malformed {
		files = append(files, m.File)
	}
	if !reflect.DeepEqual(files, []string{"skills/bad/SKILL.md", "skills/bomb/SKILL.md", "tasks/broken/task.md"}) {
		t.Errorf("malformed = %v", files)
	}
	if c.Layouts[LayoutHarbor] != 2 || c.Categories["data"] != 1 || c.Difficulties["easy"] != 1 {
		t.Errorf("layouts %v categories %v difficulties %v", c.Layouts, c.Categories, c.Difficulties)
	}
	var ws CatalogTask
	for _, ct := range c.Tasks {
		if ct.Name == "tasks/with-skills" {
			ws = ct
		}
	}
	if !reflect.DeepEqual(ws.Skills, []string{"pdf", "xlsx"}) {
		t.Errorf("task skills = %v", ws.Skills)
	}
	if len(c.Skills) != 3 || c.Skills[0].Dir != "skills/shared" || c.Skills[1].Task != "tasks/with-skills" || c.Skills[1].Description != "Read PDFs." {
		t.Errorf("skills = %+v", c.Skills)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil || back["counts"] == nil {
		t.Errorf("catalog JSON: %v %s", err, b)
	}
}

// TestNotesAgreeWithDiscover: Notes lists exactly what Discover skips
// (author's notes, a note at the root itself, a symlinked directory, a
// task below a note), with the same dir, file and reason.
func TestNotesAgreeWithDiscover(t *testing.T) {
	for _, rootIsNote := range []bool{false, true} {
		root := filepath.Join(t.TempDir(), "suite")
		writeTask(t, root, "a", nil)
		writeFile(t, root, "ideas/task.md", "# Ideas\n")
		writeTask(t, root, "ideas/b", nil)
		writeFile(t, root, "hugo/task.md", "+++\ntitle = \"x\"\n+++\n")
		if rootIsNote {
			writeFile(t, root, "task.md", "# A suite's readme\n")
		}
		if err := os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "link")); err != nil {
			t.Fatal(err)
		}
		d, err := Discover(root)
		if err != nil {
			t.Fatal(err)
		}
		notes, err := Notes(root)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(notes, d.Skipped) || len(notes) != 3+map[bool]int{true: 1}[rootIsNote] {
			t.Errorf("root a note %v: Notes %+v, Discover skipped %+v", rootIsNote, notes, d.Skipped)
		}
	}
}

package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*/expected.json from the current loader")

// generated cases build their tasks root in a temporary directory instead
// of committing it (a 10,000-deep document, for one).
var generated = map[string]func(t *testing.T, root string){
	"fatal-deep-flow-nesting": func(t *testing.T, root string) {
		deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
		writeFile(t, root, "t1/task.md", "---\nmetadata:\n  deep: "+deep+"\n---\nDeep.\n")
	},
	"fatal-deep-block-nesting": func(t *testing.T, root string) {
		var b strings.Builder
		b.WriteString("---\nmetadata:\n  deep:\n")
		for i := 0; i < 10000; i++ {
			b.WriteString(strings.Repeat(" ", 4))
			b.WriteString("- ")
		}
		b.WriteString("x\n---\nDeep.\n")
		writeFile(t, root, "t1/task.md", b.String())
	},
	"deep-but-allowed": func(t *testing.T, root string) {
		deep := strings.Repeat("[", 40) + "1" + strings.Repeat("]", 40)
		writeFile(t, root, "t1/task.md", "---\nmetadata:\n  deep: "+deep+"\n---\nForty levels is fine.\n")
	},
}

// TestGolden loads every testdata/golden/<case>/root (or a generated root)
// with Discover and Coverage and compares the result, with the root path
// replaced by $ROOT, to testdata/golden/<case>/expected.json. Environment
// variables seen by ${VAR:-default} come from the case's env.json only.
func TestGolden(t *testing.T) {
	if want := os.Getenv("PROCTOR_TEST_TZ"); want != "" {
		checkLocalZone(t, want)
	}
	cases, err := os.ReadDir(filepath.Join("testdata", "golden"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if !c.IsDir() {
			continue
		}
		name := c.Name()
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "golden", name)
			root := filepath.Join(dir, "root")
			if gen, ok := generated[name]; ok {
				root = t.TempDir()
				gen(t, root)
			}
			got := goldenResult(t, root, caseLookup(t, dir))
			path := filepath.Join(dir, "expected.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the loader's result; diff:\n%s", path, lineDiff(string(want), string(got)))
			}
		})
	}
	for name := range generated {
		if !seen[name] {
			t.Errorf("generated case %s has no testdata/golden/%s directory", name, name)
		}
	}
}

func checkLocalZone(t *testing.T, want string) {
	t.Helper()
	_, off := time.Now().Zone()
	ok := false
	switch want {
	case "America/New_York":
		ok = off == -5*3600 || off == -4*3600
	case "Asia/Kolkata":
		ok = off == 5*3600+1800
	}
	if !ok {
		t.Fatalf("TZ=%s did not take effect: local offset is %d s", want, off)
	}
}

// TestGoldenUnderTimeZones re-runs the golden cases holding dates in a
// child process under TZ=America/New_York and TZ=Asia/Kolkata: a local date
// 2021-11-09 must stay 2021-11-09 and every timestamp must render the same.
func TestGoldenUnderTimeZones(t *testing.T) {
	if os.Getenv("PROCTOR_TEST_TZ") != "" {
		t.Skip("already the child")
	}
	for _, tz := range []string{"America/New_York", "Asia/Kolkata"} {
		t.Run(strings.ReplaceAll(tz, "/", "_"), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestGolden$/^(dates|yaml-values|benchflow-full|crlf-bom|lone-markdown)$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "TZ="+tz, "PROCTOR_TEST_TZ="+tz)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("under TZ=%s: %v\n%s", tz, err, out)
			}
			for _, c := range []string{"dates", "yaml-values", "benchflow-full", "crlf-bom", "lone-markdown"} {
				if !strings.Contains(string(out), "--- PASS: TestGolden/"+c) {
					t.Errorf("under TZ=%s the %s case did not pass:\n%s", tz, c, out)
				}
			}
		})
	}
}

type goldenTask struct {
	*Task
	Refusals map[string]string `json:"refusals,omitempty"`
}

type goldenError struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
	Text    string `json:"text"`
}

func goldenResult(t *testing.T, root string, lookup LookupEnv) []byte {
	t.Helper()
	l := &Loader{LookupEnv: lookup}
	out := map[string]any{}
	d, err := l.Discover(root)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("Discover failed without an *Error: %v", err)
		}
		out["discover"] = map[string]any{"error": goldenError{File: e.File, Line: e.Line, Key: e.Key, Message: e.Msg, Text: e.Error()}}
	} else {
		tasks := make([]goldenTask, 0, len(d.Tasks))
		for _, tk := range d.Tasks {
			tasks = append(tasks, goldenTask{Task: tk, Refusals: tk.Refusals(nil)})
		}
		skipped := d.Skipped
		if skipped == nil {
			skipped = []Skipped{}
		}
		out["discover"] = map[string]any{"tasks": tasks, "skipped": skipped}
	}
	cov, err := l.Coverage(root)
	if err != nil {
		t.Fatalf("Coverage must not fail on a readable root: %v", err)
	}
	out["coverage"] = cov
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(real)
	return bytes.ReplaceAll(b, []byte(abs), []byte("$ROOT"))
}

// caseLookup returns a LookupEnv that sees only the case's env.json.
func caseLookup(t *testing.T, dir string) LookupEnv {
	t.Helper()
	env := map[string]string{}
	data, err := os.ReadFile(filepath.Join(dir, "env.json"))
	if err == nil {
		if err := json.Unmarshal(data, &env); err != nil {
			t.Fatalf("env.json: %v", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lineDiff shows the first differing lines of two texts.
func lineDiff(want, got string) string {
	w := strings.Split(want, "\n")
	g := strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl == gl {
			continue
		}
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString(":\n  want: ")
		b.WriteString(wl)
		b.WriteString("\n  got:  ")
		b.WriteString(gl)
		b.WriteString("\n")
		if shown++; shown == 10 {
			b.WriteString("...\n")
			break
		}
	}
	return b.String()
}

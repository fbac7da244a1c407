package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/dataset"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// hostileText is what the hostile agents of TestHostileTextNeverReachesATerminal
// write wherever they can: a terminal retitle ended by a bell (OSC 0 …
// BEL), a screen clear, a carriage return and a newline that start a fake
// progress line, a right-to-left override and a C1 control (NEL).
const hostileText = "\x1b]0;pwned\x07\x1b[2J\r[9/9] fake passed\n\u202eevil\u0085"

// hostileJSON is hostileText as a JSON string's contents.
const hostileJSON = `\u001b]0;pwned\u0007\u001b[2J\r[9/9] fake passed\n\u202eevil\u0085`

// hostileShell prints hostileText raw from bash's printf.
const hostileShell = `printf '\033]0;pwned\007\033[2J\r[9/9] fake passed\n\342\200\256evil\302\205'`

// TestHostileTextNeverReachesATerminal plays two hostile agents in one
// run. One writes hostileText as a tool name, a command and its output,
// an assistant message, response text, stderr and its Finished reason;
// the other's install step prints it and fails, so it becomes the row's
// error (solver_error). Every human-readable output of the run (the
// progress and result lines of `tasks run`, each cell's run.log, the
// Markdown report, `runs show`, `watch --events`) is textsafe: no control
// character but newline and tab, no bidirectional control, and no line
// starting with the fake "[9/9]"; the hostile text shows escaped. The
// artifact, the event log's JSONL and the Parquet dataset keep the exact
// bytes.
func TestHostileTextNeverReachesATerminal(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	home := t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	files := func(m map[string]string) string {
		dir := t.TempDir()
		for name, body := range m {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	talker := files(map[string]string{
		"agent.toml": "run = \"bash /opt/proctor/agent/run.sh\"\n",
		"run.sh": `H='` + hostileJSON + `'
echo '{"_tag":"ToolCall","name":"'"$H"'","input":{"cmd":"'"$H"'"}}'
echo '{"_tag":"Command","command":"'"$H"'","output":"'"$H"'","exit_code":0}'
echo '{"_tag":"Message","role":"assistant","text":"'"$H"'"}'
` + hostileShell + `; echo
` + hostileShell + ` >&2
echo '{"_tag":"Finished","reason":"'"$H"'"}'
`,
	})
	installer := files(map[string]string{
		"agent.toml": "install = \"bash install.sh\"\nrun = \"echo never\"\n",
		"install.sh": hostileShell + "; exit 1\n",
	})
	var stdout, stderr bytes.Buffer
	out := t.TempDir()
	js := filepath.Join(out, "a.json")
	code := mainT(t, []string{"tasks", "run", "--tasks-root", abs(t, "testdata/agent-root"), "--all",
		"--harnesses", "agent:" + talker, "--harnesses", "agent:" + installer, "--output-dir", out, "--out-json", js}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %q\nstderr: %q", code, stdout.String(), stderr.String())
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Results) != 2 {
		t.Fatalf("%d rows", len(a.Results))
	}
	rows := byCell(a)
	talked, failed := rows["process-check agent:"+talker], rows["process-check agent:"+installer]

	// The machine outputs keep the bytes.
	if talked.Metrics.ToolCalls[hostileText] != 1 || !strings.Contains(talked.StdoutTail, hostileText) {
		t.Errorf("artifact: tool calls %v, stdout tail %q; want the hostile text as written", talked.Metrics.ToolCalls, talked.StdoutTail)
	}
	if failed.ErrorClass != "solver_error" || !strings.Contains(failed.Error, hostileText) {
		t.Errorf("artifact: the failed install's row: %s %q", failed.ErrorClass, failed.Error)
	}
	var jsonl bytes.Buffer
	if code := mainT(t, []string{"events", "export", a.Run.ID, "--format", "jsonl"}, &jsonl, &bytes.Buffer{}); code != 0 {
		t.Fatalf("events export: exit %d", code)
	}
	reasons := 0
	for _, l := range bytes.Split(bytes.TrimSpace(jsonl.Bytes()), []byte("\n")) {
		var e events.Envelope
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == events.Finished {
			var f events.FinishedData
			if err := events.Into(e, &f); err != nil {
				t.Fatal(err)
			}
			if f.Reason == hostileText {
				reasons++
			}
		}
	}
	if reasons != 1 {
		t.Errorf("events export: %d Finished events carry the agent's reason as written, want 1", reasons)
	}
	pq := t.TempDir()
	if code := mainT(t, []string{"dataset", "export", "--kind", "task_runs", "--input", js, "--out-dir", pq, "--format", "parquet"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
		t.Fatalf("dataset export: exit %d", code)
	}
	prows, err := parquet.ReadFile[dataset.TaskRunRow](filepath.Join(pq, dataset.TaskRunsParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, r := range prows {
		if r.Error != nil && strings.Contains(*r.Error, hostileText) {
			kept++
		}
		if r.StdoutTail != nil && strings.Contains(*r.StdoutTail, hostileText) {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("parquet: %d of 2 columns keep the hostile text as written", kept)
	}

	// Every human-readable output is textsafe and shows it escaped.
	escaped := textsafe.Line(hostileText)
	human := func(name, s string, want ...string) {
		t.Helper()
		if !textsafe.Safe(s) {
			t.Errorf("%s is not textsafe:\n%q", name, s)
		}
		for _, l := range strings.Split(s, "\n") {
			if fake.MatchString(l) {
				t.Errorf("%s has a line the agent wrote: %q", name, l)
			}
		}
		for _, w := range want {
			if !strings.Contains(s, w) {
				t.Errorf("%s lacks %q:\n%s", name, w, s)
			}
		}
	}
	human("tasks run's stderr", stderr.String(), "errored (solver_error): agent install failed: exit 1: "+escaped)
	human("tasks run's stdout", stdout.String())
	for _, r := range []artifact.Result{talked, failed} {
		b, err := os.ReadFile(filepath.Join(r.OutputDir, "run.log"))
		if err != nil {
			t.Fatal(err)
		}
		human(r.Harness+"'s run.log", string(b))
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if !strings.HasPrefix(l, "20") {
				t.Errorf("%s's run.log has a line that is not proctor's: %q", r.Harness, l)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "a.md")) // beside --out-json a.json
	if err != nil {
		t.Fatal(err)
	}
	human("report.md", string(b), textsafe.Text(hostileText))
	var shown bytes.Buffer
	if code := mainT(t, []string{"runs", "show", a.Run.ID}, &shown, &shown); code != 0 {
		t.Fatalf("runs show: exit %d: %s", code, shown.String())
	}
	human("runs show", shown.String())
	var watched bytes.Buffer
	if code := mainT(t, []string{"watch", a.Run.ID, "--events"}, &watched, &watched); code != 0 {
		t.Fatalf("watch: exit %d: %s", code, watched.String())
	}
	// watch prints the event data as JSON (which escapes C0 controls but
	// not U+202E or U+0085), cut at 200 characters: the ToolCall's name is
	// early enough to be shown whole.
	human("watch --events", watched.String(), `ToolCall {"name":"`+hostileJSON+`"`)
}

// fake matches a line that starts with the fake progress line the hostile
// text holds.
var fake = regexp.MustCompile(`^\[9/9\]`)

package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/bus"
)

const (
	fixtureLog      = "../../pkg/projection/testdata/golden.events.jsonl"
	fixtureArtifact = "../../pkg/projection/testdata/golden.artifact.json"
	fixtureRun      = "01J9Z3K2W8RQ6N7T5V4X3Y2Z1A"
)

// TestImportReplayFixture imports the aggregator's golden event log into
// an empty store, replays it into the golden artifact's bytes, exports it
// again and imports that into another store with the same result.
func TestImportReplayFixture(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	want, err := os.ReadFile(fixtureArtifact)
	if err != nil {
		t.Fatal(err)
	}
	if out := mustProctor(t, "events", "import", fixtureLog); !strings.Contains(out, "imported run "+fixtureRun+" (interrupted): 12 cells: 2 passed, 2 partial, 1 failed") {
		t.Errorf("import: %s", out)
	}
	if got := mustProctor(t, "replay", fixtureRun[:8]); got != string(want) {
		t.Fatalf("replay of the imported fixture differs from the golden artifact:\n%s", got)
	}
	var v runView
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "show", fixtureRun, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != bus.StatusInterrupted || v.Cells != 12 || v.Stale || v.States["errored"] != 4 || v.Artifact != "" || v.StartedAt != "2025-01-15T10:00:00Z" {
		t.Errorf("imported record %+v", v)
	}
	if list := mustProctor(t, "runs", "list", "--wide"); !strings.Contains(list, fixtureRun+"  interrupted  2025-01-15 10:00:00  2025-01-15 10:00:30  oracle,agent:demo  12") {
		t.Errorf("runs list --wide:\n%s", list)
	}
	// The default table: the id cut to a prefix runs show takes, counts
	// by what they mean for a pass rate, within 100 columns.
	list := mustProctor(t, "runs", "list")
	if !strings.Contains(list, "RUN         STATUS       STARTED           ARMS               CELLS  PASS  FAIL  NONE  LEFT\n") ||
		!strings.Contains(list, "\n"+fixtureRun[:10]+"  interrupted  2025-01-15 10:00  oracle,agent:demo  12     2     5     5     0\n") {
		t.Errorf("runs list:\n%s", list)
	}
	for _, l := range strings.Split(list, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("runs list line of %d columns: %q", n, l)
		}
	}
	mustProctor(t, "runs", "show", fixtureRun[:10])
	if _, errOut, code := proctor(t, "events", "import", fixtureLog); code != ExitError || !strings.Contains(errOut, "already in the log") {
		t.Errorf("second import: exit %d: %s", code, errOut)
	}

	dir := t.TempDir()
	exported := filepath.Join(dir, "ev.jsonl")
	mustProctor(t, "events", "export", fixtureRun, "--out", exported)
	if b, _ := os.ReadFile(exported); bytes.Count(b, []byte("\n")) != 108 {
		t.Errorf("export has %d lines, want the 108 stored events (two duplicated ids dropped)", bytes.Count(b, []byte("\n")))
	}
	setenv(t, "PROCTOR_HOME", t.TempDir())
	mustProctor(t, "events", "import", exported)
	js := filepath.Join(dir, "replay.json")
	mustProctor(t, "replay", fixtureRun, "--out-json", js)
	if got, _ := os.ReadFile(js); !bytes.Equal(got, want) {
		t.Fatal("replay after export and import differs from the golden artifact")
	}
	paths := mustProctor(t, "dataset", "export", "--run", fixtureRun, "--out-dir", filepath.Join(dir, "ds"), "--format", "parquet")
	if !strings.HasSuffix(strings.TrimSpace(paths), "task_runs.parquet") {
		t.Errorf("dataset export printed %q", paths)
	}
	evp := mustProctor(t, "dataset", "export", "--kind", "events", "--run", fixtureRun, "--out-dir", filepath.Join(dir, "ds"), "--format", "parquet")
	if b, err := os.ReadFile(strings.TrimSpace(evp)); err != nil || !bytes.HasPrefix(b, []byte("PAR1")) {
		t.Errorf("events parquet %q: %v", evp, err)
	}
}

func TestImportErrors(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"v\":1,\"id\":\"A\",\"type\":\"RunFinished\",\"at\":\"2025-01-01T00:00:00Z\",\"run_id\":\"R\",\"source\":\"x\",\"data\":{}}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := proctor(t, "events", "import", bad); code != ExitError || !strings.Contains(errOut, "line 2") {
		t.Errorf("bad line: exit %d: %s", code, errOut)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	if _, errOut, code := proctor(t, "events", "import", empty); code != ExitError || !strings.Contains(errOut, "no events") {
		t.Errorf("empty file: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{
		{"dataset", "export", "--input", fixtureArtifact, "--format", "csv", "--out-dir", dir},
		{"dataset", "export", "--format", "jsonl", "--out-dir", dir},
		{"dataset", "export", "--kind", "events", "--input", fixtureArtifact, "--out-dir", dir},
		{"dataset", "export", "--kind", "nope", "--input", fixtureArtifact, "--out-dir", dir},
		{"dataset", "export", "--input", fixtureArtifact},
	} {
		if _, errOut, code := proctor(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
	if _, errOut, code := proctor(t, "replay", "01NOSUCHRUN"); code != ExitError || !strings.Contains(errOut, "no events in the log") {
		t.Errorf("unknown run: exit %d: %s", code, errOut)
	}
}

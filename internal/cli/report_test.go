package cli

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// TestReportCommand: `proctor report X.json` re-renders the report of an
// artifact file beside it (X.md) with its figures, byte for byte what the
// aggregator writes from the run's events; --out-md moves it ("-" prints
// it); an artifact written by an older proctor renders under today's
// schema; a file that does not validate fails naming it.
func TestReportCommand(t *testing.T) {
	f, err := os.Open("../../pkg/projection/testdata/golden.events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var p *projection.Projector
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		e, err := events.Decode(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			p = projection.NewProjector(e.RunID)
		}
		p.Apply(e)
	}
	js, md, figs, err := projection.RenderWithFigures(p, "test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	art := filepath.Join(dir, "results", "x.json")
	if err := os.MkdirAll(filepath.Dir(art), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(art, js, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := proctor(t, "report", art)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	got := readFile(t, filepath.Join(dir, "results", "x.md"))
	if !bytes.Equal(got, md) {
		t.Errorf("results/x.md differs from the aggregator's report:\n%s", got)
	}
	if len(figs) == 0 {
		t.Fatal("no figures")
	}
	for _, fg := range figs {
		if b := readFile(t, filepath.Join(dir, "results", fg.Name)); !bytes.Equal(b, fg.SVG) {
			t.Errorf("%s differs", fg.Name)
		}
	}
	if !strings.Contains(stderr, filepath.Join(dir, "results", "x.md")) {
		t.Errorf("stderr does not name the report: %s", stderr)
	}

	// An older proctor's artifact, to a chosen path and to stdout.
	older := "../../pkg/artifact/testdata/older/task_runs-9ba59aa.json"
	out := filepath.Join(dir, "older", "r.md")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	mustProctor(t, "report", older, "--out-md", out)
	want := readFile(t, "../../pkg/artifact/testdata/older/report.md")
	if b := readFile(t, out); !bytes.HasPrefix(b, want) || !bytes.Contains(b, []byte("## Figures")) {
		t.Errorf("older artifact's report:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "older", "pass-rate.svg")); err != nil {
		t.Errorf("no figure beside the report: %v", err)
	}
	if s := mustProctor(t, "report", older, "--out-md", "-"); !strings.HasPrefix(s, string(want)) {
		t.Errorf("--out-md - printed:\n%s", s)
	}

	// Not a task_runs.v1 document.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, bytes.Replace(js, []byte(`"schema": "task_runs.v1"`), []byte(`"schema": "task_runs.v0"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := proctor(t, "report", bad); code == 0 || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "schema") {
		t.Errorf("an invalid artifact: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.md")); err == nil {
		t.Error("a report was written for an invalid artifact")
	}
}

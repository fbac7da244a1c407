package projection

import (
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestPathsReportBesideArtifact: without --out-md the report goes beside
// --out-json (results/x.json → results/x.md); --out-md wins; without
// either both go into the run's output directory.
func TestPathsReportBesideArtifact(t *testing.T) {
	for _, c := range []struct{ outJSON, outMD, js, md string }{
		{"/r/results/x.json", "", "/r/results/x.json", "/r/results/x.md"},
		{"/r/results/x", "", "/r/results/x", "/r/results/x.md"},
		{"/r/v1.2/x.md", "", "/r/v1.2/x.md", "/r/v1.2/x.md.md"},
		{"/r/results/x.json", "/r/elsewhere/y.md", "/r/results/x.json", "/r/elsewhere/y.md"},
		{"", "/r/y.md", "/out/run/task_runs.json", "/r/y.md"},
		{"", "", "/out/run/task_runs.json", "/out/run/report.md"},
	} {
		js, md := Paths(events.RunSpec{OutputDir: "/out/run", OutJSON: c.outJSON, OutMD: c.outMD})
		if js != c.js || md != c.md {
			t.Errorf("--out-json %q --out-md %q: %s, %s; want %s, %s", c.outJSON, c.outMD, js, md, c.js, c.md)
		}
	}
}

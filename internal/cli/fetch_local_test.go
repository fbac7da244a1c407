package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// TestRunsFetchOfALocalRun: runs fetch of a run made by one process,
// whose cells wrote their directories in place and stored nothing, says
// there is nothing to fetch and where the cells already are, rather than
// "0 cell outputs written".
func TestRunsFetchOfALocalRun(t *testing.T) {
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeRoot(t, harborTask("ok", "version = \"1.0\"\n", nil))
	out := t.TempDir()
	js := filepath.Join(out, "a.json")
	mustProctor(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "command:true", "--output-dir", out, "--out-json", js)
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	got := mustProctor(t, "runs", "fetch", a.Run.ID)
	if !strings.Contains(got, "no cell has a stored output, so there is nothing to fetch") || !strings.Contains(got, filepath.Join(out, a.Run.ID)) {
		t.Errorf("runs fetch of a local run:\n%s", got)
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestNoAttemptOneRule: an agent that does nothing (exits 3 without a
// word) made no attempt, on a single-step task and on a multi-step one
// alike: both cells are errored solver_error (out of the pass rate),
// neither is scored 0, and no verifier runs for either (the multi-step
// cell was a scored 0 before, its steps verified).
func TestNoAttemptOneRule(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()
	zero := "#!/bin/bash\necho ran > /logs/verifier/ran\necho 0 > /logs/verifier/reward.txt\n"
	writeTree(t, root, map[string]string{
		"one-step/task.toml":                 "[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n[agent]\ntimeout_sec = 60\n",
		"one-step/instruction.md":            "Write hello.\n",
		"one-step/solution/solve.sh":         "#!/bin/bash\ntrue\n",
		"one-step/tests/test.sh":             zero,
		"two-step/task.toml":                 "[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n[agent]\ntimeout_sec = 60\n[[steps]]\nname = \"a\"\n[[steps]]\nname = \"b\"\n",
		"two-step/steps/a/instruction.md":    "Step a.\n",
		"two-step/steps/a/solution/solve.sh": "#!/bin/bash\ntrue\n",
		"two-step/steps/a/tests/test.sh":     zero,
		"two-step/steps/b/instruction.md":    "Step b.\n",
		"two-step/steps/b/solution/solve.sh": "#!/bin/bash\ntrue\n",
		"two-step/steps/b/tests/test.sh":     zero,
	})
	silent := "agent:" + abs(t, "testdata/agents/silent")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", silent, "--concurrency", "2")
	rows := byCell(a)
	for _, name := range []string{"one-step", "two-step"} {
		r, ok := rows[name+" "+silent]
		if !ok {
			t.Errorf("%s: no row", name)
			continue
		}
		if r.Outcome != "errored" || r.ErrorClass != "solver_error" || !r.Metrics.SolverError || r.Reward != nil ||
			!strings.Contains(r.Error, "made no attempt") {
			t.Errorf("%s: outcome %s class %q reward %v error %q; want errored solver_error (no attempt)", name, r.Outcome, r.ErrorClass, ptrStr(r.Reward), r.Error)
		}
		_ = filepath.WalkDir(r.OutputDir, func(p string, d os.DirEntry, err error) error {
			if err == nil && (d.Name() == "verifier.log" || d.Name() == "ran") {
				t.Errorf("%s: a verifier ran for a solve without an attempt (%s)", name, p)
			}
			return nil
		})
	}
	if s := a.Summary.PerHarness[silent]; s == nil || s.Errored != 2 || s.Scored != 0 {
		t.Errorf("summary %+v: want both cells errored, none scored", s)
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

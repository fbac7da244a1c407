package cli

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/stats"
)

// writeTasks makes n small Harbor tasks under a fresh root and returns it.
func writeTasks(t *testing.T, n int) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tasks")
	files := map[string]string{
		"task.toml":              "version = \"1.0\"\n\n[verifier]\ntimeout_sec = 30.0\n\n[agent]\ntimeout_sec = 30.0\n",
		"instruction.md":         "Do nothing.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "#!/bin/bash\ntrue\n",
		"tests/test.sh":          "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
	}
	for i := 1; i <= n; i++ {
		for name, body := range files {
			p := filepath.Join(root, "task-"+string(rune('a'+i-1)), name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// TestHolmFamilyEndToEnd is issue 9, item 1, through the real pipeline:
// six tasks, baseline `command:false`, arms `command:true` and an
// identical `command:false # same`. The identical arm's exact p is 1 and
// it stays in Holm's family: p [0.03125, 1] → p_adjusted [0.0625, 1],
// nothing significant; the paired intervals keep their width.
func TestHolmFamilyEndToEnd(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeTasks(t, 6)
	md := filepath.Join(t.TempDir(), "report.md")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all",
		"--harnesses", "command:false", "--harnesses", "command:true", "--harnesses", "command:false # same",
		"--baseline-harness", "command:false", "--out-md", md)
	for _, h := range []string{"command:false", "command:true", "command:false # same"} {
		if s := a.Summary.PerHarness[h]; s == nil || s.Scored != 6 {
			t.Fatalf("harness %q: %+v, want 6 scored cells", h, s)
		}
	}
	gain := a.Summary.Comparisons["command:true"].McNemar
	same := a.Summary.Comparisons["command:false # same"].McNemar
	if gain.NGained != 6 || same.NBothFailed != 6 {
		t.Fatalf("pair tables: true %+v, same %+v", gain, same)
	}
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("true p_exact", gain.PExact, 0.03125)
	check("same p_exact", same.PExact, 1)
	check("true p_adjusted", gain.PAdjusted, 0.0625)
	check("same p_adjusted", same.PAdjusted, 1)
	for name, m := range map[string]artifact.McNemar{"true": gain, "same": same} {
		if m.Significant == nil || *m.Significant || m.CorrectionFamilySize != 2 {
			t.Errorf("%s: significant %v, family size %d; want false, 2", name, m.Significant, m.CorrectionFamilySize)
		}
	}
	u6 := stats.Z95 * stats.Z95 / (6 + stats.Z95*stats.Z95)
	check("true ci_lo", gain.CILo, math.Round((1-math.Sqrt2*u6)*1e6)/1e6)
	check("true ci_hi", gain.CIHi, 1)
	check("same ci_lo", same.CILo, math.Round(-u6*1e6)/1e6)
	check("same ci_hi", same.CIHi, math.Round(u6*1e6)/1e6)

	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `command:true` | `command:false` | 6 (6) | 6 | 0 | 0 | 0 | 0 | +100.0 pp | +44.8 to +100.0 pp | 0.0312 | 0.0625 | no |",
		"| `command:false # same` | `command:false` | 6 (6) | 0 | 0 | 0 | 6 | 0 | +0.0 pp | -39.0 to +39.0 pp | 1 | 1 | no |",
		"Newcombe's hybrid score interval",
	} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

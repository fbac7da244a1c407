package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/subject"
)

// subjectDescriptor writes a descriptor whose suite is two tasks of root
// (and a skill directory as its ref), and returns its path.
func subjectDescriptor(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "skill"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "skill", "SKILL.md"), []byte("---\nname: s\ndescription: d\n---\n"), 0o644)
	p := filepath.Join(dir, "subject.toml")
	body := "baseline = \"command:false\"\n[subject]\nid = \"demo\"\nkind = \"skill\"\nref = \"skill\"\n[suite]\nproducts = [\"demo\"]\n" +
		"questions = [\"q1\", \"q2\"]\ntasks = { root = \"" + root + "\", names = [\"a\", \"b\"] }\n[[matrix.cells]]\nharness = \"command:true\"\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSubjectsRun: `subjects run` runs the descriptor's tasks through the
// pipeline (host command arms: no model, no image) and writes a
// schema-valid scorecard whose figures equal the artifact's; the
// questions are recorded as not run; --work-dry-run writes a scorecard
// from the planned artifact without running anything; a descriptor with
// tasks and neither --work-harnesses nor --skip-work is refused, and
// --skip-work writes a skipped scorecard.
func TestSubjectsRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeRoot(t, harborTask("b", "version = \"1.0\"\n", harborTask("a", "version = \"1.0\"\n", nil)))
	desc := subjectDescriptor(t, root)
	out := t.TempDir()

	_, errOut, code := proctor(t, "subjects", "run", desc, "--output-dir", out)
	if code != ExitUsage || !strings.Contains(errOut, "declares 2 tasks (suite.tasks)") || !strings.Contains(errOut, "--skip-work") {
		t.Fatalf("no --work-harnesses: exit %d, %s", code, errOut)
	}

	stdout := mustProctor(t, "subjects", "run", desc, "--output-dir", out,
		"--work-harnesses", "command:true", "--work-baseline-harness", "command:false")
	sc := readScorecard(t, filepath.Join(out, "demo.scorecard.json"))
	if !strings.Contains(stdout, "work ran") || sc.Work.Status != subject.WorkRan || sc.Questions.Count != 2 || sc.Questions.Status != "not_run" {
		t.Fatalf("stdout %s\nscorecard %+v", stdout, sc)
	}
	a, err := artifact.Read(sc.Work.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sc.Work.Report); err != nil {
		t.Errorf("report: %v", err)
	}
	for h, s := range a.Summary.PerHarness {
		r := sc.Work.PerHarness[h]
		if r.N != s.N || r.Passed != s.Passed || r.Scored != s.Scored || *r.PassRate != *s.PassRate {
			t.Errorf("%s: scorecard %+v, artifact %+v", h, r, s)
		}
	}
	if r := sc.Work.PerHarness["command:true"]; r.N != 2 || r.Passed != 2 || sc.Work.PerHarness["command:false"].Passed != 0 {
		t.Errorf("per harness %+v", sc.Work.PerHarness)
	}
	c, ac := sc.Work.Comparisons["command:true"], a.Summary.Comparisons["command:true"]
	if ac == nil || c.Baseline != "command:false" || *c.PassRateDelta != *ac.PassRateDelta || *c.PassRateDelta != 1 || sc.Work.BaselineHarness != "command:false" {
		t.Errorf("comparison %+v, artifact %+v", c, ac)
	}
	page, _ := os.ReadFile(filepath.Join(out, "demo.scorecard.md"))
	if !strings.Contains(string(page), "| `command:true` | 2 | 0 | 0 | 2 | 2 | 1 |") || !strings.Contains(string(page), "## Questions: not_run") {
		t.Errorf("page:\n%s", page)
	}

	dry := filepath.Join(t.TempDir(), "dry.json")
	mustProctor(t, "subjects", "run", desc, "--output-dir", t.TempDir(), "--out-json", dry, "--work-harnesses", "command:true", "--work-dry-run")
	sc = readScorecard(t, dry)
	if sc.Work.Status != subject.WorkDryRun || sc.Work.PerHarness["command:true"].Planned != 2 || sc.Work.PerHarness["command:true"].Scored != 0 {
		t.Errorf("dry run scorecard %+v", sc.Work)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(sc.Work.Artifact), "a")); err == nil {
		t.Error("the dry run wrote cell directories")
	}

	skip := filepath.Join(t.TempDir(), "skip.json")
	mustProctor(t, "subjects", "run", desc, "--out-json", skip, "--skip-work")
	if sc = readScorecard(t, skip); sc.Work.Status != subject.WorkSkipped || sc.Work.Reason != "--skip-work" || sc.Work.Artifact != "" {
		t.Errorf("skipped scorecard %+v", sc.Work)
	}
}

func readScorecard(t *testing.T, p string) subject.Scorecard {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := subject.Validate(b); err != nil {
		t.Fatal(err)
	}
	var sc subject.Scorecard
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestSeedNamesRun runs the seed's own spellings end to end in Docker:
// the oracle as docker-oracle, the custom wrapper as a bare command with
// --command-template, and a baseline that --harnesses does not list; the
// rows keep the names typed, with their canonical harness_kind, and the
// oracle's row is scored by the task's verifier.
func TestSeedNamesRun(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	a, _ := runMain(t, "tasks", "run", "--tasks-root", examplesRoot(t), "--tasks", "fix-sum",
		"--harnesses", "docker-oracle,command", "--command-template", "bash commands/has-solution.sh {task_path} {output_dir}",
		"--baseline-harness", "command:true")
	rows := byCell(a)
	o, c, b := rows["fix-sum docker-oracle"], rows["fix-sum command:bash commands/has-solution.sh {task_path} {output_dir}"], rows["fix-sum command:true"]
	if o.Outcome != "passed" || o.HarnessKind != "oracle" || c.HarnessKind != "command" || c.Outcome == "" || b.HarnessKind != "command" || b.Outcome != "passed" {
		t.Fatalf("rows: oracle %s/%s, command %s/%s, baseline %s/%s", o.Outcome, o.HarnessKind, c.Outcome, c.HarnessKind, b.Outcome, b.HarnessKind)
	}
	if _, ok := a.Summary.Comparisons["docker-oracle"]; ok || a.Run.BaselineHarness != "command:true" {
		t.Errorf("the oracle's rows were compared, or the baseline is not the one added: %+v", a.Run)
	}
}

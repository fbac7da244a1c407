package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/verify"
)

// TestArtifactsCollected runs two tasks with the oracle (real Docker):
// a single-step task whose artifacts (a file, a directory with a
// destination and an exclude pattern, a symlink the solve planted, a path
// that does not exist, one of a compose service it does not have) land in
// the cell's artifacts/ after the verifier with a manifest saying what
// became of each, the symlink stored as a link and never followed; and a
// two-step task whose task-level artifact and a step's own artifact land
// in steps/<name>/artifacts/. (Before, a single-step task's artifacts were
// never collected and a step's artifacts key was an unknown one.)
func TestArtifactsCollected(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()
	pass := "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
	writeTree(t, filepath.Join(root, "single"), map[string]string{
		"task.toml": "version = \"1.0\"\nartifacts = [\"/app/report.txt\", {source = \"/app/out\", destination = \"bundle\", exclude = [\"*.tmp\"]}," +
			" \"/app/link\", \"/app/missing.txt\", {source = \"/srv/db.log\", service = \"db\"}]\n" +
			"[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n",
		"instruction.md": "Report.\n",
		"solution/solve.sh": "mkdir -p /app/out/sub && echo report > /app/report.txt && echo keep > /app/out/sub/a.txt && echo drop > /app/out/b.tmp\n" +
			"ln -s /etc/passwd /app/link\n",
		"tests/test.sh": pass,
	})
	writeTree(t, filepath.Join(root, "stepped"), map[string]string{
		"task.toml": "schema_version = \"1.1\"\nartifacts = [\"/app/log.txt\"]\n[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n" +
			"[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\nartifacts = [{source = \"/app/two.txt\", destination = \"result/two.txt\"}]\n",
		"steps/one/instruction.md":    "One.\n",
		"steps/one/solution/solve.sh": "echo one >> /app/log.txt\n",
		"steps/one/tests/test.sh":     pass,
		"steps/two/instruction.md":    "Two.\n",
		"steps/two/solution/solve.sh": "echo two >> /app/log.txt && echo two > /app/two.txt\n",
		"steps/two/tests/test.sh":     pass,
	})
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle")
	rows := byCell(a)
	single, stepped := rows["single oracle"], rows["stepped oracle"]
	if single.Outcome != "passed" || stepped.Outcome != "passed" {
		t.Fatalf("outcomes %s (%s), %s (%s)", single.Outcome, single.Error, stepped.Outcome, stepped.Error)
	}
	art := filepath.Join(single.OutputDir, verify.ArtifactsDir)
	for rel, want := range map[string]string{"app/report.txt": "report\n", "bundle/sub/a.txt": "keep\n"} {
		if b, err := os.ReadFile(filepath.Join(art, rel)); err != nil || string(b) != want {
			t.Errorf("artifacts/%s: %q %v, want %q", rel, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(art, "bundle", "b.tmp")); !os.IsNotExist(err) {
		t.Errorf("the excluded bundle/b.tmp was kept: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(art, "app", "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("artifacts/app/link is not stored as a link: %v %v", fi, err)
	}
	var recs []verify.ArtifactRecord
	b, err := os.ReadFile(filepath.Join(art, "manifest.json"))
	if err != nil || json.Unmarshal(b, &recs) != nil {
		t.Fatalf("manifest: %v\n%s", err, b)
	}
	status := map[string]string{}
	for _, r := range recs {
		status[r.Source] = r.Status
	}
	for src, want := range map[string]string{"/app/report.txt": "collected", "/app/out": "collected", "/app/link": "collected",
		"/app/missing.txt": "missing", "/srv/db.log": "not collected"} {
		if status[src] != want {
			t.Errorf("manifest: %s %q, want %q (%s)", src, status[src], want, b)
		}
	}
	for step, files := range map[string]map[string]string{
		"one": {"app/log.txt": "one\n"},
		"two": {"app/log.txt": "one\ntwo\n", "result/two.txt": "two\n"},
	} {
		for rel, want := range files {
			p := filepath.Join(stepped.OutputDir, "steps", step, verify.ArtifactsDir, rel)
			if b, err := os.ReadFile(p); err != nil || string(b) != want {
				t.Errorf("step %s artifacts/%s: %q %v, want %q", step, rel, b, err, want)
			}
		}
	}
}

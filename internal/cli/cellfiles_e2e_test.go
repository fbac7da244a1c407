package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// agentDir writes an agent directory whose agent.sh is script.
func agentDir(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.toml"), []byte("run = \"bash /opt/proctor/agent/agent.sh\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.sh"), []byte("#!/bin/bash\nset -eu\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRecompileAndCellFiles runs examples/recompile/sum-cpp, whose
// instruction names its build command, in real containers through the
// oracle and four agents, each of them hostile in its own way:
//
//   - stale-binary (examples/agents) leaves a program that prints the
//     expected answer beside a source that does not compute it: the
//     recompile replaces the program and the verifier fails the cell
//     (without the recompile it would pass);
//   - never-built writes a right source and never builds it: the
//     recompile builds it and the cell passes;
//   - broken-build leaves a program that prints the expected answer and a
//     source that does not compile: the program is removed, the build
//     fails (metrics.recompile_failed, the compiler's output tail) and the
//     cell is scored as the verifier finds it, failed, not errored;
//   - tree plants symlinks to /etc and /tests and a 300 MiB file in its
//     working tree: the links into /tests go with the solve's epilogue,
//     work/ stores the link to /etc as a link (never followed) and the
//     cap leaves the huge file out, recorded in metrics.work_tree, while
//     a small file after it is copied.
//
// Every agent cell has the seed's files: prompt.txt, solver.json (its
// final claim) and work/ (the tree as the agent left it, before the
// recompile).
func TestRecompileAndCellFiles(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	stale := "agent:" + abs(t, "../../examples/agents/stale-binary")
	neverBuilt := "agent:" + agentDir(t, "printf '// prints: 189\\nint main() {}\\n' > /app/answer.cpp\necho 'Wrote the source.'\n")
	broken := "agent:" + agentDir(t, "printf 'int main( {\\n' > /app/answer.cpp\nprintf '#!/bin/sh\\necho 189\\n' > /app/answer\nchmod +x /app/answer\necho 'The task is solved.'\n")
	tree := "agent:" + agentDir(t, `printf '// prints: 189\n' > /app/answer.cpp
ln -s /etc /app/etc-link
ln -s /tests /app/tests-link
ln -s /tests/test.sh /app/test-link
head -c 314572800 /dev/zero > /app/huge.bin
mkdir -p /app/sub && echo kept > /app/sub/z-small.txt
echo 'Done.'
`)
	a, out := runMain(t, "tasks", "run", "--tasks-root", abs(t, "../../examples/recompile"), "--all",
		"--harnesses", strings.Join([]string{"oracle", stale, neverBuilt, broken, tree}, ","))
	rows := byCell(a)
	row := func(h string) artifact.Result {
		r, ok := rows["sum-cpp "+h]
		if !ok {
			t.Fatalf("no row for %s", h)
		}
		return r
	}
	for h, want := range map[string]string{"oracle": "passed", stale: "failed", neverBuilt: "passed", broken: "failed", tree: "passed"} {
		if r := row(h); r.Outcome != want {
			t.Errorf("%s: %s (%s), want %s; recompile %+v", h, r.Outcome, r.Error, want, r.Metrics.Recompile)
		}
	}
	if r := row("oracle"); r.Metrics.Recompile != nil || r.Metrics.WorkTree != nil {
		t.Errorf("the oracle was recompiled or copied: %+v %+v", r.Metrics.Recompile, r.Metrics.WorkTree)
	}
	for _, h := range []string{stale, neverBuilt, tree} {
		rc := row(h).Metrics.Recompile
		if rc == nil || rc.Failed || row(h).Metrics.RecompileFailed || len(rc.Commands) != 1 || rc.Commands[0] != "g++ -O2 -o /app/answer /app/answer.cpp" {
			t.Errorf("%s recompile: %+v", h, rc)
		}
	}
	b := row(broken)
	if !b.Metrics.RecompileFailed || b.Metrics.Recompile == nil || !strings.Contains(b.Metrics.Recompile.OutputTail, "error") || b.Metrics.Recompile.ExitCode == 0 {
		t.Errorf("broken-build recompile: %v %+v", b.Metrics.RecompileFailed, b.Metrics.Recompile)
	}
	if log, err := os.ReadFile(filepath.Join(b.OutputDir, "recompile.log")); err != nil || !strings.Contains(string(log), "expected a '// prints: ' line") {
		t.Errorf("recompile.log: %q %v", log, err)
	}
	if s := row(stale); s.AgentClaim == nil || !s.Overclaimed() {
		t.Errorf("stale-binary claim: %+v", s.AgentClaim)
	}

	// The seed's files of every agent cell; work/ is the agent's tree,
	// before the recompile (the stale program is the agent's own).
	for _, h := range []string{stale, neverBuilt, broken, tree} {
		dir := row(h).OutputDir
		if p, err := os.ReadFile(filepath.Join(dir, "prompt.txt")); err != nil || !strings.Contains(string(p), "g++ -O2 -o /app/answer /app/answer.cpp") {
			t.Errorf("%s prompt.txt: %q %v", h, p, err)
		}
		var sj map[string]any
		if raw, err := os.ReadFile(filepath.Join(dir, "solver.json")); err != nil || json.Unmarshal(raw, &sj) != nil {
			t.Errorf("%s solver.json: %s %v", h, raw, err)
		}
		if _, ok := sj["result"].(string); !ok {
			t.Errorf("%s solver.json has no result: %v", h, sj)
		}
		if _, err := os.Stat(filepath.Join(dir, "work", "answer.cpp")); err != nil {
			t.Errorf("%s work/answer.cpp: %v", h, err)
		}
		if wt := row(h).Metrics.WorkTree; wt == nil || wt.Path != "/app" || wt.Files < 2 || wt.Error != "" {
			t.Errorf("%s work_tree: %+v", h, wt)
		}
	}
	if sj, _ := os.ReadFile(filepath.Join(row(stale).OutputDir, "solver.json")); !strings.Contains(string(sj), "The task is solved.") {
		t.Errorf("stale-binary solver.json lacks its claim: %s", sj)
	}
	if bin, err := os.ReadFile(filepath.Join(row(stale).OutputDir, "work", "answer")); err != nil || !strings.Contains(string(bin), "echo 189") {
		t.Errorf("work/answer is not the agent's own program: %q %v", bin, err)
	}

	td := row(tree).OutputDir
	// The links into /tests were removed by the solve's epilogue before
	// the copy (isolation.grader_links_removed); the link to /etc is kept
	// as a link and never followed.
	if n, _ := row(tree).Metrics.Isolation["grader_links_removed"].(float64); n != 2 {
		t.Errorf("grader links removed: %v", row(tree).Metrics.Isolation["grader_links_removed"])
	}
	for _, link := range []string{"tests-link", "test-link"} {
		if _, err := os.Lstat(filepath.Join(td, "work", link)); err == nil {
			t.Errorf("work/%s: a link into the graders is in work/", link)
		}
	}
	for link, target := range map[string]string{"etc-link": "/etc"} {
		p := filepath.Join(td, "work", link)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("work/%s: %v %v, want a symlink", link, fi, err)
			continue
		}
		if got, _ := os.Readlink(p); got != target {
			t.Errorf("work/%s -> %q, want %q", link, got, target)
		}
	}
	if _, err := os.Lstat(filepath.Join(td, "work", "huge.bin")); err == nil {
		t.Error("work/huge.bin was copied over the cap")
	}
	if b, err := os.ReadFile(filepath.Join(td, "work", "sub", "z-small.txt")); err != nil || string(b) != "kept\n" {
		t.Errorf("a small file after the huge one: %q %v", b, err)
	}
	wt := row(tree).Metrics.WorkTree
	if wt == nil || !wt.Truncated || wt.SkippedBytes != 314572800 || len(wt.Skipped) != 1 || !strings.HasPrefix(wt.Skipped[0], "/app/huge.bin (") ||
		wt.Symlinks != 1 || wt.Bytes > wt.CapBytes {
		t.Errorf("tree work_tree: %+v", wt)
	}
	if log, _ := os.ReadFile(filepath.Join(td, "run.log")); !strings.Contains(string(log), "work/: the cap") {
		t.Errorf("run.log does not record the cut:\n%s", log)
	}
	_ = out
}

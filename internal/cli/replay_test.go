package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// proctor runs Main in-process and returns its stdout, stderr and exit code.
func proctor(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := mainT(t, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// mustProctor is proctor that fails the test on a non-zero exit.
func mustProctor(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := proctor(t, args...)
	if code != 0 {
		t.Fatalf("proctor %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// copyDir copies a directory tree of regular files.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplayExportImport runs the examples, then checks that the run
// index lists the run; that replay gives the artifact's and the report's
// bytes from the store, from a copy of the store in another PROCTOR_HOME,
// and from a jsonl export imported into a fresh PROCTOR_HOME; and that the
// dataset export writes a row per cell.
func TestReplayExportImport(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	home, out := t.TempDir(), t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	js, md := filepath.Join(out, "a.json"), filepath.Join(out, "r.md")
	mustProctor(t, "tasks", "run", "--tasks-root", examplesRoot(t), "--all", "--harnesses", "oracle",
		"--output-dir", out, "--out-json", js, "--out-md", md)
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	id := a.Run.ID
	wantJS, wantMD := readFile(t, js), readFile(t, md)
	for _, r := range a.Results {
		if r.Outcome != artifact.OutcomePassed {
			t.Logf("%s: %s (%s) %s", r.CellID, r.Outcome, r.ErrorClass, r.Error) // what went wrong when the counts below differ
		}
	}

	// The run index.
	list := mustProctor(t, "runs", "list", "--wide")
	if !strings.Contains(list, id) || !strings.Contains(list, "finished") || !strings.Contains(list, "6 passed, 1 verifier_timeout, 1 verifier_error, 1 errored") || !strings.Contains(list, js) {
		t.Errorf("runs list:\n%s", list)
	}
	var v runView
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "show", id[:12], "--json", "--cells")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ID != id || v.Status != bus.StatusFinished || v.Artifact != js || v.Report != md || v.Cells != 9 || v.StartedAt == "" || v.FinishedAt == "" ||
		v.States["passed"] != 6 || v.CellStates["slow-check/oracle/default/1"] != "verifier_timeout" || v.Stale ||
		len(v.Progress) != 1 || v.Progress[0].Done != 9 || v.Progress[0].Passed != 6 || v.Progress[0].Errored != 2 {
		t.Errorf("runs show: %+v", v)
	}
	if show := mustProctor(t, "runs", "show", id); !strings.Contains(show, "oracle: 9/9 done, 0 running, 0 queued, 2 errored, pass rate 6/7 = 85.7 %") {
		t.Errorf("runs show:\n%s", show)
	}
	// An errored cell says why beside its state, as its row holds it.
	for _, r := range a.Results {
		if !r.Errored() {
			continue
		}
		if r.ErrorClass == "" && r.Error == "" {
			continue
		}
		want := "cell       " + r.CellID + " " + r.Outcome + " (" + orDash(r.ErrorClass) + "): "
		if show := mustProctor(t, "runs", "show", id, "--cells"); !strings.Contains(show, want) || v.CellErrors[r.CellID] == "" {
			t.Errorf("runs show --cells: no %q:\n%s", want, show)
		}
	}

	// Replay from the store, to files and to stdout.
	rj, rm := filepath.Join(out, "replay.json"), filepath.Join(out, "replay.md")
	mustProctor(t, "replay", id, "--out-json", rj, "--out-md", rm)
	if !bytes.Equal(readFile(t, rj), wantJS) || !bytes.Equal(readFile(t, rm), wantMD) {
		t.Fatal("replay of a finished run differs from its artifact or report")
	}
	if got := mustProctor(t, "replay", id); got != string(wantJS) {
		t.Fatal("replay to stdout differs from the artifact")
	}

	// Exports of the raw log.
	evJSONL, evParquet := filepath.Join(out, "events.jsonl"), filepath.Join(out, "events.parquet")
	mustProctor(t, "events", "export", id, "--format", "jsonl", "--out", evJSONL)
	mustProctor(t, "events", "export", id, "--format", "parquet", "--out", evParquet)
	if b := readFile(t, evParquet); !bytes.HasPrefix(b, []byte("PAR1")) || !bytes.HasSuffix(b, []byte("PAR1")) {
		t.Errorf("events.parquet is not a Parquet file (%d bytes)", len(b))
	}
	if _, errOut, code := proctor(t, "events", "export", id, "--format", "csv"); code != ExitUsage || !strings.Contains(errOut, "jsonl, parquet") {
		t.Errorf("bad format: exit %d, %s", code, errOut)
	}

	// Datasets from the artifact and from the log.
	ds := filepath.Join(out, "ds")
	mustProctor(t, "dataset", "export", "--kind", "task_runs", "--input", js, "--out-dir", ds, "--format", "jsonl")
	if n := bytes.Count(readFile(t, filepath.Join(ds, "task_runs.jsonl")), []byte("\n")); n != 9 {
		t.Errorf("task_runs.jsonl has %d rows, want 9", n)
	}
	fromLog := filepath.Join(out, "ds-log")
	mustProctor(t, "dataset", "export", "--run", id, "--out-dir", fromLog, "--format", "jsonl")
	if !bytes.Equal(readFile(t, filepath.Join(fromLog, "task_runs.jsonl")), readFile(t, filepath.Join(ds, "task_runs.jsonl"))) {
		t.Error("the dataset of the replayed run differs from the artifact's")
	}
	hf := mustProctor(t, "dataset", "export", "--input", js, "--out-dir", filepath.Join(out, "hf"), "--format", "hf")
	for _, f := range []string{"data-00000-of-00001.arrow", "dataset_info.json", "state.json"} {
		if !strings.Contains(hf, f) {
			t.Errorf("hf export printed %q, missing %s", hf, f)
		}
	}

	// A copy of the store, moved to another PROCTOR_HOME (no proctor runs).
	moved := t.TempDir()
	copyDir(t, filepath.Join(home, "jetstream"), filepath.Join(moved, "jetstream"))
	setenv(t, "PROCTOR_HOME", moved)
	if got := mustProctor(t, "replay", id); got != string(wantJS) {
		t.Fatal("replay from a copied store differs from the artifact")
	}

	// The jsonl export imported on a machine that never saw the run.
	setenv(t, "PROCTOR_HOME", t.TempDir())
	if _, _, code := proctor(t, "replay", id); code != ExitError {
		t.Fatalf("replay of an unknown run: exit %d", code)
	}
	if imp := mustProctor(t, "events", "import", evJSONL); !strings.Contains(imp, "imported run "+id+" (finished): 9 cells") {
		t.Errorf("import: %s", imp)
	}
	if got := mustProctor(t, "replay", id); got != string(wantJS) {
		t.Fatal("replay of the imported log differs from the artifact")
	}
	mustProctor(t, "replay", id, "--out-md", rm)
	if !bytes.Equal(readFile(t, rm), wantMD) {
		t.Fatal("report of the imported log differs")
	}
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "show", id, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != bus.StatusFinished || v.Counts["passed"] != 6 || v.Spec.TasksRoot != a.Run.TasksRoot || v.StartedAt != a.Run.StartedAt || v.FinishedAt != a.Run.FinishedAt {
		t.Errorf("imported record: %+v", v.RunRecord)
	}
	if _, errOut, code := proctor(t, "events", "import", evJSONL); code == 0 || !strings.Contains(errOut, "already in the log") {
		t.Errorf("second import: exit %d, %s", code, errOut)
	}
}

// startRun starts `proctor tasks run` as a subprocess and returns it with
// the run id it printed. Its stderr is drained in the background.
func startRun(t *testing.T, bin, home string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"tasks", "run"}, args...)...)
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var runID string
	for sc.Scan() {
		if m := runIDRe.FindStringSubmatch(sc.Text()); m != nil {
			runID = m[1]
			break
		}
	}
	if runID == "" {
		t.Fatal("no run id on stderr")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return cmd, runID
}

// waitCells polls `proctor runs show` (through the running process's
// server) until ok accepts the cell states, for 2 minutes at most.
func waitCells(t *testing.T, runID string, ok func(map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var v runView
	for {
		out, _, code := proctor(t, "runs", "show", runID, "--json", "--cells")
		if code == 0 && json.Unmarshal([]byte(out), &v) == nil && ok(v.CellStates) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cells never reached the state wanted: %v", v.CellStates)
		}
		time.Sleep(200 * time.Millisecond) // polling the log, not synchronising on time
	}
}

// TestReplayAfterKill kills a run with SIGKILL once one cell has its
// verdict and another is still solving, then replays the store the dead
// process left: the finished cell keeps its outcome, the other is an
// errored row. gc then removes what the killed run left: its containers
// and its host staging directory (where a cell stages its provider env
// file), and nothing of another store's run.
func TestReplayAfterKill(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	t.Setenv("TMPDIR", t.TempDir()) // this test's own staging root
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	t.Setenv("PROCTOR_HOME", home)
	root, _ := filepath.Abs("testdata/replay-root")
	cmd, runID := startRun(t, bin, home, "--tasks-root", root, "--tasks", "quick,sleepy", "--harnesses", "oracle", "--output-dir", out)
	t.Cleanup(func() { proctor(t, "gc", "--run", runID) })
	waitCells(t, runID, func(s map[string]string) bool {
		return s["quick/oracle/default/1"] == "passed" && s["sleepy/oracle/default/1"] == "running"
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	var v runView
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "show", runID, "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if !v.Stale || v.Status != bus.StatusRunning {
		t.Errorf("the dead run is not marked stale: status %q stale %v", v.Status, v.Stale)
	}
	js := filepath.Join(out, "replay.json")
	mustProctor(t, "replay", runID, "--out-json", js)
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]artifact.Result{}
	for _, r := range a.Results {
		got[r.Task] = r
	}
	if r := got["quick"]; r.Outcome != "passed" || r.Reward == nil || *r.Reward != 1 {
		t.Errorf("quick: %+v", r)
	}
	if r := got["sleepy"]; r.Outcome != "errored" || r.ErrorClass != "infra" || r.Reward != nil {
		t.Errorf("sleepy: %+v", r)
	}
	if len(a.Results) != 2 || a.Run.FinishedAt != "" {
		t.Errorf("%d rows, finished_at %q", len(a.Results), a.Run.FinishedAt)
	}
	// watch on the dead run prints what the log holds and says why it ends.
	wout, werr, code := proctor(t, "watch", runID)
	if code != ExitError || !strings.Contains(werr, "has not finished") || !strings.Contains(wout, "oracle: 1/2 done, 1 running") {
		t.Errorf("watch of a dead run: exit %d\n%s\n%s", code, wout, werr)
	}
	// gc without --run finds the killed run dead (it is stale: no other
	// process holds the store) and removes what it left, and nothing of
	// the runs of other stores on the engine (other tests' runs, here).
	if c, _ := leftovers(t, cli, runID); c == 0 {
		t.Fatal("the killed run left no container: the check below proves nothing")
	}
	other := events.NewID() // a run of another store on the same engine
	oc, err := cli.ContainerCreate(context.Background(), &container.Config{Image: "debian:bookworm-slim", Cmd: []string{"true"},
		Labels: map[string]string{sandbox.LabelManaged: "1", sandbox.LabelRun: other}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), oc.ID, container.RemoveOptions{Force: true}) })
	// What a cell of the killed run staged for its sandbox (a provider
	// env file), and what a run of another store staged.
	stage, err := harness.StageDir(runID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, "provider.env"), []byte("export ANTHROPIC_API_KEY='sk-test'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherStage, err := harness.StageDir(other)
	if err != nil {
		t.Fatal(err)
	}
	gout := mustProctor(t, "gc")
	if !strings.Contains(gout, "removed 1 container and 0 networks") {
		t.Errorf("gc: %q, want the killed run's container removed", gout)
	}
	if _, err := os.Stat(stage); !os.IsNotExist(err) || !strings.Contains(gout, "removed 1 host staging directory") {
		t.Errorf("gc: %q; the killed run's staging directory: %v, want it removed", gout, err)
	}
	if _, err := os.Stat(otherStage); err != nil {
		t.Errorf("gc removed the staging directory of a run this store does not know: %v", err)
	}
	if c, n := leftovers(t, cli, runID); c+n != 0 {
		t.Errorf("%d containers and %d networks of the killed run remain after gc", c, n)
	}
	if c, _ := leftovers(t, cli, other); c != 1 {
		t.Errorf("gc removed the container of a run this store does not know")
	}
}

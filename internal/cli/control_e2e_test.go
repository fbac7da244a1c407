package cli

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// TestRunsControlFromAnotherProcess: while `tasks run` runs a slow cell in
// its container (real Docker, the embedded store), other proctor
// processes pause the run (`runs show` says so, with the reason), cancel
// the running cell (its container removed at once, the held cells not
// started) and then cancel the run: `tasks run` ends non-zero naming who
// cancelled and why, every row is errored (cancelled), nothing of the run
// is left on the engine, and a replay gives the artifact's bytes.
func TestRunsControlFromAnotherProcess(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	start := time.Now()
	bin := buildProctor(t)
	t.Logf("binary at %.1f s", time.Since(start).Seconds())
	out := t.TempDir()
	home := t.TempDir()
	root, _ := filepath.Abs("testdata/slow-root")
	js := filepath.Join(out, "a.json")
	env := append(os.Environ(), "PROCTOR_HOME="+home)
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--repeats", "3",
		"--concurrency", "1", "--output-dir", out, "--out-json", js)
	cmd.Env = env
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var runID string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := runIDRe.FindStringSubmatch(sc.Text()); m != nil {
			runID = m[1]
			break
		}
	}
	if runID == "" {
		t.Fatal("no run id on stderr")
	}
	var progress testutil.SyncBuffer
	go func() {
		for sc.Scan() {
			progress.Write([]byte(sc.Text() + "\n"))
		}
	}()
	proctor := func(args ...string) string {
		t.Helper()
		c := exec.Command(bin, args...)
		c.Env = env
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("proctor %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	// The first cell to start its solve (a node takes its cells in no
	// fixed order) is the one the test cancels; the others are held.
	first, rest := "", []string(nil)
	deadline := time.Now().Add(3 * time.Minute)
	for first == "" {
		if c, _ := leftovers(t, cli, runID); c > 0 {
			for _, r := range []string{"1", "2", "3"} {
				if b, err := os.ReadFile(filepath.Join(out, runID, "slow-solve", "oracle", "default", r, "solve.log")); err == nil && bytes.Contains(b, []byte("started")) {
					first = "slow-solve/oracle/default/" + r
				}
			}
		}
		if first != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first cell never started")
		}
		time.Sleep(100 * time.Millisecond) // polling the engine, not synchronising on time
	}
	t.Logf("first cell running at %.1f s", time.Since(start).Seconds())
	proctor("runs", "pause", runID, "--why", "hold on")
	if show := proctor("runs", "show", runID); !strings.Contains(show, "status     running (paused)\n") || !strings.Contains(show, "hold on") {
		t.Errorf("runs show of a paused run:\n%s", show)
	}
	proctor("runs", "cancel", runID, "--cell", first, "--why", "stuck")
	for {
		if c, n := leftovers(t, cli, runID); c+n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancelled cell's container is still there")
		}
		time.Sleep(100 * time.Millisecond) // polling the engine
	}
	t.Logf("cancelled cell's container gone at %.1f s", time.Since(start).Seconds())
	show := proctor("runs", "show", runID, "--cells")
	for _, r := range []string{"1", "2", "3"} {
		if id := "slow-solve/oracle/default/" + r; id != first {
			rest = append(rest, id+" queued")
		}
	}
	for _, want := range append([]string{first + " errored"}, rest...) {
		if !strings.Contains(show, want) {
			t.Errorf("runs show --cells lacks %q:\n%s", want, show)
		}
	}
	proctor("runs", "cancel", runID, "--why", "not today")
	err = cmd.Wait()
	t.Logf("tasks run ended at %.1f s", time.Since(start).Seconds())
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("tasks run: %v, want exit 1\n%s", err, progress.String())
	}
	if !strings.Contains(stdout.String(), "cancelled") {
		t.Errorf("tasks run stdout: %s", stdout.String())
	}
	if !strings.Contains(progress.String(), "control: ") {
		t.Errorf("tasks run's progress shows no control action:\n%s", progress.String())
	}
	if c, n := leftovers(t, cli, runID); c+n != 0 {
		t.Fatalf("%d containers and %d networks of run %s remain", c, n, runID)
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range a.Results {
		why := "not today"
		if r.CellID == first {
			why = "stuck"
		}
		if r.Outcome != "errored" || r.ErrorClass != "cancelled" || !strings.HasSuffix(r.Error, ": "+why) {
			t.Errorf("row %s: %s (%s) %q", r.CellID, r.Outcome, r.ErrorClass, r.Error)
		}
	}
	if len(a.Results) != 3 {
		t.Errorf("%d rows", len(a.Results))
	}
	rc := exec.Command(bin, "replay", runID)
	rc.Env = env
	replayedB, err := rc.Output()
	if err != nil {
		t.Fatal(err)
	}
	replayed := string(replayedB)
	written, _ := os.ReadFile(js)
	if strings.TrimSpace(replayed) != strings.TrimSpace(string(written)) {
		_ = os.WriteFile(filepath.Join(out, "replayed.json"), []byte(replayed), 0o644)
		d, _ := exec.Command("diff", js, filepath.Join(out, "replayed.json")).CombinedOutput()
		t.Errorf("replay differs from the artifact:\n%s", d)
	}
}

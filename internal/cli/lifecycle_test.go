package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// proc is a proctor process started by a lifecycle test, in its own
// process group so a SIGKILL takes its host commands with it.
type proc struct {
	cmd    *exec.Cmd
	stderr *testutil.SyncBuffer
	stdout *testutil.SyncBuffer
	runID  chan string
	done   chan error
}

func startProctor(t *testing.T, bin, home string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stderr: &testutil.SyncBuffer{}, stdout: &testutil.SyncBuffer{},
		runID: make(chan string, 1), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout = p.stdout
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
	go func() {
		sc := bufio.NewScanner(pipe)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.stderr.Write([]byte(line + "\n"))
			if m := runIDRe.FindStringSubmatch(line); m != nil && !sent && strings.Contains(line, "→") {
				p.runID <- m[1]
				sent = true
			}
		}
		p.done <- p.cmd.Wait()
	}()
	return p
}

// wait returns the process's exit code, failing the test after d.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("proctor %v did not end within %v; stderr:\n%s", p.cmd.Args[1:], d, p.stderr.String())
	}
	return -1
}

func (p *proc) id(t *testing.T) string {
	t.Helper()
	select {
	case id := <-p.runID:
		return id
	case <-time.After(2 * time.Minute):
		t.Fatalf("no run id on stderr:\n%s", p.stderr.String())
	}
	return ""
}

// kill9 SIGKILLs the process and its host commands, as an operator's
// kill -9 of the process group would.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// waitBlocked polls until the repeat's cell of the run (0: any repeat's)
// is blocked at its gate, failing after d.
func (p *proc) waitBlocked(t *testing.T, out, runID string, repeat int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if repeat == 0 {
			// Any repeat: a node takes its cells in no fixed order.
			if m, _ := filepath.Glob(filepath.Join(out, runID, "true-task", "*", "default", "*", "output", "blocked")); len(m) > 0 {
				return
			}
		} else if _, err := os.Stat(filepath.Join(cellOut(out, runID, repeat), "blocked")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cell %d of run %s never blocked within %v; stderr:\n%s", repeat, runID, d, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the file system, not synchronising on time
	}
}

// waitLines polls until the process's stderr holds n lines that start
// with prefix (its progress lines, "[k/N] ..."), failing after d.
func (p *proc) waitLines(t *testing.T, prefix string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := 0
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.HasPrefix(l, prefix) {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines starting %q within %v, want %d; stderr:\n%s", got, prefix, d, n, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the process's output, not synchronising on time
	}
}

// cellOut is the output directory ({output_dir}) of repeat of the run's one task and
// harness.
func cellOut(out, runID string, repeat int) string {
	dirs, _ := filepath.Glob(filepath.Join(out, runID, "true-task", "*"))
	if len(dirs) != 1 {
		return filepath.Join(out, runID, "true-task", "?", "default", strconv.Itoa(repeat), "output")
	}
	return filepath.Join(dirs[0], "default", strconv.Itoa(repeat), "output")
}

// gated is a command harness: repeats
// listed in fast pass at once; the others write "blocked" in their output
// directory and wait for gate to exist, then pass. A waiting command also
// ends when the gate's directory is gone: a run killed with SIGKILL leaves
// its host commands behind, and the test's clean-up removes that directory.
func gated(gate string, fast ...int) string {
	var pats []string
	for _, n := range fast {
		pats = append(pats, "*/"+strconv.Itoa(n)+"/output")
	}
	c := "command:case {output_dir} in "
	if len(pats) > 0 {
		c += strings.Join(pats, "|") + ") exit 0;; "
	}
	return c + "esac; touch {output_dir}/blocked; while [ ! -e " + gate + " ] && [ -d " + filepath.Dir(gate) + " ]; do sleep 0.05; done"
}

// TestKilledRunNeverRunsInALaterRun is fault 1: a run SIGKILLed with
// queued cells, then an unrelated run in the same PROCTOR_HOME. The later
// run ends the dead one as interrupted at start and none of the dead
// run's queued cells ever starts; the dead run's replay keeps them
// errored.
func TestKilledRunNeverRunsInALaterRun(t *testing.T) {
	t.Parallel()
	testutil.Docker(t) // the in-process stack needs an engine
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/true-root")
	gate := filepath.Join(t.TempDir(), "never")
	a := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--repeats", "3", "--concurrency", "1",
		"--harnesses", gated(gate), "--output-dir", out)
	idA := a.id(t)
	a.waitBlocked(t, out, idA, 0, time.Minute)
	a.kill9(t)

	b := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "command:true", "--output-dir", out)
	idB := b.id(t)
	if code := b.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run B exit %d:\n%s", code, b.stderr.String())
	}
	if !strings.Contains(b.stderr.String(), "run "+idA+": interrupted") {
		t.Errorf("run B did not say it ended the dead run %s:\n%s", idA, b.stderr.String())
	}
	// One cell of the dead run was blocked when it died; no other one
	// started inside run B.
	if m, _ := filepath.Glob(filepath.Join(out, idA, "true-task", "*", "default", "*", "output", "blocked")); len(m) != 1 {
		t.Errorf("%d cells of the dead run %s started, want the 1 blocked when it died (run B is %s): %v", len(m), idA, idB, m)
	}
	var showed bytes.Buffer
	c := exec.Command(bin, "runs", "show", idA, "--json")
	c.Env, c.Stdout = append(os.Environ(), "PROCTOR_HOME="+home), &showed
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	var rec struct{ Status string }
	if err := json.Unmarshal(showed.Bytes(), &rec); err != nil || rec.Status != "interrupted" {
		t.Fatalf("dead run's status %q (%v), want interrupted", rec.Status, err)
	}
	js := filepath.Join(t.TempDir(), "replay.json")
	c = exec.Command(bin, "replay", idA, "--out-json", js)
	c.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("replay: %v\n%s", err, b)
	}
	art, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(art.Results) != 3 {
		t.Fatalf("replay of the dead run: %d rows, want 3", len(art.Results))
	}
	for _, r := range art.Results {
		if r.Outcome != "errored" {
			t.Errorf("dead run's cell %s: %s, want errored", r.CellID, r.Outcome)
		}
	}
}

// TestSecondRunOnOneStoreFailsAtOnce is fault 2: while run A holds the
// embedded store, run B in the same PROCTOR_HOME fails at once naming A's
// pid, and A finishes correctly.
func TestSecondRunOnOneStoreFailsAtOnce(t *testing.T) {
	t.Parallel()
	testutil.Docker(t)
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/true-root")
	gate := filepath.Join(t.TempDir(), "gate")
	a := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", gated(gate), "--output-dir", out)
	idA := a.id(t)
	a.waitBlocked(t, out, idA, 1, time.Minute)

	start := time.Now()
	b := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "command:true", "--output-dir", out)
	if code := b.wait(t, time.Minute); code == 0 {
		t.Fatalf("run B succeeded while run A held the store:\n%s", b.stderr.String())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("run B took %v to fail", took)
	}
	if want := "proctor pid " + strconv.Itoa(a.cmd.Process.Pid) + " holds the store"; !strings.Contains(b.stderr.String(), want) {
		t.Errorf("run B's error does not say %q:\n%s", want, b.stderr.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run A exit %d:\n%s", code, a.stderr.String())
	}
	if !strings.Contains(a.stdout.String(), "1 passed") {
		t.Fatalf("run A: %s", a.stdout.String())
	}
}

// TestResumeAfterSIGKILL kills a 4-cell run after half its cells, resumes
// it, and checks that its outcomes equal an uninterrupted run's of the
// same spec, that only the unfinished cells ran again, and that its
// replay is byte-identical to the artifact the resume wrote.
func TestResumeAfterSIGKILL(t *testing.T) {
	t.Parallel()
	testutil.Docker(t)
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/true-root")
	gate := filepath.Join(t.TempDir(), "gate")
	harness := gated(gate, 1, 2)
	// Every cell solves at once (a node takes its cells in no fixed
	// order, so with fewer slots a blocked repeat could keep a fast one
	// from ever starting): 1 and 2 end, 3 and 4 block at the gate.
	args := []string{"tasks", "run", "--tasks-root", root, "--all", "--repeats", "4", "--concurrency", "4", "--harnesses", harness, "--output-dir", out}
	a := startProctor(t, bin, home, args...)
	id := a.id(t)
	a.waitBlocked(t, out, id, 3, time.Minute)
	a.waitBlocked(t, out, id, 4, time.Minute)
	a.waitLines(t, "[", 2, time.Minute)
	a.kill9(t)

	// The inputs are unchanged: resume continues the run.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "resumed.json")
	r := startProctor(t, bin, home, "runs", "resume", id[:10], "--out-json", js)
	if code := r.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("resume exit %d:\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "2 of 4 cells run again") {
		t.Errorf("resume did not re-run exactly the 2 unfinished cells:\n%s", r.stderr.String())
	}
	// It names each cell it runs again and each it reuses, with why.
	if again, reuse := strings.Count(r.stderr.String(), "\n  run again  true-task/"), strings.Count(r.stderr.String(), "\n  reuse      true-task/"); again != 2 || reuse != 2 ||
		!strings.Contains(r.stderr.String(), "/default/3: no terminal event") || !strings.Contains(r.stderr.String(), "/default/1: passed (reward 1)") {
		t.Errorf("resume named %d cells run again and %d reused, want 2 and 2 with why:\n%s", again, reuse, r.stderr.String())
	}
	// Its progress goes past the RunFinished that closed epoch 0 to the
	// cells run again (it stopped there, printing none of them).
	if !strings.Contains(r.stderr.String(), "[4/4] ") {
		t.Errorf("the resume's progress has no line for its last cell:\n%s", r.stderr.String())
	}
	resumed, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}

	full := startProctor(t, bin, home, args...)
	fullID := full.id(t)
	if code := full.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("uninterrupted run exit %d:\n%s", code, full.stderr.String())
	}
	want, err := artifact.Read(filepath.Join(out, fullID, "task_runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	outcomes := func(a *artifact.Artifact) string {
		var s []string
		for _, r := range a.Results {
			s = append(s, r.CellID+"="+r.Outcome)
		}
		return strings.Join(s, " ")
	}
	if got, w := outcomes(resumed), outcomes(want); got != w || len(resumed.Results) != 4 {
		t.Fatalf("resumed outcomes %s, uninterrupted %s", got, w)
	}

	replayed := filepath.Join(t.TempDir(), "replay.json")
	c := exec.Command(bin, "replay", id, "--out-json", replayed)
	c.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("replay: %v\n%s", err, b)
	}
	got, _ := os.ReadFile(replayed)
	wrote, _ := os.ReadFile(js)
	if !bytes.Equal(got, wrote) {
		t.Fatalf("the replay of the resumed run differs from its artifact")
	}

	// A changed input refuses, naming it; a finished run has nothing to resume.
	r2 := startProctor(t, bin, home, "runs", "resume", id)
	if code := r2.wait(t, time.Minute); code != ExitUsage || !strings.Contains(r2.stderr.String(), "nothing to resume") {
		t.Errorf("resume of a finished run: exit %d:\n%s", code, r2.stderr.String())
	}
}

// TestResumeRefusesChangedInputs changes a task's files after its run died:
// resume refuses and names the task's revision.
func TestResumeRefusesChangedInputs(t *testing.T) {
	t.Parallel()
	testutil.Docker(t)
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("testdata/true-root")); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "never")
	a := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", gated(gate), "--output-dir", out)
	id := a.id(t)
	a.waitBlocked(t, out, id, 1, time.Minute)
	a.kill9(t)
	if err := os.WriteFile(filepath.Join(root, "true-task", "instruction.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startProctor(t, bin, home, "runs", "resume", id)
	if code := r.wait(t, time.Minute); code != ExitUsage || !strings.Contains(r.stderr.String(), "task true-task revision changed") {
		t.Fatalf("resume after a task changed: exit %d:\n%s", code, r.stderr.String())
	}
}

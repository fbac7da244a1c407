package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// TestClosedPipeKeepsTheRun is `proctor tasks run … 2>&1 | head -1`: the
// built binary's stdout and stderr go into one pipe whose reader takes
// the first line and closes it, before any cell has finished. Every later
// progress line and the result lines then meet a broken pipe; the run
// still ends with exit 0, its artifact written with every cell passed and
// its index record finished (it died of SIGPIPE, leaving the run
// `running*` with no artifact). The commands it runs still get SIGPIPE's
// default disposition (an ignored SIGPIPE would be inherited).
func TestClosedPipeKeepsTheRun(t *testing.T) {
	t.Parallel()       // its own store, processes and engine objects; the environment is never set
	testutil.Docker(t) // the in-process stack needs an engine
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/true-root")
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	script := filepath.Join(dir, "cell.sh")
	// Each cell waits for the gate (or its directory's removal), then
	// records the signals its process ignores.
	if err := os.WriteFile(script, []byte(`while [ ! -e "$2" ] && [ -d "$(dirname "$2")" ]; do sleep 0.05; done
grep SigIgn /proc/self/status > "$1/sigign"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", root, "--all", "--repeats", "3", "--concurrency", "1",
		"--harnesses", "command:sh "+script+" {output_dir} "+gate, "--output-dir", out)
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	_ = w.Close()
	first, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("no first line: %v", err)
	}
	m := runIDRe.FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("first line %q has no run id", first)
	}
	runID := m[1]
	_ = r.Close() // as head -1 does; every cell is still held at the gate
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("proctor did not end within 3 minutes")
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("proctor ended with %v (exit %d), want exit 0", ee, ee.ExitCode())
	} else if err != nil {
		t.Fatal(err)
	}

	a, err := artifact.Read(filepath.Join(out, runID, "task_runs.json"))
	if err != nil {
		t.Fatalf("no artifact: %v", err)
	}
	if len(a.Results) != 3 {
		t.Fatalf("%d rows, want 3", len(a.Results))
	}
	for _, row := range a.Results {
		if row.Outcome != artifact.OutcomePassed {
			t.Errorf("cell %s: %s, want passed", row.CellID, row.Outcome)
		}
		b, err := os.ReadFile(filepath.Join(row.OutputDir, "output", "sigign"))
		if err != nil {
			t.Fatal(err)
		}
		var mask uint64
		if _, err := fmt.Sscanf(string(b), "SigIgn: %x", &mask); err != nil || mask&(1<<(syscall.SIGPIPE-1)) != 0 {
			t.Errorf("cell %s's command: %q (%v): SIGPIPE ignored", row.CellID, b, err)
		}
	}
	show := exec.Command(bin, "runs", "show", runID, "--json")
	show.Env = cmd.Env
	b, err := show.Output()
	if err != nil {
		t.Fatalf("runs show: %v", err)
	}
	var rec struct{ Status string }
	if err := json.Unmarshal(b, &rec); err != nil || rec.Status != "finished" {
		t.Fatalf("run status %q (%v), want finished", rec.Status, err)
	}
}

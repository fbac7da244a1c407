package cli

import (
	"bufio"
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

// The engine misbehaving under a run, through a socket proxy in front of
// the engine (testutil.DockerProxy): proctor talks to it as DOCKER_HOST.

// writeEngineTask writes a one-task root whose verifier has a budget of
// verifierSec seconds.
func writeEngineTask(t *testing.T, verifierSec int) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "engine-task")
	for name, body := range map[string]string{
		"instruction.md":         "Nothing to do.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "true\n",
		"tests/test.sh":          "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt\n",
		"task.toml":              "version = \"1.0\"\n\n[environment]\nnetwork_mode = \"no-network\"\n\n[verifier]\ntimeout_sec = " + strconv.Itoa(verifierSec) + "\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestEngineHangErrorsTheCell: the engine never answers the start of the
// verifier's exec (test.sh) on a 5 s verifier budget. The cell is errored,
// class infra, with the request named, after about the slack; the run
// used to wait for as long as the engine hung.
func TestEngineHangErrorsTheCell(t *testing.T) {
	p := testutil.NewDockerProxy(t)
	testutil.RequireImage(t, p.Client(t), "debian:bookworm-slim")
	stall := p.StallExecStart("/tests/test.sh")
	t.Setenv("DOCKER_HOST", p.Host)
	// The slack bounds every engine call of the run, the container's
	// start too, which a loaded engine can take seconds to answer.
	t.Setenv(EnvEngineSlack, "8")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	out := t.TempDir()
	js := filepath.Join(out, "a.json")
	done := make(chan struct{})
	var stdout, stderr string
	go func() {
		defer close(done)
		stdout, stderr, _ = proctor(t, "tasks", "run", "--tasks-root", writeEngineTask(t, 5), "--all", "--harnesses", "oracle", "--output-dir", out, "--out-json", js)
	}()
	select {
	case <-done:
	case <-time.After(4 * time.Minute):
		t.Fatalf("the run still waits on the engine after 4 minutes (%d exec starts stalled)", stall.Hits())
	}
	if stall.Hits() != 1 {
		t.Fatalf("the test script's exec start was stalled %d times, want 1\nstdout: %s\nstderr: %s", stall.Hits(), stdout, stderr)
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("artifact: %v\nstderr: %s", err, stderr)
	}
	if len(a.Results) != 1 {
		t.Fatalf("rows %+v", a.Results)
	}
	r := a.Results[0]
	if r.Outcome != "errored" || r.ErrorClass != "infra" || !strings.Contains(r.Error, "POST /exec/") || !strings.Contains(r.Error, "/start") || !strings.Contains(r.Error, "did not answer") {
		t.Fatalf("row: outcome %s class %s error %q, want errored infra naming the exec start", r.Outcome, r.ErrorClass, r.Error)
	}
}

// TestInterruptDuringCreate: SIGTERM arrives while the engine is still
// making the cell's container (its create answered 3 s late). The
// container lands all the same; the run waits for the answer and removes
// it, so nothing labelled with the run is left once the engine is done.
// It used to land after proctor exited and stay, Created.
func TestInterruptDuringCreate(t *testing.T) {
	t.Parallel() // its own store, processes and engine objects; the environment is never set
	p := testutil.NewDockerProxy(t)
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	slow := p.Delay("POST /containers/create", 3*time.Second)
	bin := buildProctor(t)
	out := t.TempDir()
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", writeEngineTask(t, 30), "--all", "--harnesses", "oracle", "--output-dir", out)
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+t.TempDir(), "DOCKER_HOST="+p.Host)
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
	var rest strings.Builder
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
	}()
	slow.WaitHit(t, 3*time.Minute)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	<-drained
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitInterrupted {
		t.Fatalf("exit: %v, want %d\n%s", err, ExitInterrupted, rest.String())
	}
	slow.WaitAnswered(t, 1, time.Minute) // the engine made the container
	if c, n := leftovers(t, cli, runID); c+n != 0 {
		t.Fatalf("%d containers and %d networks of run %s remain after SIGTERM during a create\n%s", c, n, runID, rest.String())
	}
}

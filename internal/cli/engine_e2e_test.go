package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	t.Setenv(EnvEngineSlack, "3")
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

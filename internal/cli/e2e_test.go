package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/projection"
)

var runIDRe = regexp.MustCompile(`run ([0-9A-Z]{26})`)

func examplesRoot(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../examples/tasks")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// leftovers counts the containers and networks labelled with the run.
func leftovers(t *testing.T, cli *client.Client, runID string) (int, int) {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", "proctor.run="+runID))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs), len(ns)
}

// TestRunExamplesWithOracle runs the bundled examples end to end in-process
// (embedded NATS, real Docker) and checks every behaviour they exist for.
func TestRunExamplesWithOracle(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	home, out := t.TempDir(), t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	js, md := filepath.Join(out, "a.json"), filepath.Join(out, "r.md")
	var stdout, stderr bytes.Buffer
	code := mainT(t, []string{"tasks", "run", "--tasks-root", examplesRoot(t), "--all", "--harnesses", "oracle",
		"--output-dir", out, "--out-json", js, "--out-md", md}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	want := map[string]string{
		"fix-sum": "passed", "csv-columns": "passed", "count-words": "passed", "noisy-daemon": "passed",
		"home-workdir": "passed", "slow-check": "verifier_timeout", "bad-reward": "verifier_error", "needs-token": "errored",
		"notes-steps": "passed",
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(want), rows)
	}
	for task, outcome := range want {
		if rows[task].Outcome != outcome {
			t.Errorf("%s: outcome %q, want %q (error %q)", task, rows[task].Outcome, outcome, rows[task].Error)
		}
	}
	if r := rows["csv-columns"]; len(r.Rewards) != 4 || r.Rewards["no_text"] != 1 {
		t.Errorf("csv-columns rewards %v, want all four reward.json keys", r.Rewards)
	}
	nd := rows["noisy-daemon"]
	if !utf8.ValidString(nd.StdoutTail) || !strings.HasSuffix(nd.StdoutTail, "no trailing newline") || len(nd.StdoutTail) > 4096 {
		t.Errorf("noisy-daemon tail: valid %v, %d bytes, ends %q", utf8.ValidString(nd.StdoutTail), len(nd.StdoutTail), nd.StdoutTail[max(0, len(nd.StdoutTail)-30):])
	}
	if nd.ElapsedSec >= 60 {
		t.Errorf("noisy-daemon took %.1fs: the background process held the cell", nd.ElapsedSec)
	}
	if r := rows["slow-check"]; r.Reward == nil || *r.Reward != 0 || !r.Metrics.VerifierTimeout || r.Metrics.Error || r.Passed {
		t.Errorf("slow-check: %+v", r)
	}
	if r := rows["bad-reward"]; r.Reward != nil || !r.Metrics.Error || r.Passed || !strings.Contains(r.Error, "nan") {
		t.Errorf("bad-reward must have no verdict and keep the raw text: reward %v error %q", r.Reward, r.Error)
	}
	nt := rows["needs-token"]
	if nt.ErrorClass != "unresolved_env" || len(nt.Metrics.UnresolvedEnv) != 1 || nt.Metrics.UnresolvedEnv[0] != "API_TOKEN" || nt.Reward != nil {
		t.Errorf("needs-token: %+v", nt)
	}
	if _, err := os.Stat(filepath.Join(nt.OutputDir, "build.log")); err == nil {
		t.Error("needs-token: an image build was attempted for an unresolved-env cell")
	}
	h := a.Summary.PerHarness["oracle"]
	if ns := rows["notes-steps"]; len(ns.Steps) != 2 || ns.Steps[0].Outcome != "passed" || ns.Steps[1].Outcome != "passed" {
		t.Errorf("notes-steps: every step of the example multi-step task passes with the oracle: %+v", ns.Steps)
	}
	if h.N != 9 || h.Errored != 2 || h.Scored != 7 || h.Passed != 6 {
		t.Errorf("summary %+v", h)
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
	if b, err := os.ReadFile(md); err != nil || !bytes.Contains(b, []byte("6/7 passed")) {
		t.Errorf("report: %v\n%s", err, b)
	}
	for _, f := range []string{"run.log", "solve.log", "verifier.log", "stdout.tail.txt", "reward.txt"} {
		if _, err := os.Stat(filepath.Join(rows["fix-sum"].OutputDir, f)); err != nil {
			t.Errorf("cell dir: %v", err)
		}
	}

	// The log projects to the same bytes, twice, as the artifact written.
	written, _ := os.ReadFile(js)
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := 0; i < 2; i++ {
		p, err := projection.Project(context.Background(), b, a.Run.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := projection.Render(p, "test")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, written) {
			t.Fatalf("projection %d differs from the written artifact", i+1)
		}
	}
}

// buildProctor returns the proctor binary, built once per test binary
// (testutil.ProctorBinary).
func buildProctor(t *testing.T) string {
	t.Helper()
	return testutil.ProctorBinary(t)
}

// TestSIGTERMRemovesEverything interrupts a run while a cell's container
// is running and checks that nothing labelled with the run remains and the
// partial artifact is written.
func TestSIGTERMRemovesEverything(t *testing.T) {
	t.Parallel() // its own store, processes and engine objects; the environment is never set
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	bin := buildProctor(t)
	out := t.TempDir()
	root, _ := filepath.Abs("testdata/slow-root")
	js := filepath.Join(out, "a.json")
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--output-dir", out, "--out-json", js)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+home)
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
	go func() { // keep draining stderr
		defer close(drained)
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
	}()
	// Wait until the solve is running in its container.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if c, _ := leftovers(t, cli, runID); c > 0 {
			if b, err := os.ReadFile(filepath.Join(out, runID, "slow-solve", "oracle", "default", "1", "solve.log")); err == nil && bytes.Contains(b, []byte("started")) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the cell never started")
		}
		time.Sleep(100 * time.Millisecond) // polling the engine, not synchronising on time
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	<-drained
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitInterrupted {
		t.Fatalf("exit: %v, want %d", err, ExitInterrupted)
	}
	// The interrupted run says how to continue it, and so does runs show.
	hint := "`proctor runs resume " + runID + "` continues it"
	if !strings.Contains(rest.String(), hint) {
		t.Errorf("stderr of the interrupted run lacks %q:\n%s", hint, rest.String())
	}
	show := exec.Command(bin, "runs", "show", runID)
	show.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	if b, err := show.CombinedOutput(); err != nil || !strings.Contains(string(b), "interrupted") || !strings.Contains(string(b), "note       "+hint) {
		t.Errorf("runs show of the interrupted run (%v):\n%s", err, b)
	}
	if c, n := leftovers(t, cli, runID); c+n != 0 {
		t.Fatalf("%d containers and %d networks of run %s remain after SIGTERM", c, n, runID)
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("partial artifact: %v", err)
	}
	if len(a.Results) != 1 || a.Results[0].Outcome != "errored" || a.Results[0].ErrorClass != "infra" {
		t.Fatalf("interrupted cell: %+v", a.Results)
	}
}

// TestServicesAsSeparateProcesses runs the same run with every service in
// its own `proctor serve` process against a real nats-server binary.
func TestServicesAsSeparateProcesses(t *testing.T) {
	t.Parallel() // its own store, processes and engine objects; the environment is never set
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	bin := buildProctor(t)
	natsBin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	port := freePort(t)
	url := "nats://127.0.0.1:" + port
	srv := exec.Command(natsBin, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", port)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() })
	waitNATS(t, url)
	for _, svc := range []string{"planner", "launcher", "verifier", "aggregator"} {
		c := exec.Command(bin, "serve", svc, "--nats", url, "--node", "n1")
		var buf bytes.Buffer
		c.Stderr = &buf
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Process.Signal(syscall.SIGTERM)
			if err := c.Wait(); err != nil {
				t.Errorf("serve %s: %v\n%s", svc, err, buf.String())
			}
		})
	}
	out := t.TempDir()
	js := filepath.Join(out, "a.json")
	run := exec.Command(bin, "tasks", "run", "--nats", url, "--tasks-root", examplesRoot(t), "--tasks", "fix-sum,count-words,needs-token",
		"--harnesses", "oracle", "--output-dir", out, "--out-json", js)
	if b, err := run.CombinedOutput(); err != nil {
		t.Fatalf("tasks run: %v\n%s", err, b)
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range a.Results {
		got[r.Task] = r.Outcome
	}
	want := map[string]string{"fix-sum": "passed", "count-words": "passed", "needs-token": "errored"}
	if b, _ := json.Marshal(got); string(b) != mustJSON(want) {
		t.Fatalf("outcomes %s, want %s", b, mustJSON(want))
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Fatalf("%d containers and %d networks remain", c, n)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

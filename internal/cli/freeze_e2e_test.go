package cli

import (
	"archive/tar"
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
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// TestRunsPauseNowFreezesTheSolve: while `tasks run` runs a slow oracle
// cell in its container (real Docker, the embedded store; the solve
// writes a line every 0.2 s until the test puts /app/release in its
// sandbox), another process pauses the run --now: the command reports the
// cell frozen, the engine holds its container paused, and the solve's
// file does not grow while it is. The freeze lasts until the solve's wall
// time is past its whole budget (12 s), so a budget that kept running
// would time the solve out. The release is put in while frozen; `runs
// continue` reports the thaw, the solve ends and passes its verifier, its
// solve_sec leaves the frozen time out, the log holds SolveFrozen and
// SolveThawed, a replay gives the artifact's bytes, and nothing of the
// run is left on the engine.
func TestRunsPauseNowFreezesTheSolve(t *testing.T) {
	// proctor as processes on a store of its own, the environment untouched.
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	start := time.Now()
	bin := buildProctor(t)
	out := t.TempDir()
	home := t.TempDir()
	root, _ := filepath.Abs("testdata/tick-root")
	js := filepath.Join(out, "a.json")
	env := append(os.Environ(), "PROCTOR_HOME="+home)
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle",
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
	defer interrupt(cmd)
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
	ctx := context.Background()
	cell := "tick/oracle/default/1"
	const budget = 12 * time.Second // the task's agent timeout_sec
	// The solve is under way once its file has a few lines.
	var cid string
	var solving time.Time // when the test first saw a line: the solve began before
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if cid == "" {
			cid = sandboxOf(t, cli, runID)
		}
		n := 0
		if cid != "" {
			n = ticks(t, cli, cid)
		}
		if n > 0 && solving.IsZero() {
			solving = time.Now()
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the solve never got going\n%s", progress.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the engine, not synchronising on time
	}
	t.Logf("solve under way at %.1f s", time.Since(start).Seconds())
	paused := proctor("runs", "pause", runID, "--now", "--why", "look at it")
	if !strings.Contains(paused, "frozen      "+cell+": ") || !strings.Contains(paused, "solve budget stopped") {
		t.Fatalf("runs pause --now:\n%s", paused)
	}
	ins, err := cli.ContainerInspect(ctx, cid)
	if err != nil || !ins.State.Paused {
		t.Fatalf("the cell's container is not paused after pause --now: %v", err)
	}
	before := ticks(t, cli, cid)
	frozeAt := time.Now()
	// The freeze lasts until the solve's wall time is past its whole
	// budget (12 s) and at least 2 s: a budget that ran on would time the
	// solve out at the thaw. Watching the file over that window is the
	// measurement, not a synchronisation.
	time.Sleep(max(2*time.Second, budget+time.Second-time.Since(solving)))
	if after := ticks(t, cli, cid); after != before {
		t.Fatalf("the frozen solve wrote on: %d lines at the freeze, %d after %.1f s", before, after, time.Since(frozeAt).Seconds())
	}
	if ins, err := cli.ContainerInspect(ctx, cid); err != nil || !ins.State.Paused {
		t.Fatalf("the cell's container is no longer paused: %v", err)
	}
	release(t, cli, cid)
	if show := proctor("runs", "show", runID); !strings.Contains(show, "look at it") {
		t.Errorf("runs show of a paused run:\n%s", show)
	}
	cont := proctor("runs", "continue", runID, "--why", "seen enough")
	if !strings.Contains(cont, "thawed      "+cell+" after ") {
		t.Errorf("runs continue:\n%s", cont)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tasks run: %v\n%s\n%s", err, stdout.String(), progress.String())
	}
	t.Logf("run ended at %.1f s", time.Since(start).Seconds())
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Results) != 1 {
		t.Fatalf("%d rows", len(a.Results))
	}
	r := a.Results[0]
	defer func() {
		if t.Failed() {
			for _, f := range []string{"run.log", "solve.log"} {
				b, _ := os.ReadFile(filepath.Join(out, runID, "tick", "oracle", "default", "1", f))
				t.Logf("%s:\n%s", f, b)
			}
		}
	}()
	if r.Outcome != artifact.OutcomePassed {
		t.Errorf("row %s: %s (%s) %s, want passed: the frozen time ate the budget?", r.CellID, r.Outcome, r.ErrorClass, r.Error)
	}
	if s := r.Metrics.SolveSec; s != nil {
		t.Logf("solve_sec %.1f of its %v budget", *s, budget)
	}
	if s := r.Metrics.SolveSec; s == nil || *s >= budget.Seconds() {
		t.Errorf("solve_sec %v, want the solve's own time (under its 12 s budget), the freeze left out", s)
	}
	if c, n := leftovers(t, cli, runID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, runID)
	}
	ev := exec.Command(bin, "events", "export", runID, "--format", "jsonl")
	ev.Env = env
	log, err := ev.Output()
	if err != nil {
		t.Fatal(err)
	}
	var frozen, thawed int
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var e struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		switch e.Type {
		case "SolveFrozen":
			frozen++
			if e.Data["frozen"] != true || e.Data["driver"] != "docker" {
				t.Errorf("SolveFrozen %v", e.Data)
			}
		case "SolveThawed":
			thawed++
			if s, _ := e.Data["frozen_sec"].(float64); s < 2 || r.Metrics.SolveSec != nil && s+*r.Metrics.SolveSec < budget.Seconds() {
				t.Errorf("SolveThawed %v, solve_sec %v: want the frozen and the solve's own time past the budget", e.Data, *r.Metrics.SolveSec)
			}
		}
	}
	if frozen != 1 || thawed != 1 {
		t.Errorf("%d SolveFrozen and %d SolveThawed events, want one each", frozen, thawed)
	}
	rc := exec.Command(bin, "replay", runID)
	rc.Env = env
	replayed, err := rc.Output()
	if err != nil {
		t.Fatal(err)
	}
	if written, _ := os.ReadFile(js); strings.TrimSpace(string(replayed)) != strings.TrimSpace(string(written)) {
		t.Errorf("replay differs from the artifact")
	}
}

// sandboxOf returns the id of the run's cell container ("" when none
// runs yet).
func sandboxOf(t *testing.T, cli *client.Client, runID string) string {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", "proctor.run="+runID), filters.Arg("label", "proctor.cell"))
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		return ""
	}
	return cs[0].ID
}

// ticks counts the lines of /app/ticks in container cid, read through the
// engine's archive API (which a paused container answers); 0 when the
// file is not there yet.
func ticks(t *testing.T, cli *client.Client, cid string) int {
	t.Helper()
	rc, _, err := cli.CopyFromContainer(context.Background(), cid, "/app/ticks")
	if err != nil {
		return 0
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return 0
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// release puts /app/release in container cid through the engine's
// archive API (which a paused container answers): the tick solve ends at
// its next line.
func release(t *testing.T, cli *client.Client, cid string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "release", Mode: 0o644, Size: 1}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte("1"))
	_ = tw.Close()
	if err := cli.CopyToContainer(context.Background(), cid, "/app", &buf, container.CopyToContainerOptions{}); err != nil {
		t.Fatal(err)
	}
}

// interrupt ends a `tasks run` the test left running (a failure) as
// Ctrl-C does, so its containers are removed; killed when it has not
// exited a minute later.
func interrupt(cmd *exec.Cmd) {
	if cmd.ProcessState != nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
	}
}

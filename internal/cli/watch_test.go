package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

var finalRe = regexp.MustCompile(`(?m)^final (\S+): n (\d+), errored (\d+), scored (\d+), passed (\d+), pass_rate (\S+)$`)

// checkFinal compares watch's "final" lines with the artifact's summary.
func checkFinal(t *testing.T, out string, a *artifact.Artifact) {
	t.Helper()
	ms := finalRe.FindAllStringSubmatch(out, -1)
	if len(ms) != len(a.Summary.PerHarness) {
		t.Fatalf("%d final lines for %d harnesses:\n%s", len(ms), len(a.Summary.PerHarness), out)
	}
	for _, m := range ms {
		s := a.Summary.PerHarness[m[1]]
		if s == nil {
			t.Fatalf("final line for unknown harness %s", m[1])
		}
		rate := "—"
		if s.PassRate != nil {
			rate = strconv.FormatFloat(*s.PassRate, 'f', 6, 64)
		}
		want := fmt.Sprintf("final %s: n %d, errored %d, scored %d, passed %d, pass_rate %s", m[1], s.N, s.Errored, s.Scored, s.Passed, rate)
		if m[0] != want {
			t.Errorf("watch: %q\nartifact: %q", m[0], want)
		}
	}
}

func readFixture(t *testing.T) []events.Envelope {
	t.Helper()
	f, err := os.Open("../../pkg/projection/testdata/golden.events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []events.Envelope
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		e, err := events.Decode(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	return evs
}

// TestWatchFollowsLive publishes the first half of a run's log, starts
// watch against the server, publishes the rest, and checks that watch
// caught up, printed progress, the selected events exactly once, and final
// counts equal to the artifact's.
func TestWatchFollowsLive(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	b, e := bustest.Bus(t)
	ctx := context.Background()
	evs := readFixture(t)
	runID := evs[0].RunID
	half := len(evs) / 2
	if err := b.PublishAll(ctx, evs[:half]...); err != nil {
		t.Fatal(err)
	}
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := proctor(t, "watch", runID, "--nats", e.ClientURL(), "--events", "--type", "Verdict,CellRefused", "--cell", "*/agent:demo/*")
		done <- result{out, errOut, code}
	}()
	// Publish the rest once watch has subscribed: its consumer shows up on
	// the stream.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := b.Events.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("watch never subscribed")
		}
		time.Sleep(20 * time.Millisecond) // polling the server, not synchronising on time
	}
	if err := b.PublishAll(ctx, evs[half:]...); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not exit after RunFinished")
	}
	if r.code != 0 {
		t.Fatalf("watch: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	var v runView
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "show", runID, "--nats", e.ClientURL(), "--json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != "interrupted" || v.Cells != 12 || len(v.Progress) != 2 || v.Progress[0].Harness != "oracle" || v.Progress[1].Harness != "agent:demo" || v.Progress[1].Done != 6 {
		t.Errorf("runs show of a run without index record: %+v", v)
	}
	p := projection.NewProjector(runID)
	for _, e := range evs {
		p.Apply(e)
	}
	checkFinal(t, r.out, p.Artifact("test"))
	if !strings.Contains(r.out, "] agent:demo: ") || !strings.Contains(r.out, "running") {
		t.Errorf("no live progress line:\n%s", r.out)
	}
	// One line per terminal event of an agent:demo cell: the refusal and
	// four verdicts (the duplicated one and the stale attempt-1 one count
	// as stored events: watch tails the log, the projection decides).
	var lines []string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.Contains(l, " Verdict {") || strings.Contains(l, " CellRefused {") {
			lines = append(lines, l)
			if !strings.Contains(l, "/agent:demo/") {
				t.Errorf("--cell let through %q", l)
			}
		}
	}
	if len(lines) != 6 {
		t.Errorf("%d event lines, want 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(r.out, "fix-sum/agent:demo/m1/1 #2 Verdict") {
		t.Errorf("attempt not shown:\n%s", r.out)
	}
}

func TestWatchBadFlags(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	if _, errOut, code := proctor(t, "watch", "X", "--type", "Usage,Nope"); code != ExitUsage || !strings.Contains(errOut, "Nope") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if _, errOut, code := proctor(t, "watch"); code != ExitError || !strings.Contains(errOut, "no runs") {
		t.Errorf("watch without runs: exit %d: %s", code, errOut)
	}
}

func TestGlobRegexp(t *testing.T) {
	for _, c := range []struct {
		glob, id string
		want     bool
	}{
		{"fix-sum/*", "fix-sum/oracle/default/1", true},
		{"*/oracle/*", "fix-sum/oracle/default/1", true},
		{"*/oracle/*", "fix-sum/agent:x/default/1", false},
		{"fix-sum/oracle/default/?", "fix-sum/oracle/default/2", true},
		{"fix-sum/oracle/default/?", "fix-sum/oracle/default/12", false},
		{"a.b/*", "axb/oracle/m/1", false},
		{"*[x]*", "t[x]/h/m/1", true},
	} {
		if got := globRegexp(c.glob).MatchString(c.id); got != c.want {
			t.Errorf("%q on %q: %v, want %v", c.glob, c.id, got, c.want)
		}
	}
}

// TestWatchMidRun starts `proctor watch` in the middle of a real run (a
// subprocess; watch connects through its nats.url) and checks that the
// final counts equal the artifact's summary.
func TestWatchMidRun(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	root, _ := filepath.Abs("testdata/replay-root")
	js := filepath.Join(out, "a.json")
	cmd, runID := startRun(t, bin, home, "--tasks-root", root, "--tasks", "quick,quick-fail,no-env,medium",
		"--harnesses", "oracle", "--output-dir", out, "--out-json", js)
	waitCells(t, runID, func(s map[string]string) bool {
		return s["quick/oracle/default/1"] == "passed" || s["quick-fail/oracle/default/1"] == "failed"
	})
	wout, werr, code := proctor(t, "watch", "--events", "--type", "Verdict")
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s\n%s", code, wout, werr)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tasks run: %v", err)
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(wout, "watching run "+runID) {
		t.Fatalf("watch followed another run:\n%s", wout)
	}
	checkFinal(t, wout, a)
	if s := a.Summary.PerHarness["oracle"]; s.N != 4 || s.Errored != 1 || s.Passed != 2 || s.Scored != 3 {
		t.Errorf("artifact summary %+v", s)
	}
	// Watch started mid-run: its first progress line has cells not done.
	first := regexp.MustCompile(`\] oracle: (\d)/4 done`).FindStringSubmatch(wout)
	if first == nil || first[1] == "4" {
		t.Errorf("watch did not start mid-run:\n%s", wout)
	}
	if n := strings.Count(wout, " Verdict {"); n != 3 {
		t.Errorf("%d Verdict lines, want 3:\n%s", n, wout)
	}
}

// TestWatchOutlivesTheRunProcess follows a run through the nats.url of a
// server that then stops (as a `tasks run` process does when it exits or
// dies): watch reads on from the store itself, prints no event twice, and
// since the log has no RunFinished and nobody can write it any more, ends
// with an error saying so.
func TestWatchOutlivesTheRunProcess(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	store := filepath.Join(home, "jetstream")
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := bus.Connect(ctx, srv.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(urlFile(home), []byte(srv.ClientURL()), 0o644); err != nil {
		t.Fatal(err)
	}
	evs := readFixture(t)
	evs = evs[:len(evs)-1] // no RunFinished: the run's process died
	half := len(evs) / 2
	if err := b.PublishAll(ctx, evs[:half]...); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testutil.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- mainT(t, []string{"watch", fixtureRun, "--events"}, &stdout, &stderr) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "] agent:demo: ") {
		if time.Now().After(deadline) {
			t.Fatalf("watch never caught up:\n%s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling output, not synchronising on time
	}
	if err := b.PublishAll(ctx, evs[half:]...); err != nil {
		t.Fatal(err)
	}
	b.Close()
	srv.Shutdown()
	os.Remove(urlFile(home))
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("watch did not end")
	}
	out := stdout.String()
	if code != ExitError || !strings.Contains(stderr.String(), "has not finished and no proctor process serves this store") {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr.String())
	}
	lines := 0
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " {") && !strings.HasPrefix(l, "[") {
			lines++
			if seen[l] {
				t.Errorf("event printed twice: %s", l)
			}
			seen[l] = true
		}
	}
	// Every stored event once: the fixture minus RunFinished, minus the
	// two re-published ids the stream dropped.
	if lines != len(evs)-2 {
		t.Errorf("%d event lines, want %d:\n%s", lines, len(evs)-2, out)
	}
	if !strings.Contains(out, "agent:demo: 5/6 done, 1 running") {
		t.Errorf("final progress missing:\n%s", out)
	}
}

// TestWatchFollowsAResumedRun starts `proctor watch` while a resumed run
// goes on (its log holds the RunFinished that closed epoch 0, then the
// RunResumed of epoch 1): watch follows it to the end of epoch 1 and its
// final counts are the whole run's. It stopped at the first RunFinished,
// reporting the run interrupted with the resumed cell errored.
func TestWatchFollowsAResumedRun(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	b, e := bustest.Bus(t)
	ctx := context.Background()
	r := testutil.NewResumedRun("oracle", t.TempDir())
	if err := b.PutRun(ctx, r.Record); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, r.Before...); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testutil.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- mainT(t, []string{"watch", r.ID, "--nats", e.ClientURL()}, &stdout, &stderr) }()
	// Caught up: watch prints the run's progress with cell b running.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stdout.String(), "] oracle: 1/2 done, 1 running"); {
		select {
		case code := <-done:
			t.Fatalf("watch ended (exit %d) before the resumed epoch did:\n%s\n%s", code, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch never caught up:\n%s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling output, not synchronising on time
	}
	if err := b.PublishAll(ctx, r.After...); err != nil {
		t.Fatal(err)
	}
	if err := b.PutRun(ctx, r.Final); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("watch: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("watch did not end after epoch 1's RunFinished:\n%s", stdout.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "run "+r.ID+" finished: 2 cells: 2 passed") ||
		!strings.Contains(out, "final oracle: n 2, errored 0, scored 2, passed 2, pass_rate 1.000000") {
		t.Errorf("watch's end is not the resumed run's:\n%s", out)
	}
}

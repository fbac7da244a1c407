package scalerig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/services/launcher"
)

// TestStatCPU: utime + stime of a /proc/<pid>/stat line whose command
// name holds spaces and a parenthesis, in USER_HZ ticks.
func TestStatCPU(t *testing.T) {
	line := "4242 (proctor scale) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 25 0 0 20 0 12 0 100 1000000 2000\n"
	if got := statCPU([]byte(line)); got != 1750*time.Millisecond {
		t.Errorf("statCPU = %v, want 1.75s", got)
	}
	if got := statCPU([]byte("garbage")); got != 0 {
		t.Errorf("statCPU(garbage) = %v, want 0", got)
	}
}

// TestNormalizeKeepsWhatAPlanDecides: two artifacts of one plan that
// differ only in ids, times, durations, paths and attempts normalize
// equal; a different outcome does not.
func TestNormalizeKeepsWhatAPlanDecides(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.json", `{"run":{"id":"A","started_at":"t1"},"results":[{"cell_id":"c","attempt":1,"elapsed_sec":3.5,"output_dir":"/x/A/c","outcome":"passed","metrics":{"build_sec":0.1}}]}`)
	b := write("b.json", `{"run":{"id":"B","started_at":"t2"},"results":[{"cell_id":"c","attempt":2,"elapsed_sec":9,"output_dir":"/x/B/c","outcome":"passed","metrics":{"build_sec":0}}]}`)
	c := write("c.json", `{"run":{"id":"C","started_at":"t3"},"results":[{"cell_id":"c","attempt":1,"elapsed_sec":3.5,"output_dir":"/x/C/c","outcome":"failed","metrics":{"build_sec":0.1}}]}`)
	na, _ := normalize(a, "")
	nb, _ := normalize(b, "")
	nc, err := normalize(c, "")
	if err != nil {
		t.Fatal(err)
	}
	if na.text != nb.text {
		t.Errorf("same plan normalized differently: %s", firstDiff(na.text, nb.text))
	}
	if na.text == nc.text || firstDiff(nc.text, na.text) == "" {
		t.Error("a different outcome normalized equal")
	}
	// Each run is planned from inputs of its own, named in its harness
	// and cell ids.
	d := write("d.json", `{"results":[{"cell_id":"t/agent:/r/inputs/0001/agent/default/1","harness":"agent:/r/inputs/0001/agent","outcome":"passed"}]}`)
	e := write("e.json", `{"results":[{"cell_id":"t/agent:/r/inputs/ref-0000/agent/default/1","harness":"agent:/r/inputs/ref-0000/agent","outcome":"passed"}]}`)
	nd, _ := normalize(d, "/r/inputs/0001")
	ne, err := normalize(e, "/r/inputs/ref-0000")
	if err != nil {
		t.Fatal(err)
	}
	if nd.text != ne.text {
		t.Errorf("runs planned from two inputs directories normalized differently: %s", firstDiff(nd.text, ne.text))
	}
}

// TestClaimLines: the launcher's claim line of a first delivery reaches
// the claims file and is read back; a redelivery's does not, and other
// records go to the next handler.
func TestClaimLines(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "w001.claims"))
	if err != nil {
		t.Fatal(err)
	}
	var next slogBuffer
	log := slog.New(claimHandler{next: slog.NewTextHandler(&next, nil), mu: &sync.Mutex{}, w: f}).With("service", "launcher")
	log.Debug(launcher.ClaimedMsg, "run", "R", "cell", "c/1", "delivery", uint64(1), "queued", 25*time.Millisecond)
	log.Debug(launcher.ClaimedMsg, "run", "R", "cell", "c/1", "delivery", uint64(2), "queued", time.Minute)
	log.Info("other")
	log.Debug("debug other")
	f.Close()
	got, err := readClaims(dir, "w")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].queued != 25*time.Millisecond || got[0].worker != "w001" || got[0].run != "R" || got[0].cell != "c/1" {
		t.Errorf("claims %+v, want one of w001, run R, cell c/1, 25ms", got)
	} else if d := time.Since(got[0].at); d < 0 || d > time.Minute {
		t.Errorf("claim taken at %v, %v ago", got[0].at, d)
	}
	if n := next.lines(); n != 1 {
		t.Errorf("%d records passed on, want 1 (the info line)", n)
	}
	if !claimHandler.Enabled(claimHandler{}, context.Background(), slog.LevelDebug) {
		t.Error("the claim handler must see debug records")
	}
}

type slogBuffer struct{ b []byte }

func (s *slogBuffer) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }
func (s *slogBuffer) lines() (n int) {
	for _, c := range s.b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// TestLongestGap: the longest stretch of [from, to] with no time in it.
func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ts := []time.Time{at(1), at(3), at(10), at(11), at(30)}
	if g := longestGap(ts, at(0), at(12)); g != 7*time.Second {
		t.Errorf("gap %v, want 7s", g)
	}
	if g := longestGap(ts, at(11), at(20)); g != 9*time.Second {
		t.Errorf("gap to the end %v, want 9s", g)
	}
}

// TestRewardByTaskAndRepeat: a cell's simulated reward does not depend
// on the directory its agent was planned from (each run of the rig has
// its own), only on its task and repeat.
func TestRewardByTaskAndRepeat(t *testing.T) {
	sim := Sim{FailEvery: 2}
	fails := 0
	for rep := 1; rep <= 20; rep++ {
		a := sim.Reward(fmt.Sprintf("s001/agent:/r/inputs/0001/agent/default/%d", rep))
		b := sim.Reward(fmt.Sprintf("s001/agent:/r/inputs/ref-0000/agent/default/%d", rep))
		if a != b {
			t.Errorf("repeat %d: reward %d from one directory, %d from another", rep, a, b)
		}
		fails += 1 - a
	}
	if fails == 0 || fails == 20 {
		t.Errorf("%d of 20 repeats fail: the hash decides nothing", fails)
	}
}

// TestInputHider: at a run's first CellPlanned the hider renames the
// run's inputs directory away (the planned task path no longer exists)
// and records when; a CellPlanned of a path outside its root is left
// alone, and a second one of the same run changes nothing.
func TestInputHider(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := bustest.Server(t)
	b, err := bus.Connect(ctx, srv.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	root := filepath.Join(t.TempDir(), "inputs")
	in := filepath.Join(root, "0001")
	if err := writeTasks(filepath.Join(in, "tasks"), filepath.Join(in, "agent"), 2, Sim{Events: 2}); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "tasks", "s000")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := hideInputs(srv.ClientURL(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	planned := func(run, cell, dir string) {
		t.Helper()
		if err := b.PublishAll(ctx, events.Must(events.CellPlanned, run, cell, 0, "planner", events.CellPlannedData{TaskDir: dir})); err != nil {
			t.Fatal(err)
		}
	}
	planned("OTHER", "s000/oracle/default/1", other)
	before := time.Now()
	planned("R", "s000/oracle/default/1", filepath.Join(in, "tasks", "s000"))
	planned("R", "s001/oracle/default/1", filepath.Join(in, "tasks", "s001"))
	// The hider handles messages in order: once R's is handled, OTHER's was.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, ok := h.get("R"); ok {
			break
		}
		select {
		case <-tick.C: // the hider's subscription runs on its own
		case <-ctx.Done():
			t.Fatal("run R's inputs were not taken away")
		}
	}
	ri, _ := h.get("R")
	if ri.dir != in || ri.removed.Before(before) {
		t.Errorf("removed %+v, want %s after %v", ri, in, before)
	}
	if _, err := os.Stat(filepath.Join(in, "tasks", "s000", "task.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the planned task is still readable: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a path outside the hider's root was touched: %v", err)
	}
	if _, ok := h.get("OTHER"); ok {
		t.Error("a run outside the root was recorded")
	}
	if p := h.problems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}

package launcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// watchedDocker is the Docker driver with two observations: the handle of
// each sandbox whose solve was prepared (by cell), and, when a sandbox is
// destroyed, whether the solution's marker file existed in it just before.
type watchedDocker struct {
	*docker.Driver
	marker   string
	mu       sync.Mutex
	prepared map[string]*sandbox.Handle
	ready    chan string // a cell whose solve was prepared
	ran      map[string]error
}

func (w *watchedDocker) PrepareExec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.PreparedExec, error) {
	pe, err := w.Driver.PrepareExec(ctx, h, spec)
	if err == nil {
		w.mu.Lock()
		w.prepared[h.State["cell"]] = h
		w.mu.Unlock()
		w.ready <- h.State["cell"]
	}
	return pe, err
}

func (w *watchedDocker) Destroy(ctx context.Context, h *sandbox.Handle) error {
	_, err := w.ReadFile(ctx, h, w.marker, 1<<10)
	w.mu.Lock()
	w.ran[h.State["cell"]] = err
	w.mu.Unlock()
	return w.Driver.Destroy(ctx, h)
}

// TestPreparedSolveWaitsForItsGate (real Docker, real nats-server, the
// oracle): on one solve slot, a cell solving holds the slot while two
// cells have their solves prepared (the exec made, the solution staged)
// and wait at their gates. One is cancelled there: its solution, whose
// first act writes a marker, never ran (the marker is absent when its
// sandbox is destroyed). The other waits longer than its whole solve
// budget before its gate opens and then solves within it: the budget
// counts from the gate, not from the preparation.
func TestPreparedSolveWaitsForItsGate(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	dd, err := docker.New(docker.Options{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	const marker = "/tmp/proctor-solution-ran"
	w := &watchedDocker{Driver: dd, marker: marker, prepared: map[string]*sandbox.Handle{}, ready: make(chan string, 3), ran: map[string]error{}}
	b, _ := bustest.Bus(t)
	s, err := New(Config{Node: "n1", Host: &sandboxfake.Driver{}, Slots: NewSlots(1)}, b, w)
	if err != nil {
		t.Fatal(err)
	}
	run := events.NewID()
	t.Cleanup(func() { _, _, _ = dd.GC(context.Background(), run) })
	// The budget of the held cells: the late one waits longer than it at
	// its gate, then solves (1 s) within it, with room for a loaded
	// engine to start and report the solve.
	const budget = 6 // seconds
	held := harnesstest.Files{
		"task.toml":         fmt.Sprintf("version = \"1.0\"\n\n[agent]\ntimeout_sec = %d\n\n[verifier]\ntimeout_sec = 30\n", budget),
		"solution/solve.sh": "echo ran > " + marker + "\nsleep 1\n",
	}
	first := harnesstest.PlanCell(t, b, run, harnesstest.Task(t, "first", harnesstest.Files{
		"solution/solve.sh": "touch /tmp/solving\nwhile [ ! -e /tmp/go ]; do sleep 0.05; done\n",
	}), "oracle")
	cancelled := harnesstest.PlanCell(t, b, run, harnesstest.Task(t, "cancelled", held), "oracle")
	late := harnesstest.PlanCell(t, b, run, harnesstest.Task(t, "late", held), "oracle")

	ctx := context.Background()
	launch := func(ctx context.Context, job events.LaunchJob) chan error {
		done := make(chan error, 1)
		go func() { done <- s.Launch(ctx, job, 1) }()
		return done
	}
	firstDone := launch(ctx, first)
	if c := <-w.ready; c != first.CellID {
		t.Fatalf("prepared first: %s, want %s", c, first.CellID)
	}
	// The first cell holds the only solve slot once its solve runs.
	w.mu.Lock()
	hFirst := w.prepared[first.CellID]
	w.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := dd.ReadFile(ctx, hFirst, "/tmp/solving", 1<<10); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first cell's solve never began")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// One solve slot and one sandbox ahead: the cancelled cell is
	// prepared first, the late one once the cancelled one's sandbox is
	// gone.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelledDone := launch(cctx, cancelled)
	select {
	case c := <-w.ready:
		if c != cancelled.CellID {
			t.Fatalf("prepared %s, want %s", c, cancelled.CellID)
		}
	case err := <-firstDone:
		t.Fatalf("the first cell ended early: %v", err)
	}
	lateDone := launch(ctx, late)

	// A cancel reaches a cell as the end of its context (Launch).
	cancel()
	if err := <-cancelledDone; err == nil {
		t.Error("the cell cancelled at its gate ended without error")
	}
	w.mu.Lock()
	ranErr, destroyed := w.ran[cancelled.CellID]
	w.mu.Unlock()
	if !destroyed || !errors.Is(ranErr, sandbox.ErrNotFound) {
		t.Errorf("the cell cancelled at its gate: sandbox destroyed %v, marker read %v; want destroyed with no marker", destroyed, ranErr)
	}
	evs := harnesstest.CellEvents(t, b, run, cancelled.CellID)
	for _, e := range evs {
		if e.Type == events.Started || e.Type == events.Finished {
			t.Errorf("the cell cancelled at its gate recorded %s: %v", e.Type, types(evs))
		}
	}
	select {
	case c := <-w.ready:
		if c != late.CellID {
			t.Fatalf("prepared %s, want %s", c, late.CellID)
		}
	case err := <-firstDone:
		t.Fatalf("the first cell ended early: %v", err)
	}

	// The time passing is what is tested: the late cell waits at its gate
	// for longer than its budget.
	time.Sleep(budget*time.Second + 500*time.Millisecond)
	if res, err := dd.Exec(ctx, hFirst, sandbox.ExecSpec{Cmd: []string{"touch", "/tmp/go"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("release the first cell: %+v %v", res, err)
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("first cell: %v", err)
	}
	if err := <-lateDone; err != nil {
		t.Fatalf("late cell: %v", err)
	}
	evs = harnesstest.CellEvents(t, b, run, late.CellID)
	fin := last[events.FinishedData](t, evs, events.Finished)
	if fin.TimedOut || fin.ExitCode != 0 || fin.DurationSec < 1 || fin.DurationSec >= budget {
		t.Errorf("the late cell's solve: %+v; want exit 0 after about 1 s of its %d s budget counted from its gate", fin, budget)
	}
}

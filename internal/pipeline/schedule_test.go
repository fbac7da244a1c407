package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/verify"
	"github.com/proctor-eval/proctor/services/launcher"
	"github.com/proctor-eval/proctor/services/verifier"
)

// gatedDriver is the scripted fake with the build of one task held until
// the test opens buildGate, and a count of the sandboxes alive (started,
// not destroyed) with its peak.
type gatedDriver struct {
	*sandboxfake.Driver
	slowTask  string
	buildGate chan struct{}
	building  chan struct{} // closed when the slow build has begun
	once      sync.Once
	live, max atomic.Int32
}

func (d *gatedDriver) EnsureImage(ctx context.Context, b sandbox.BuildSpec) (sandbox.ImageInfo, error) {
	if b.Task == d.slowTask {
		d.once.Do(func() { close(d.building) })
		select {
		case <-d.buildGate:
		case <-ctx.Done():
			return sandbox.ImageInfo{}, ctx.Err()
		}
	}
	return d.Driver.EnsureImage(ctx, b)
}

func (d *gatedDriver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	h, err := d.Driver.Start(ctx, spec)
	if err == nil {
		n := d.live.Add(1)
		for m := d.max.Load(); n > m && !d.max.CompareAndSwap(m, n); m = d.max.Load() {
		}
	}
	return h, err
}

func (d *gatedDriver) Destroy(ctx context.Context, h *sandbox.Handle) error {
	err := d.Driver.Destroy(ctx, h)
	d.live.Add(-1)
	return err
}

// TestSchedulerWastesNoSlot: a node of 2 slots (launcher and verifier in
// one process, sharing launcher.Slots) on a real nats-server, with 6
// oracle cells queued: the first cell's image build is held (a build
// that takes long), the others' images are ready, every solve runs until
// the test ends it and every verifier's tests until the test lets them.
// Asserted, in order: both slots solve cells of ready images while the
// held build goes on (a build holds no slot); when a solve ends, the next
// queued cell's solve starts while the ended cell's verifier is still
// held (the verifier and the sandbox's removal hold no solve slot); never
// more than 2 solves at once, never more than 2 + launcher.Ahead(2)
// sandboxes alive; and, the build and the verifiers let go, every cell
// has one passing verdict. Each wait is on a channel the scripted solve
// or build signals, bounded by a deadline that fails the test.
func TestSchedulerWastesNoSlot(t *testing.T) {
	const slots, cells = 2, 6
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Chdir(t.TempDir())
	b, _ := bustest.Bus(t)
	run := events.NewID()
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("services' log:\n%s", logs.String())
		}
	})

	// Cell 0 is of task "slow" (its build held), cells 1..5 of task "t".
	slowTask := harnesstest.Task(t, "slow", nil)
	readyTask := harnesstest.Task(t, "t", nil)
	var jobs []events.LaunchJob
	var evs []events.Envelope
	for i := range cells {
		tk := readyTask
		if i == 0 {
			tk = slowTask
		}
		env := harnesstest.NewEnv(t, tk, "oracle", nil)
		if i == 0 {
			spec := env.SpecV
			spec.OutputDir = t.TempDir()
			if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning, Spec: spec}); err != nil {
				t.Fatal(err)
			}
			evs = append(evs,
				events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: spec}),
				events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: cells, Tasks: []string{"slow", "t"}}))
		}
		plan := env.PlanV
		plan.Task, plan.Repeat, plan.OutputDir = tk.Name, i+1, t.TempDir()
		cell := fmt.Sprintf("%s/oracle/m/%d", tk.Name, i+1)
		evs = append(evs, events.Must(events.CellPlanned, run, cell, 1, "planner", plan))
		jobs = append(jobs, events.LaunchJob{RunID: run, CellID: cell})
	}
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}

	// Each solve hands the test a channel and runs until it is closed;
	// each verifier's tests wait for testsGate.
	solving := make(chan chan struct{}, cells)
	var inSolve, maxSolve atomic.Int32
	verifying := make(chan chan struct{}, cells)
	var testsRan atomic.Int32
	d := &gatedDriver{slowTask: "slow", buildGate: make(chan struct{}), building: make(chan struct{}), Driver: &sandboxfake.Driver{Scripts: []sandboxfake.Script{
		{Match: "solve.sh", Stdout: "solved\n", Do: func(sandbox.ExecSpec) error {
			n := inSolve.Add(1)
			for m := maxSolve.Load(); n > m && !maxSolve.CompareAndSwap(m, n); m = maxSolve.Load() {
			}
			end := make(chan struct{})
			solving <- end
			select {
			case <-end:
			case <-ctx.Done():
			}
			inSolve.Add(-1)
			return nil
		}},
		{Match: "test.sh", Files: map[string]sandbox.FileResult{verify.RewardTxt: sandboxfake.Regular("1\n")}, Do: func(sandbox.ExecSpec) error {
			testsRan.Add(1)
			end := make(chan struct{})
			verifying <- end
			select {
			case <-end:
			case <-ctx.Done():
			}
			return nil
		}},
	}}}

	sl := launcher.NewSlots(slots)
	l, err := launcher.New(launcher.Config{Node: "n1", Concurrency: slots, Host: d.Driver, Slots: sl, Logger: log}, b, d)
	if err != nil {
		t.Fatal(err)
	}
	v, err := verifier.New(verifier.Config{Node: "n1", Concurrency: slots, Slots: sl, Logger: log}, b, d)
	if err != nil {
		t.Fatal(err)
	}
	stopL := start(t, ctx, l.Run)
	defer stopL()
	stopV := start(t, ctx, v.Run)
	defer stopV()
	for _, job := range jobs {
		if err := b.PublishWork(ctx, events.LaunchSubject, run+"/"+job.CellID, job); err != nil {
			t.Fatal(err)
		}
	}

	next := func(what string) chan struct{} {
		t.Helper()
		select {
		case end := <-solving:
			return end
		case <-ctx.Done():
			t.Fatalf("%s: no solve started (solving %d, tests run %d)", what, inSolve.Load(), testsRan.Load())
			return nil
		}
	}
	select {
	case <-d.building:
	case <-ctx.Done():
		t.Fatal("the slow task's build never began")
	}
	// Both slots solve while the slow build is held.
	running := []chan struct{}{next("first slot"), next("second slot, the slow build held")}
	// End one solve at a time: the next starts while the ended cell's
	// verifier is held; then that verifier is let go.
	verify := func(what string) {
		t.Helper()
		select {
		case end := <-verifying:
			close(end)
		case <-ctx.Done():
			t.Fatalf("%s: no verifier ran", what)
		}
	}
	for k := 0; k < cells-1-slots; k++ {
		close(running[0])
		running = append(running[1:], next(fmt.Sprintf("refill %d, its verifier held", k+1)))
		verify(fmt.Sprintf("refill %d", k+1))
	}
	// Let the slow build go: its cell is the last to solve.
	close(d.buildGate)
	close(running[0])
	running = append(running[1:], next("the slow task's cell"))
	for _, end := range running {
		close(end)
	}
	for k := 0; k < slots+1; k++ {
		verify("the last cells")
	}

	// Every cell has one passing verdict (polling the log, not timing).
	for _, job := range jobs {
		for {
			var verdicts, passed int
			for _, e := range harnesstest.CellEvents(t, b, run, job.CellID) {
				if e.Type == events.Verdict {
					verdicts++
					var vd events.VerdictData
					if events.Into(e, &vd) == nil && vd.Reward != nil && *vd.Reward == 1 {
						passed++
					}
				}
			}
			if verdicts == 1 && passed == 1 {
				break
			}
			if verdicts > 1 || ctx.Err() != nil {
				t.Fatalf("cell %s: %d verdicts, %d passed; events %v", job.CellID, verdicts, passed, harnesstest.TypesOf(harnesstest.CellEvents(t, b, run, job.CellID)))
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond): // polling the log
			}
		}
	}
	if m := maxSolve.Load(); m != slots {
		t.Errorf("at most %d solves ran at once, want %d", m, slots)
	}
	if m, bound := d.max.Load(), int32(slots+launcher.Ahead(slots)); m > bound {
		t.Errorf("%d sandboxes were alive at once, want at most %d", m, bound)
	}
}

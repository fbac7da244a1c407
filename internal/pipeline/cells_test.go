package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/launcher"
)

// cellsRun is a run of n command cells of one task whose solve each takes
// solve (the command's host process is the scripted sandbox, whose Do
// blocks that long: the slow work itself, not a synchronisation), served
// by the launchers and aggregators a test starts on their own buses.
type cellsRun struct {
	run  string
	jobs []events.LaunchJob
	host *sandboxfake.Driver
	// solves counts the solves that ran (each command's Do).
	solves atomic.Int32
	// logs holds the services' logs; log writes to it.
	logs testutil.SyncBuffer
	log  *slog.Logger
}

// planCells records a running run of n cells on b (run record,
// RunRequested, RunPlanned, CellPlanned) and returns it; its launch jobs
// are not published yet.
func planCells(t *testing.T, ctx context.Context, b *bus.Bus, n int, solve time.Duration) *cellsRun {
	t.Helper()
	r := &cellsRun{run: events.NewID()}
	r.log = slog.New(slog.NewTextHandler(&r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			r.dump(t, b)
		}
	})
	tk := harnesstest.Task(t, "t", nil)
	spec := harnesstest.NewEnv(t, tk, "oracle", nil).SpecV
	spec.OutputDir = t.TempDir()
	if err := b.PutRun(ctx, bus.RunRecord{ID: r.run, Status: bus.StatusRunning, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx,
		events.Must(events.RunRequested, r.run, "", 0, "cli", events.RunRequestedData{Spec: spec}),
		events.Must(events.RunPlanned, r.run, "", 0, "planner", events.RunPlannedData{Cells: n, Tasks: []string{"t"}})); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r.jobs = append(r.jobs, harnesstest.PlanCell(t, b, r.run, tk, fmt.Sprintf("command:slow%d {task_path}", i)))
	}
	r.host = &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "slow", Do: func(sandbox.ExecSpec) error {
		r.solves.Add(1)
		time.Sleep(solve)
		return nil
	}}}}
	return r
}

// publish puts every launch job of the run on the work queue.
func (r *cellsRun) publish(t *testing.T, ctx context.Context, b *bus.Bus) {
	t.Helper()
	for _, job := range r.jobs {
		if err := b.PublishWork(ctx, events.LaunchSubject, r.run+"/"+job.CellID, job); err != nil {
			t.Fatal(err)
		}
	}
}

// services runs one launcher per config (its Host is the run's scripted
// driver) and aggregators aggregators, each on the bus connect returns,
// until the returned stop is called; stop returns the first service
// error other than the end of its context.
func (r *cellsRun) services(t *testing.T, ctx context.Context, connect func() *bus.Bus, launchers []launcher.Config, aggregators int) (stop func() error) {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	var grp errgroup.Group
	for _, cfg := range launchers {
		cfg.Host, cfg.Logger = r.host, r.log
		l, err := launcher.New(cfg, connect(), r.host)
		if err != nil {
			t.Fatal(err)
		}
		grp.Go(func() error { return l.Run(sctx) })
	}
	for range aggregators {
		a, err := aggregator.New(aggregator.Config{Version: "test", Logger: r.log}, connect())
		if err != nil {
			t.Fatal(err)
		}
		grp.Go(func() error { return a.Run(sctx) })
	}
	return func() error {
		cancel()
		if err := grp.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// waitFinished polls the run index until the run has a terminal status
// (a watch would end with the server it is on; a poll rides over a
// leader moving) and returns it; the test fails at ctx's end.
func waitFinished(t *testing.T, ctx context.Context, b *bus.Bus, run string) bus.RunRecord {
	t.Helper()
	for {
		rec, err := b.GetRun(ctx, run)
		if err == nil && rec.Terminal() {
			return rec
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s not finished: status %q, last error %v", run, rec.Status, err)
		case <-time.After(100 * time.Millisecond): // polling the index, not synchronising on time
		}
	}
}

// checkOnce asserts that every cell of the run was solved once and has
// exactly one verdict: one attempt, one SandboxStarted, one Finished, one
// Verdict (passed), no CellSuperseded or CellErrored, and that the run
// finished with each cell passed.
func (r *cellsRun) checkOnce(t *testing.T, b *bus.Bus, rec bus.RunRecord) {
	t.Helper()
	if rec.Status != bus.StatusFinished {
		t.Errorf("run status %q, want finished", rec.Status)
	}
	byCell := r.events(t, b)
	for _, job := range r.jobs {
		count := map[events.Type]int{}
		attempts := map[int]bool{}
		pass := false
		for _, e := range byCell[job.CellID] {
			count[e.Type]++
			attempts[e.Attempt] = true
			if e.Type == events.Verdict {
				var v events.VerdictData
				if err := events.Into(e, &v); err != nil {
					t.Fatal(err)
				}
				pass = v.Reward != nil && *v.Reward == 1
			}
		}
		if count[events.SandboxStarted] != 1 || count[events.Started] != 1 || count[events.Finished] != 1 || count[events.Verdict] != 1 ||
			count[events.CellSuperseded] != 0 || count[events.CellErrored] != 0 || len(attempts) != 1 || !pass {
			t.Errorf("cell %s: events %v, attempts %v, passed %v; want it solved once with one passing verdict", job.CellID, count, attempts, pass)
		}
	}
	if n := int(r.solves.Load()); n != len(r.jobs) {
		t.Errorf("%d solves ran for %d cells", n, len(r.jobs))
	}
}

// events reads the run's events by cell, retrying transient bus errors
// (the test's own connection may have been on a killed server).
func (r *cellsRun) events(t *testing.T, b *bus.Bus) map[string][]events.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var byCell map[string][]events.Envelope
	err := bus.Retry(ctx, nil, "read the run", func(ctx context.Context) error {
		byCell = map[string][]events.Envelope{}
		return b.ReadRun(ctx, r.run, func(e events.Envelope) error {
			byCell[e.CellID] = append(byCell[e.CellID], e)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return byCell
}

// dump logs each cell's event types and the services' logs (a failed
// test's diagnosis).
func (r *cellsRun) dump(t *testing.T, b *bus.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	byCell := map[string][]string{}
	err := b.ReadRun(ctx, r.run, func(e events.Envelope) error {
		byCell[e.CellID] = append(byCell[e.CellID], fmt.Sprintf("%s#%d", e.Type, e.Attempt))
		return nil
	})
	for _, job := range r.jobs {
		t.Logf("cell %s: %v", job.CellID, byCell[job.CellID])
	}
	t.Logf("run events: %v (read error %v)", byCell[""], err)
	t.Logf("service logs:\n%s", r.logs.String())
}

// Package pipeline holds tests that run several services together on one
// in-process nats-server, as the in-process stack of `tasks run` does (a
// service's own tests never import another service).
package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/launcher"
)

// flakyStart is the scripted sandbox whose first Start of one cell fails,
// as a Docker engine that cannot start a container once would: the cell
// is errored, class sandbox.
type flakyStart struct {
	*sandboxfake.Driver
	cell   string
	mu     sync.Mutex
	failed bool
}

func (d *flakyStart) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	d.mu.Lock()
	fail := spec.CellID == d.cell && !d.failed
	d.failed = d.failed || fail
	d.mu.Unlock()
	if fail {
		return nil, errors.New("container start: engine hiccup")
	}
	return d.Driver.Start(ctx, spec)
}

// retryRun runs two command cells of one task under a real launcher and
// an aggregator on an in-process nats-server, with RunSpec.Retries
// retries: "good" passes except that its first sandbox start fails
// (class sandbox), "bad" is scored and fails. It returns the run's
// artifact rows by harness and the number of Started events per cell.
func retryRun(t *testing.T, retries int) (map[string]artifact.Result, map[string]int) {
	t.Helper()
	t.Chdir(t.TempDir())
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.NewID()
	tk := harnesstest.Task(t, "t", nil)
	spec := harnesstest.NewEnv(t, tk, "oracle", nil).SpecV
	spec.OutputDir, spec.Retries = t.TempDir(), retries
	if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx,
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: spec}),
		events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 2, Tasks: []string{"t"}})); err != nil {
		t.Fatal(err)
	}
	good := harnesstest.PlanCell(t, b, run, tk, "command:good {task_path}")
	bad := harnesstest.PlanCell(t, b, run, tk, "command:bad {task_path}")
	host := &flakyStart{Driver: &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "good"}, {Match: "bad", Exit: 1}}}, cell: good.CellID}
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			for _, job := range []events.LaunchJob{good, bad} {
				t.Logf("cell %s: %v", job.CellID, harnesstest.TypesOf(harnesstest.CellEvents(t, b, run, job.CellID)))
			}
			t.Logf("service logs:\n%s", logs.String())
		}
	})
	l, err := launcher.New(launcher.Config{Node: "n1", Host: host, Logger: log}, b, host)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := aggregator.New(aggregator.Config{Version: "test", Logger: log}, b)
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	var grp errgroup.Group
	grp.Go(func() error { return l.Run(lctx) })
	grp.Go(func() error { return agg.Run(lctx) })
	for _, job := range []events.LaunchJob{good, bad} {
		if err := b.PublishWork(ctx, events.LaunchSubject, run+"/"+job.CellID, job); err != nil {
			t.Fatal(err)
		}
	}
	_, ferr := b.WaitRun(ctx, run)
	stop()
	if err := grp.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if ferr != nil {
		t.Fatal(ferr)
	}
	p, err := projection.Project(ctx, b, run)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := p.Rows()
	byHarness := map[string]artifact.Result{}
	for _, r := range rows {
		byHarness[r.Harness] = r
	}
	started := map[string]int{}
	for h, job := range map[string]events.LaunchJob{"good": good, "bad": bad} {
		for _, e := range harnesstest.CellEvents(t, b, run, job.CellID) {
			if e.Type == events.SandboxStarted {
				started[h]++
			}
		}
	}
	return byHarness, started
}

// TestRetryInfraErroredCell: with --retries 1 a cell errored with an
// infra class (its sandbox would not start) runs again as attempt 2, with
// its own events, and passes; the row is the last attempt's and counts 2
// attempts. The scored failing cell is never run again, and the run
// finishes only after the retry.
func TestRetryInfraErroredCell(t *testing.T) {
	rows, started := retryRun(t, 1)
	g, b := rows["command:good {task_path}"], rows["command:bad {task_path}"]
	if g.Outcome != "passed" || g.Attempt != 2 || g.Attempts != 2 {
		t.Errorf("retried cell: outcome %s attempt %d attempts %d (%s %s), want passed at attempt 2 of 2", g.Outcome, g.Attempt, g.Attempts, g.ErrorClass, g.Error)
	}
	if b.Outcome != "failed" || b.Attempt != 1 || b.Attempts != 0 {
		t.Errorf("scored failing cell: outcome %s attempt %d attempts %d, want failed once", b.Outcome, b.Attempt, b.Attempts)
	}
	if started["good"] != 1 || started["bad"] != 1 {
		t.Errorf("sandboxes started per cell %v, want 1 each (good's first start failed)", started)
	}
}

// TestNoRetriesKeepsTheError: with --retries 0 (the default) the same
// infra error ends the cell errored, class sandbox, after one attempt.
func TestNoRetriesKeepsTheError(t *testing.T) {
	rows, _ := retryRun(t, 0)
	g := rows["command:good {task_path}"]
	if g.Outcome != "errored" || g.ErrorClass != string(events.ClassSandbox) || g.Attempt != 1 || g.Attempts != 0 {
		t.Errorf("cell: outcome %s class %s attempt %d attempts %d, want errored (sandbox) once", g.Outcome, g.ErrorClass, g.Attempt, g.Attempts)
	}
	if b := rows["command:bad {task_path}"]; b.Outcome != "failed" {
		t.Errorf("scored cell: %s", b.Outcome)
	}
}

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/verify"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/launcher"
	"github.com/proctor-eval/proctor/services/verifier"
)

// Short bounds for the node-lost tests: a verifier heartbeat every
// 100 ms, a node lost after 1.5 s of silence, looked at every 100 ms.
const (
	testBeat     = 100 * time.Millisecond
	testNodeLost = 1500 * time.Millisecond
)

// nodeRun is a run of oracle cells whose solve and tests are scripted
// (the fake sandbox: solve.sh does nothing, test.sh writes reward 1 and
// takes testTime), each handed over to the verifier of the node that
// solved it, on one in-process nats-server.
type nodeRun struct {
	b    *bus.Bus
	run  string
	jobs []events.LaunchJob
	host *sandboxfake.Driver
	// tests counts the test.sh runs.
	tests atomic.Int32
	logs  testutil.SyncBuffer
	log   *slog.Logger
	// started is when the run was made, with its monotonic reading
	// (clockStep).
	started time.Time
}

func newNodeRun(t *testing.T, ctx context.Context, cells, retries int, testTime time.Duration) *nodeRun {
	t.Helper()
	t.Chdir(t.TempDir())
	b, _ := bustest.Bus(t)
	r := &nodeRun{b: b, run: events.NewID(), started: time.Now()}
	r.log = slog.New(slog.NewTextHandler(&r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			r.dump(t)
		}
	})
	tk := harnesstest.Task(t, "t", nil)
	env := harnesstest.NewEnv(t, tk, "oracle", nil)
	spec := env.SpecV
	spec.OutputDir, spec.Retries = t.TempDir(), retries
	if err := b.PutRun(ctx, bus.RunRecord{ID: r.run, Status: bus.StatusRunning, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	evs := []events.Envelope{
		events.Must(events.RunRequested, r.run, "", 0, "cli", events.RunRequestedData{Spec: spec}),
		events.Must(events.RunPlanned, r.run, "", 0, "planner", events.RunPlannedData{Cells: cells, Tasks: []string{"t"}}),
	}
	for i := 1; i <= cells; i++ {
		plan := env.PlanV
		plan.Task, plan.Repeat, plan.OutputDir = tk.Name, i, t.TempDir()
		cell := fmt.Sprintf("%s/oracle/m/%d", tk.Name, i)
		evs = append(evs, events.Must(events.CellPlanned, r.run, cell, 1, "planner", plan))
		r.jobs = append(r.jobs, events.LaunchJob{RunID: r.run, CellID: cell})
	}
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	r.host = &sandboxfake.Driver{Scripts: []sandboxfake.Script{
		{Match: "solve.sh", Stdout: "solved\n"},
		{Match: "test.sh", Files: map[string]sandbox.FileResult{verify.RewardTxt: sandboxfake.Regular("1\n")}, Do: func(sandbox.ExecSpec) error {
			r.tests.Add(1)
			time.Sleep(testTime) // the tests' own run time, not a synchronisation
			return nil
		}},
	}}
	return r
}

// start runs a service until the returned stop, which waits for it.
func start(t *testing.T, ctx context.Context, run func(context.Context) error) (stop func()) {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(sctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("service: %v", err)
		}
	}
}

func (r *nodeRun) launcher(t *testing.T, ctx context.Context, node string) (stop func()) {
	t.Helper()
	l, err := launcher.New(launcher.Config{Node: node, Host: r.host, Logger: r.log}, r.b, r.host)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, ctx, l.Run)
}

func (r *nodeRun) verifier(t *testing.T, ctx context.Context, node string) (stop func()) {
	t.Helper()
	v, err := verifier.New(verifier.Config{Node: node, Heartbeat: testBeat, Logger: r.log}, r.b, r.host)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, ctx, v.Run)
}

func (r *nodeRun) aggregator(t *testing.T, ctx context.Context) (stop func()) {
	t.Helper()
	a, err := aggregator.New(aggregator.Config{Version: "test", Logger: r.log, NodeLost: testNodeLost, NodeCheck: testBeat}, r.b)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, ctx, a.Run)
}

func (r *nodeRun) publish(t *testing.T, ctx context.Context, jobs ...events.LaunchJob) {
	t.Helper()
	for _, job := range jobs {
		if err := r.b.PublishWork(ctx, events.LaunchSubject, r.run+"/"+job.CellID, job); err != nil {
			t.Fatal(err)
		}
	}
}

// queued is how many jobs the work queue holds on subject.
func (r *nodeRun) queued(t *testing.T, ctx context.Context, subject string) uint64 {
	t.Helper()
	info, err := r.b.Work.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// poll calls cond every 50 ms until it holds; the test fails at ctx's end.
func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond): // polling state, not synchronising on time
		}
	}
}

func (r *nodeRun) cellEvents(t *testing.T) map[string][]events.Envelope {
	t.Helper()
	byCell := map[string][]events.Envelope{}
	if err := r.b.ReadRun(context.Background(), r.run, func(e events.Envelope) error {
		byCell[e.CellID] = append(byCell[e.CellID], e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return byCell
}

func (r *nodeRun) dump(t *testing.T) {
	for cell, evs := range r.cellEvents(t) {
		var ts []string
		for _, e := range evs {
			ts = append(ts, fmt.Sprintf("%s#%d", e.Type, e.Attempt))
		}
		t.Logf("cell %q: %v", cell, ts)
	}
	t.Logf("service logs:\n%s", r.logs.String())
}

// loseNode plays a worker node n1 lost for good after it solved the
// run's first cell: n1's verifier wrote heartbeats and stopped (its
// process gone: no more heartbeats), then n1's launcher solved the first
// cell, handed its verify job to n1 and stopped too. Node n2 (launcher
// and verifier) then runs the other cells. It returns the server's time
// of n1's last heartbeat, with every service still running.
func (r *nodeRun) loseNode(t *testing.T, ctx context.Context) (lastBeat time.Time, stopAll func()) {
	t.Helper()
	stopV1 := r.verifier(t, ctx, "n1")
	poll(t, ctx, "n1's first heartbeat", func() bool {
		_, ok, err := r.b.NodeSeen(ctx, "n1")
		return err == nil && ok
	})
	stopV1()
	seen, _, err := r.b.NodeSeen(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	stopA1 := r.aggregator(t, ctx)
	stopA2 := r.aggregator(t, ctx) // two aggregators: the error is published once
	stopL1 := r.launcher(t, ctx, "n1")
	r.publish(t, ctx, r.jobs[0])
	poll(t, ctx, "the first cell handed over to n1", func() bool {
		return r.queued(t, ctx, events.VerifySubject("n1")) == 1 && r.queued(t, ctx, events.LaunchSubject) == 0
	})
	stopL1()
	stopL2, stopV2 := r.launcher(t, ctx, "n2"), r.verifier(t, ctx, "n2")
	r.publish(t, ctx, r.jobs[1:]...)
	return seen.Written, func() { stopL2(); stopV2(); stopA1(); stopA2() }
}

// terminals returns a cell's terminal events by attempt.
func terminals(evs []events.Envelope) map[int][]events.Envelope {
	out := map[int][]events.Envelope{}
	for _, e := range evs {
		if projection.Terminal(e.Type) {
			out[e.Attempt] = append(out[e.Attempt], e)
		}
	}
	return out
}

// clockStep is how far the wall clock moved beyond the monotonic one
// since the run was made: 0 unless the clock was stepped (a virtual
// machine resumed from a pause has its wall clock set forward while its
// monotonic clock did not run).
func (r *nodeRun) clockStep() time.Duration {
	now := time.Now()
	return max(0, now.Round(0).Sub(r.started.Round(0))-now.Sub(r.started))
}

// checkLost asserts the lost cell's first attempt ended CellErrored, class
// infra, naming n1 and its silence, no earlier than testNodeLost after
// n1's last heartbeat and within a few checks of it. The aggregator
// measures the silence on its own clock from when it saw the last
// heartbeat, which is after that heartbeat was written; the test compares
// wall-clock times (the event's, the heartbeat's), so a step of that
// clock during the run widens the upper bound by the step.
func (r *nodeRun) checkLost(t *testing.T, e events.Envelope, lastBeat time.Time) {
	t.Helper()
	var d events.CellErroredData
	if err := events.Into(e, &d); err != nil {
		t.Fatal(err)
	}
	if e.Type != events.CellErrored || d.ErrorClass != string(events.ClassInfra) || !strings.Contains(d.Error, "node n1 lost: no heartbeat for ") {
		t.Errorf("lost cell's first attempt ended %s %+v, want CellErrored infra naming node n1", e.Type, d)
	}
	upper := testNodeLost + 3*time.Second
	if step := r.clockStep(); step > 500*time.Millisecond {
		t.Logf("the wall clock stepped %v ahead of the monotonic clock during the run", step)
		upper += step
	}
	if after := e.At.Sub(lastBeat); after < testNodeLost || after > upper {
		t.Errorf("errored %v after n1's last heartbeat, want between %v and %v", after, testNodeLost, upper)
	}
}

// TestLostNodeErrorsItsCell: the verifier of node n1 stops for good after
// a solve finished on n1 (its verify job queued on n1) and nothing of n1
// returns: the aggregators error that cell, class infra, naming n1, once
// n1 has been silent for the bound; the run finishes and every cell has
// exactly one terminal event. A verifier of n1 that comes back after the
// run does not run the tests of the errored cell: it only destroys its
// sandbox.
func TestLostNodeErrorsItsCell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newNodeRun(t, ctx, 3, 0, 0)
	lastBeat, stop := r.loseNode(t, ctx)
	rec := waitFinished(t, ctx, r.b, r.run)
	stop()
	if rec.Status != bus.StatusFinished {
		t.Errorf("run status %q", rec.Status)
	}
	byCell := r.cellEvents(t)
	for i, job := range r.jobs {
		term := terminals(byCell[job.CellID])
		if len(term) != 1 || len(term[1]) != 1 {
			t.Errorf("cell %s: terminal events by attempt %v, want one of attempt 1", job.CellID, term)
			continue
		}
		if i == 0 {
			r.checkLost(t, term[1][0], lastBeat)
		} else if term[1][0].Type != events.Verdict {
			t.Errorf("cell %s ended %s, want a Verdict", job.CellID, term[1][0].Type)
		}
	}
	if n := r.tests.Load(); n != 2 {
		t.Errorf("test.sh ran %d times, want 2 (the cells of n2)", n)
	}

	// n1 comes back: its queued verify job finds the attempt settled.
	destroyed := len(r.host.Destroyed())
	stopV1 := r.verifier(t, ctx, "n1")
	poll(t, ctx, "n1's verify job taken", func() bool { return r.queued(t, ctx, events.VerifySubject("n1")) == 0 })
	stopV1()
	if got := r.host.Destroyed(); len(got) != destroyed+1 || !slices.Contains(got, "fake-1") {
		t.Errorf("destroyed %v (before n1 returned: %d), want the lost cell's sandbox fake-1 destroyed", got, destroyed)
	}
	if n := r.tests.Load(); n != 2 {
		t.Errorf("test.sh ran %d times after n1 returned, want still 2", n)
	}
	if evs := r.cellEvents(t)[r.jobs[0].CellID]; len(evs) != len(byCell[r.jobs[0].CellID]) {
		t.Errorf("the returning verifier recorded events of the errored cell: %v", harnesstest.TypesOf(evs))
	}
}

// TestLostNodeCellRetriedElsewhere: with --retries 1 the cell errored for
// its lost node runs again as attempt 2 on the live node n2 and passes;
// each attempt has exactly one terminal event.
func TestLostNodeCellRetriedElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newNodeRun(t, ctx, 3, 1, 0)
	lastBeat, stop := r.loseNode(t, ctx)
	rec := waitFinished(t, ctx, r.b, r.run)
	stop()
	if rec.Status != bus.StatusFinished {
		t.Errorf("run status %q", rec.Status)
	}
	byCell := r.cellEvents(t)
	lost := byCell[r.jobs[0].CellID]
	term := terminals(lost)
	if len(term) != 2 || len(term[1]) != 1 || len(term[2]) != 1 {
		t.Fatalf("lost cell: terminal events by attempt %v, want one of attempts 1 and 2", term)
	}
	r.checkLost(t, term[1][0], lastBeat)
	if term[2][0].Type != events.Verdict {
		t.Errorf("retry ended %s, want a Verdict", term[2][0].Type)
	}
	for _, e := range lost {
		if e.Type == events.SandboxStarted && e.Attempt == 2 {
			var d events.SandboxStartedData
			if err := events.Into(e, &d); err != nil || d.Node != "n2" {
				t.Errorf("attempt 2's sandbox on %q, want n2", d.Node)
			}
		}
	}
	p, err := projection.Project(ctx, r.b, r.run)
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := p.Rows()
	for _, row := range rows {
		if row.Outcome != "passed" {
			t.Errorf("row %s: %s (%s)", row.CellID, row.Outcome, row.Error)
		}
		if row.CellID == r.jobs[0].CellID && (row.Attempt != 2 || row.Attempts != 2) {
			t.Errorf("lost cell's row: attempt %d of %d, want 2 of 2", row.Attempt, row.Attempts)
		}
	}
	for _, job := range r.jobs[1:] {
		if term := terminals(byCell[job.CellID]); len(term) != 1 || len(term[1]) != 1 || term[1][0].Type != events.Verdict {
			t.Errorf("cell %s: terminal events %v, want one Verdict", job.CellID, term)
		}
	}
}

// TestSlowLiveNodeIsNotLost: a node whose verifier keeps its heartbeat
// while its tests run three times the node-lost bound is not lost: the
// cell is scored, never errored.
func TestSlowLiveNodeIsNotLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newNodeRun(t, ctx, 1, 1, 3*testNodeLost)
	defer r.aggregator(t, ctx)()
	defer r.launcher(t, ctx, "n1")()
	defer r.verifier(t, ctx, "n1")()
	r.publish(t, ctx, r.jobs...)
	rec := waitFinished(t, ctx, r.b, r.run)
	if rec.Status != bus.StatusFinished {
		t.Errorf("run status %q", rec.Status)
	}
	evs := r.cellEvents(t)[r.jobs[0].CellID]
	term := terminals(evs)
	if len(term) != 1 || len(term[1]) != 1 || term[1][0].Type != events.Verdict {
		t.Errorf("terminal events %v, want one Verdict of attempt 1", term)
	}
	for _, e := range evs {
		if e.Type == events.CellErrored {
			t.Errorf("the slow live node's cell was errored: %s", e.Data)
		}
	}
}

// aggregatorAt starts an aggregator whose clock reads now.
func (r *nodeRun) aggregatorAt(t *testing.T, ctx context.Context, now func() time.Time) (stop func()) {
	t.Helper()
	a, err := aggregator.New(aggregator.Config{Version: "test", Logger: r.log, NodeLost: testNodeLost, NodeCheck: testBeat, Now: now}, r.b)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, ctx, a.Run)
}

// beat plays node's verifier heartbeat, written every testBeat from a
// machine whose clock reads at, until stop, which returns when the last
// heartbeat's write began (this process's clock); beats counts them.
func (r *nodeRun) beat(t *testing.T, ctx context.Context, node string, at time.Time) (beats *atomic.Int32, stop func() time.Time) {
	t.Helper()
	beats = new(atomic.Int32)
	data := fmt.Appendf(nil, `{"node":%q,"process":"elsewhere pid 1","at":%q}`, node, at.Format(time.RFC3339Nano))
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan time.Time, 1)
	go func() {
		var last time.Time
		defer func() { done <- last }()
		tick := time.NewTicker(testBeat)
		defer tick.Stop()
		for {
			at := time.Now() // before the write: the aggregator sees it later
			if _, err := r.b.Nodes.Put(bctx, node, data); err == nil {
				last = at
				beats.Add(1)
			}
			select {
			case <-bctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return beats, func() time.Time { cancel(); return <-done }
}

// solveOn runs the run's first cell's solve on node's launcher, which
// hands its verify job over to node and stops.
func (r *nodeRun) solveOn(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	stopL := r.launcher(t, ctx, node)
	r.publish(t, ctx, r.jobs[0])
	poll(t, ctx, "the first cell handed over to "+node, func() bool {
		return r.queued(t, ctx, events.VerifySubject(node)) == 1 && r.queued(t, ctx, events.LaunchSubject) == 0
	})
	stopL()
}

// firstTerminal waits for the first terminal event of the run's first
// cell.
func (r *nodeRun) firstTerminal(t *testing.T, ctx context.Context) events.Envelope {
	t.Helper()
	var e events.Envelope
	poll(t, ctx, "the first cell's terminal event", func() bool {
		term := terminals(r.cellEvents(t)[r.jobs[0].CellID])
		if len(term[1]) == 0 {
			return false
		}
		e = term[1][0]
		return true
	})
	return e
}

// TestLostNodeJudgedOnTheAggregatorsClock: the aggregator's clock is an
// hour ahead of, or behind, the server's, and the node's heartbeat record
// says it was written in 2000 or in 2100: while the heartbeat keeps
// changing, for three times the node-lost bound, the node is alive (its
// cell waits); once it stops, the cell is errored for its lost node
// testNodeLost after the last heartbeat, within a few checks.
func TestLostNodeJudgedOnTheAggregatorsClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration
		at   time.Time
	}{
		{"ahead", time.Hour, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"behind", -time.Hour, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := newNodeRun(t, ctx, 1, 0, 0)
			beats, stopBeat := r.beat(t, ctx, "n1", tc.at)
			defer r.aggregatorAt(t, ctx, func() time.Time { return time.Now().Add(tc.skew) })()
			r.solveOn(t, ctx, "n1")
			from := beats.Load()
			poll(t, ctx, "three node-lost bounds of heartbeats", func() bool {
				return time.Duration(beats.Load()-from)*testBeat >= 3*testNodeLost
			})
			if term := terminals(r.cellEvents(t)[r.jobs[0].CellID]); len(term[1]) != 0 {
				t.Fatalf("the cell of a node whose heartbeat changes ended %s: %s", term[1][0].Type, term[1][0].Data)
			}
			last := stopBeat()
			r.checkLost(t, r.firstTerminal(t, ctx), last)
		})
	}
}

// TestLostNodeCountedFromTheFirstLook: an aggregator (re)started after a
// node's last heartbeat, with its clock an hour ahead of the server's,
// errors the node's waiting cell no earlier than testNodeLost after it
// started (it first looked at the node then), and within a few checks.
func TestLostNodeCountedFromTheFirstLook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newNodeRun(t, ctx, 1, 0, 0)
	beats, stopBeat := r.beat(t, ctx, "n1", time.Now())
	poll(t, ctx, "n1's heartbeats", func() bool { return beats.Load() >= 3 })
	stopBeat()
	r.solveOn(t, ctx, "n1")
	started := time.Now()
	defer r.aggregatorAt(t, ctx, func() time.Time { return time.Now().Add(time.Hour) })()
	e := r.firstTerminal(t, ctx)
	var d events.CellErroredData
	if err := events.Into(e, &d); err != nil || e.Type != events.CellErrored || !strings.Contains(d.Error, "node n1 lost: no heartbeat for ") {
		t.Errorf("the cell ended %s %+v (%v), want CellErrored naming node n1", e.Type, d, err)
	}
	upper := testNodeLost + 3*time.Second + r.clockStep()
	if after := e.At.Sub(started); after < testNodeLost || after > upper {
		t.Errorf("errored %v after the aggregator started, want between %v and %v", after, testNodeLost, upper)
	}
}

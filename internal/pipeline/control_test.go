package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/services/launcher"
)

// ctlRun is a run of command cells whose solves block until the test
// releases them (a gate per cell: the test decides when each solve ends,
// so "running" is a state it controls, not a time), served by launchers
// on two nodes and an aggregator, each on its own connection to one
// in-process nats-server; the test's control actions come from another
// connection, as from another process.
type ctlRun struct {
	*cellsRun
	url  string
	b    *bus.Bus
	mu   sync.Mutex
	gate map[string]chan struct{} // cell's command → closed to end its solve
}

func newCtlRun(t *testing.T, ctx context.Context, n int, spec func(*events.RunSpec)) *ctlRun {
	t.Helper()
	t.Chdir(t.TempDir())
	_, srv := bustest.Bus(t)
	return newCtlRunAt(t, ctx, srv.ClientURL(), n, spec)
}

// newCtlRunAt is newCtlRun on the NATS server (or cluster) at url.
func newCtlRunAt(t *testing.T, ctx context.Context, url string, n int, spec func(*events.RunSpec)) *ctlRun {
	t.Helper()
	r := &ctlRun{url: url, gate: map[string]chan struct{}{}}
	r.b = r.connect(t)
	b := r.b
	r.cellsRun = &cellsRun{run: events.NewID()}
	cr := r.cellsRun
	cr.log = slog.New(slog.NewTextHandler(&cr.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			cr.dump(t, b)
		}
	})
	tk := harnesstest.Task(t, "t", nil)
	s := harnesstest.NewEnv(t, tk, "oracle", nil).SpecV
	s.OutputDir = t.TempDir()
	s.OutJSON = s.OutputDir + "/task_runs.json"
	// The spec plans the run's matrix (a requeue of an ended run plans it
	// again): one command harness per cell.
	s.TasksRoot, s.Tasks, s.Models, s.Repeats = filepath.Dir(tk.Dir), []string{"t"}, []string{"m"}, 1
	s.Harnesses = nil
	for i := range n {
		s.Harnesses = append(s.Harnesses, fmt.Sprintf("command:gate%02d {task_path}", i))
	}
	if spec != nil {
		spec(&s)
	}
	if err := b.PutRun(ctx, bus.RunRecord{ID: cr.run, Status: bus.StatusRunning, Spec: s}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx,
		events.Must(events.RunRequested, cr.run, "", 0, "cli", events.RunRequestedData{Spec: s}),
		events.Must(events.RunPlanned, cr.run, "", 0, "planner", events.RunPlannedData{Cells: n, Tasks: []string{"t"}})); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cmd := fmt.Sprintf("gate%02d", i)
		r.gate[cmd] = make(chan struct{})
		cr.jobs = append(cr.jobs, harnesstest.PlanCell(t, b, cr.run, tk, "command:"+cmd+" {task_path}"))
	}
	cr.host = &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "gate", DoContext: func(ctx context.Context, spec sandbox.ExecSpec) error {
		cr.solves.Add(1)
		for cmd, ch := range r.gate {
			if slices.ContainsFunc(spec.Cmd, func(a string) bool { return strings.Contains(a, cmd) }) {
				select {
				case <-ch:
				case <-ctx.Done(): // the solve is killed
				}
				return nil
			}
		}
		return nil
	}}}}
	return r
}

// release ends the solve of the cells with these indexes.
func (r *ctlRun) release(idx ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, i := range idx {
		ch := r.gate[fmt.Sprintf("gate%02d", i)]
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// connect is a new connection to the run's server (another process).
func (r *ctlRun) connect(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Connect(context.Background(), r.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// project projects the run's log as it is now.
func (r *ctlRun) project(t *testing.T, ctx context.Context) *projection.Projector {
	t.Helper()
	p, err := projection.Project(ctx, r.b, r.run)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitStates polls the log until cond holds of its cell states.
func (r *ctlRun) waitStates(t *testing.T, ctx context.Context, what string, cond func(map[string]int) bool) {
	t.Helper()
	poll(t, ctx, what, func() bool { return cond(r.project(t, ctx).States()) })
}

// rows reads the artifact the aggregator wrote, and checks that a replay
// of the log gives the same bytes.
func (r *ctlRun) rows(t *testing.T, ctx context.Context, rec bus.RunRecord) map[string]artifact.Result {
	t.Helper()
	data, err := os.ReadFile(rec.Artifact)
	if err != nil {
		t.Fatalf("artifact: %v", err)
	}
	js, _, err := projection.Render(r.project(t, ctx), "test")
	if err != nil {
		t.Fatal(err)
	}
	if string(js) != string(data) {
		t.Errorf("replay differs from the artifact written")
	}
	a, err := artifact.Read(rec.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]artifact.Result{}
	for _, row := range a.Results {
		out[row.CellID] = row
	}
	return out
}

// noneLeft checks that every sandbox the run started was destroyed.
func (r *ctlRun) noneLeft(t *testing.T) {
	t.Helper()
	destroyed := r.host.Destroyed()
	for _, s := range r.host.Sandboxes() {
		if !slices.Contains(destroyed, s.ID()) {
			t.Errorf("sandbox %s left", s.ID())
		}
	}
}

// TestCancelFromAnotherProcess: a cancel of the whole run, from another
// connection while cells run on two nodes, stops the running cells
// (sandboxes destroyed) and the queued ones never start; every cell is
// errored, class cancelled, naming who cancelled and why; the run ends
// cancelled with its artifact written, equal to a replay.
func TestCancelFromAnotherProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newCtlRun(t, ctx, 6, nil)
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) },
		[]launcher.Config{{Node: "n1", Concurrency: 1}, {Node: "n2", Concurrency: 1}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	r.waitStates(t, ctx, "two cells running", func(s map[string]int) bool { return s[projection.StateRunning] == 2 })

	if _, err := lifecycle.Cancel(ctx, r.connect(t), r.run, nil, "tester", "a broken task"); err != nil {
		t.Fatal(err)
	}
	rec := waitFinished(t, ctx, r.b, r.run)
	if rec.Status != bus.StatusCancelled || rec.Error != "cancelled by tester: a broken task" {
		t.Errorf("run %s: %q, want cancelled by tester", rec.Status, rec.Error)
	}
	rows := r.rows(t, ctx, rec)
	for _, job := range r.jobs {
		row := rows[job.CellID]
		if row.Outcome != artifact.OutcomeErrored || row.ErrorClass != artifact.ErrorCancelled || row.Error != "cancelled by tester: a broken task" {
			t.Errorf("cell %s: %s (%s) %q, want errored (cancelled)", job.CellID, row.Outcome, row.ErrorClass, row.Error)
		}
	}
	if n := r.solves.Load(); n != 2 {
		t.Errorf("%d solves ran, want the 2 that ran when the cancel came", n)
	}
	r.noneLeft(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestPauseContinueCancelCell: a pause from another process lets the
// running cells finish and starts no other (their jobs held by the
// launchers); a cancel of one held cell errors it; continue starts the
// rest, which pass. The log holds each action with who and why.
func TestPauseContinueCancelCell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newCtlRun(t, ctx, 5, nil)
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) },
		[]launcher.Config{{Node: "n1", Concurrency: 1}, {Node: "n2", Concurrency: 1}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	r.waitStates(t, ctx, "two cells running", func(s map[string]int) bool { return s[projection.StateRunning] == 2 })
	ctl := r.connect(t)
	if _, err := lifecycle.Pause(ctx, ctl, r.run, false, "tester", "provider outage"); err != nil {
		t.Fatal(err)
	}
	running := r.project(t, ctx)
	var first []int
	for i, job := range r.jobs {
		if running.CellState(job.CellID) == projection.StateRunning {
			first = append(first, i)
		}
	}
	r.release(first...)
	r.waitStates(t, ctx, "the two running cells done", func(s map[string]int) bool { return s["passed"] == 2 })
	// Once both launchers hold a job of the paused run, none of the
	// other cells may have started: every pull came after the pause.
	poll(t, ctx, "both launchers holding a job", func() bool {
		info, err := r.b.Work.Info(ctx)
		return err == nil && info.State.Msgs == 3 && consumerPending(t, ctx, r.b) == 2
	})
	p := r.project(t, ctx)
	if s := p.States(); s[projection.StateRunning] != 0 || s[projection.StateQueued] != 3 {
		t.Fatalf("states while paused: %v, want 3 queued", s)
	}
	if c := p.Control(); !c.Paused || c.PausedBy != "tester" || c.PausedWhy != "provider outage" {
		t.Errorf("control state %+v, want paused by tester", c)
	}
	var queued []string
	for _, job := range r.jobs {
		if p.CellState(job.CellID) == projection.StateQueued {
			queued = append(queued, job.CellID)
		}
	}
	if _, err := lifecycle.Cancel(ctx, ctl, r.run, queued[:1], "tester", "not needed"); err != nil {
		t.Fatal(err)
	}
	if _, err := lifecycle.Continue(ctx, ctl, r.run, "tester", "provider back"); err != nil {
		t.Fatal(err)
	}
	r.release(0, 1, 2, 3, 4)
	rec := waitFinished(t, ctx, r.b, r.run)
	if rec.Status != bus.StatusFinished {
		t.Errorf("run %s, want finished", rec.Status)
	}
	rows := r.rows(t, ctx, rec)
	for _, job := range r.jobs {
		want := artifact.OutcomePassed
		if job.CellID == queued[0] {
			want = artifact.OutcomeErrored
		}
		if row := rows[job.CellID]; row.Outcome != want || want == artifact.OutcomeErrored && row.ErrorClass != artifact.ErrorCancelled {
			t.Errorf("cell %s: %s (%s), want %s", job.CellID, row.Outcome, row.ErrorClass, want)
		}
	}
	if n := r.solves.Load(); n != 4 {
		t.Errorf("%d solves, want 4 (the cancelled cell never started)", n)
	}
	var actions []string
	for _, c := range r.project(t, ctx).Controls() {
		actions = append(actions, c.Action+" by "+c.By+": "+c.Why)
	}
	want := []string{"pause by tester: provider outage", "cancel by tester: not needed", "continue by tester: provider back"}
	if !slices.Equal(actions, want) {
		t.Errorf("control actions %q, want %q", actions, want)
	}
	r.noneLeft(t)
}

// consumerPending is the launchers' jobs in hand (delivered, not acked).
func consumerPending(t *testing.T, ctx context.Context, b *bus.Bus) int {
	c, err := b.Work.Consumer(ctx, "launcher")
	if err != nil {
		return -1
	}
	info, err := c.Info(ctx)
	if err != nil {
		return -1
	}
	return info.NumAckPending
}

// TestErroredFractionCapPauses: cells whose solve cannot run (every
// attempt errors) trip --max-errored-fraction after the minimum count:
// the run pauses, the cap and its reason in the log and the run index, and
// no more than one more cell starts; a cancel then ends it.
func TestErroredFractionCapPauses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newCtlRun(t, ctx, 8, func(s *events.RunSpec) {
		s.Caps = events.RunCaps{MaxErroredFraction: 0.5, ErroredMinCount: 3}
	})
	// Each solve runs until the test releases it, then fails as a broken
	// image would: the test ends the cells one by one.
	gated := r.host.Scripts[0].DoContext
	r.host.Scripts[0].DoContext = func(ctx context.Context, spec sandbox.ExecSpec) error {
		_ = gated(ctx, spec)
		return fmt.Errorf("the image never builds")
	}
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) }, []launcher.Config{{Node: "n1", Concurrency: 1}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	for i := range 3 {
		r.release(i)
		r.waitStates(t, ctx, fmt.Sprintf("%d cells errored", i+1), func(s map[string]int) bool { return s[artifact.OutcomeErrored] == i+1 })
	}
	poll(t, ctx, "the run paused by its cap", func() bool {
		rec, err := r.b.GetRun(ctx, r.run)
		return err == nil && rec.Control.Paused
	})
	r.release(3, 4, 5, 6, 7)
	rec, _ := r.b.GetRun(ctx, r.run)
	if c := rec.Control; c.PausedCap != "max_errored_fraction" || c.PausedBy != "cap" || c.PausedWhy == "" {
		t.Errorf("control %+v, want paused by cap max_errored_fraction", c)
	}
	// The cap trips at the 3rd errored cell; the launcher may have taken
	// the 4th before the pause reached it, never a 5th.
	poll(t, ctx, "the launcher holding a job", func() bool {
		return consumerPending(t, ctx, r.b) == 1 && r.project(t, ctx).States()[projection.StateRunning] == 0
	})
	if n := r.solves.Load(); n < 3 || n > 4 {
		t.Errorf("%d cells started, want 3 (the cap) or 4 (one in flight)", n)
	}
	if _, err := lifecycle.Cancel(ctx, r.connect(t), r.run, nil, "tester", "broken image"); err != nil {
		t.Fatal(err)
	}
	rec = waitFinished(t, ctx, r.b, r.run)
	if rec.Status != bus.StatusCancelled {
		t.Errorf("status %s", rec.Status)
	}
	if n := r.solves.Load(); n > 4 {
		t.Errorf("%d cells started after the cancel", n)
	}
	r.noneLeft(t)
}

// controlScenario drives, from another connection, every control action
// on a run whose cells run on two launcher nodes: a pause (the running
// cells go on, no other starts), a cancel of one running cell (stopped,
// errored cancelled, its sandbox destroyed), a requeue of it while the run
// is live (a new attempt), a continue; then every cell passes, the
// requeued one in its second attempt, the artifact equals a replay, and no
// sandbox is left.
func controlScenario(t *testing.T, ctx context.Context, r *ctlRun) {
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) },
		[]launcher.Config{{Node: "n1", Concurrency: 1, AckWait: 15 * time.Second}, {Node: "n2", Concurrency: 1, AckWait: 15 * time.Second}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	r.waitStates(t, ctx, "two cells running", func(s map[string]int) bool { return s[projection.StateRunning] == 2 })
	ctl := r.connect(t)
	if _, err := lifecycle.Pause(ctx, ctl, r.run, false, "tester", "look at a cell"); err != nil {
		t.Fatal(err)
	}
	p := r.project(t, ctx)
	var running []int
	for i, job := range r.jobs {
		if p.CellState(job.CellID) == projection.StateRunning {
			running = append(running, i)
		}
	}
	victim := r.jobs[running[0]].CellID
	if _, err := lifecycle.Cancel(ctx, ctl, r.run, []string{victim}, "tester", "stuck"); err != nil {
		t.Fatal(err)
	}
	r.release(running[1])
	r.waitStates(t, ctx, "one passed, one cancelled", func(s map[string]int) bool {
		return s[artifact.OutcomePassed] == 1 && s[artifact.OutcomeErrored] == 1
	})
	poll(t, ctx, "both launchers holding a job", func() bool { return consumerPending(t, ctx, r.b) == 2 })
	if s := r.project(t, ctx).States(); s[projection.StateRunning] != 0 {
		t.Fatalf("a cell started while paused: %v", s)
	}
	picked, err := lifecycle.RequeueLive(ctx, ctl, r.run, lifecycle.Selector{Outcomes: []string{"errored"}, Classes: []string{"cancelled"}}, "tester", "try it again")
	if err != nil || len(picked) != 1 || picked[0].CellID != victim {
		t.Fatalf("requeue: %v, %v; want %s", picked, err, victim)
	}
	r.release(0, 1, 2, 3, 4, 5)
	if _, err := lifecycle.Continue(ctx, ctl, r.run, "tester", "go on"); err != nil {
		t.Fatal(err)
	}
	rec := waitFinished(t, ctx, r.b, r.run)
	if rec.Status != bus.StatusFinished {
		t.Errorf("run %s, want finished", rec.Status)
	}
	rows := r.rows(t, ctx, rec)
	for _, job := range r.jobs {
		row := rows[job.CellID]
		if row.Outcome != artifact.OutcomePassed {
			t.Errorf("cell %s: %s (%s) %s", job.CellID, row.Outcome, row.ErrorClass, row.Error)
		}
		if want := map[bool]int{true: 2, false: 0}[job.CellID == victim]; row.Attempts != want {
			t.Errorf("cell %s: attempts %d, want %d", job.CellID, row.Attempts, want)
		}
	}
	var actions []string
	for _, c := range r.project(t, ctx).Controls() {
		actions = append(actions, c.Action)
	}
	if want := []string{"pause", "cancel", "requeue", "continue"}; !slices.Equal(actions, want) {
		t.Errorf("control actions %v, want %v", actions, want)
	}
	r.noneLeft(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestControlScenario runs controlScenario on one in-process nats-server.
func TestControlScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	controlScenario(t, ctx, newCtlRun(t, ctx, 6, nil))
}

// TestControlScenarioOnACluster runs controlScenario on a 3-node
// JetStream cluster of real nats-server processes (streams at R3), the
// services and the control each on their own connection.
func TestControlScenarioOnACluster(t *testing.T) {
	t.Chdir(t.TempDir())
	_, url := natsCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	controlScenario(t, ctx, newCtlRunAt(t, ctx, url, 6, nil))
}

// TestCostCapPausesWithinOneCell: cells whose agents report $0.30 each
// trip --max-cost-usd 1 at the 4th cell's cost: the run pauses, naming the
// cap and the cost, and at most one more cell starts; after a continue the
// cap does not trip again and every cell passes.
func TestCostCapPausesWithinOneCell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newCtlRun(t, ctx, 8, func(s *events.RunSpec) { s.Caps = events.RunCaps{MaxCostUSD: 1} })
	r.host.Scripts[0].Stdout = `{"_tag":"Usage","model":"m","input_tokens":1000,"output_tokens":100,"cost_usd":0.3}` + "\n"
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) }, []launcher.Config{{Node: "n1", Concurrency: 1}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	for i := range 4 {
		r.release(i)
		r.waitStates(t, ctx, fmt.Sprintf("%d cells passed", i+1), func(s map[string]int) bool { return s[artifact.OutcomePassed] == i+1 })
	}
	poll(t, ctx, "the run paused by its cost cap", func() bool {
		rec, err := r.b.GetRun(ctx, r.run)
		return err == nil && rec.Control.Paused
	})
	r.release(4, 5, 6, 7)
	poll(t, ctx, "the launcher holding a job", func() bool {
		return consumerPending(t, ctx, r.b) == 1 && r.project(t, ctx).States()[projection.StateRunning] == 0
	})
	rec, _ := r.b.GetRun(ctx, r.run)
	if c := rec.Control; c.PausedCap != "max_cost_usd" || !strings.Contains(c.PausedWhy, "$1.2000") {
		t.Errorf("control %+v, want paused by max_cost_usd at $1.2", c)
	}
	if n := r.solves.Load(); n < 4 || n > 5 {
		t.Errorf("%d cells started, want 4 (the cap) or 5 (one in flight)", n)
	}
	if _, err := lifecycle.Continue(ctx, r.connect(t), r.run, "tester", "budget raised"); err != nil {
		t.Fatal(err)
	}
	rec = waitFinished(t, ctx, r.b, r.run)
	rows := r.rows(t, ctx, rec)
	for _, job := range r.jobs {
		if row := rows[job.CellID]; row.Outcome != artifact.OutcomePassed {
			t.Errorf("cell %s: %s %s", job.CellID, row.Outcome, row.Error)
		}
	}
	var pauses int
	for _, c := range r.project(t, ctx).Controls() {
		if c.Action == events.ControlPause {
			pauses++
		}
	}
	if pauses != 1 {
		t.Errorf("%d pauses, want the cap's one", pauses)
	}
}

// TestRequeueAnEndedRun: a run that finished with a cancelled cell is
// reopened by a requeue of its errored cells (as `runs requeue` does for
// an ended run: a new epoch, driven by the requeuing process, here served
// by the running services): the cell runs again as attempt 2 and passes,
// the others keep their verdicts (not run again), and the run finishes
// again with its artifact equal to a replay.
func TestRequeueAnEndedRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newCtlRun(t, ctx, 3, nil)
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) }, []launcher.Config{{Node: "n1", Concurrency: 3}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	r.waitStates(t, ctx, "three cells running", func(s map[string]int) bool { return s[projection.StateRunning] == 3 })
	victim := r.jobs[0].CellID
	if _, err := lifecycle.Cancel(ctx, r.connect(t), r.run, []string{victim}, "tester", "wrong model"); err != nil {
		t.Fatal(err)
	}
	r.release(1, 2)
	rec := waitFinished(t, ctx, r.b, r.run)
	if rows := r.rows(t, ctx, rec); rows[victim].ErrorClass != artifact.ErrorCancelled {
		t.Fatalf("victim %+v", rows[victim])
	}
	solved := r.solves.Load()

	r.release(0)
	ctl := r.connect(t)
	sel := lifecycle.Selector{Outcomes: []string{"errored"}}
	if _, err := lifecycle.RequeueLive(ctx, ctl, r.run, sel, "tester", ""); err == nil {
		t.Fatal("a live requeue of an ended run was accepted")
	}
	rq, err := lifecycle.PrepareRequeue(ctx, ctl, r.run, sel, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rq.Again) != 1 || rq.Again[0].CellID != victim || len(rq.Kept) != 2 {
		t.Fatalf("requeue again %v kept %v", rq.Again, rq.Kept)
	}
	if err := rq.Requeued(ctx, ctl, "tester", "right model"); err != nil {
		t.Fatal(err)
	}
	if err := rq.Begin(ctx, ctl, "tester", "", ""); err != nil {
		t.Fatal(err)
	}
	var final bus.RunRecord
	poll(t, ctx, "the run finished again", func() bool {
		final, err = r.b.GetRun(ctx, r.run)
		return err == nil && final.Epoch == 1 && final.Terminal()
	})
	if final.Status != bus.StatusFinished {
		t.Errorf("status %s", final.Status)
	}
	rows := r.rows(t, ctx, final)
	for _, job := range r.jobs {
		row := rows[job.CellID]
		want := map[bool]int{true: 2, false: 0}[job.CellID == victim]
		if row.Outcome != artifact.OutcomePassed || row.Attempts != want {
			t.Errorf("cell %s: %s attempts %d, want passed in %d", job.CellID, row.Outcome, row.Attempts, want)
		}
	}
	if n := r.solves.Load() - solved; n != 1 {
		t.Errorf("%d solves after the requeue, want 1", n)
	}
	r.noneLeft(t)
}

// TestCancelStopsTheVerifier: a cell cancelled while its tests run is not
// scored: the verifier stops the tests, destroys the sandbox and errors
// the cell, class cancelled; the run ends cancelled.
func TestCancelStopsTheVerifier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := newNodeRun(t, ctx, 1, 0, 0)
	r.host.Scripts[1].Do = nil
	r.host.Scripts[1].DoContext = func(ctx context.Context, _ sandbox.ExecSpec) error {
		r.tests.Add(1)
		<-ctx.Done() // tests that run until they are stopped
		return nil
	}
	defer r.launcher(t, ctx, "n1")()
	defer r.verifier(t, ctx, "n1")()
	defer r.aggregator(t, ctx)()
	r.publish(t, ctx, r.jobs...)
	poll(t, ctx, "the tests running", func() bool { return r.tests.Load() == 1 })
	if _, err := lifecycle.Cancel(ctx, r.b, r.run, nil, "tester", "too slow"); err != nil {
		t.Fatal(err)
	}
	rec := waitFinished(t, ctx, r.b, r.run)
	if rec.Status != bus.StatusCancelled {
		t.Errorf("status %s", rec.Status)
	}
	evs := r.cellEvents(t)[r.jobs[0].CellID]
	last := evs[len(evs)-1]
	var d events.CellErroredData
	if last.Type != events.CellErrored || last.Source != "verifier" || events.Into(last, &d) != nil || d.ErrorClass != "cancelled" {
		t.Errorf("last event %s from %s: %+v", last.Type, last.Source, d)
	}
	for _, e := range evs {
		if e.Type == events.Verdict {
			t.Errorf("a cancelled cell was scored")
		}
	}
	for _, s := range r.host.Sandboxes() {
		if !slices.Contains(r.host.Destroyed(), s.ID()) {
			t.Errorf("sandbox %s left", s.ID())
		}
	}
}

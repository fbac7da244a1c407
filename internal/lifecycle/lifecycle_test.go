package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
	"github.com/proctor-eval/proctor/services/planner"
)

// run is a run of real tasks on disk recorded straight in an in-process
// event log, as the planner and the services would record it.
type run struct {
	b     *bus.Bus
	id    string
	root  string // the tasks root
	base  string // the spec's base dir
	spec  events.RunSpec
	cells []planner.Cell
}

// writeFiles writes files (path → content) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// newRun writes tasks a and b (Harbor layout) under a new root and
// returns a run of them through harnesses with repeats, not yet started.
func newRun(t testing.TB, b *bus.Bus, repeats int, harnesses ...string) *run {
	t.Helper()
	return newRunIn(t, b, t.TempDir(), repeats, harnesses...)
}

// newRunIn is newRun with base as the spec's base dir, where relative
// harness paths are resolved.
func newRunIn(t testing.TB, b *bus.Bus, base string, repeats int, harnesses ...string) *run {
	t.Helper()
	root := filepath.Join(base, "tasks")
	for _, n := range []string{"a", "b"} {
		writeFiles(t, filepath.Join(root, n), map[string]string{
			"task.toml": "version = \"1.0\"\n", "instruction.md": "Do " + n + ".\n",
			"environment/Dockerfile": "FROM debian:bookworm-slim\n", "tests/test.sh": "#!/bin/bash\nexit 0\n",
			"solution/solve.sh": "#!/bin/bash\ntrue\n",
		})
	}
	r := &run{b: b, id: events.NewID(), root: root, base: base}
	r.spec = events.RunSpec{BaseDir: base, TasksRoot: root, All: true, Harnesses: harnesses, Models: []string{"m"},
		Repeats: repeats, OutputDir: filepath.Join(base, "out"), AgentGraceSec: 10}
	cells, err := planner.Matrix(r.spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.cells = cells
	return r
}

// start records the run (lifecycle.Start), then its plan, as the planner
// would: RunPlanned and a CellPlanned per cell.
func (r *run) start(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	id, err := lifecycle.Identify(r.spec, r.cells, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.Start(ctx, r.b, lifecycle.Request{RunID: r.id, Spec: r.spec, Identity: id,
		Owner: "host-a pid 1", Host: "host-a", Version: "test"}); err != nil {
		t.Fatal(err)
	}
	evs := []events.Envelope{events.Must(events.RunPlanned, r.id, "", 0, "planner", events.RunPlannedData{Cells: len(r.cells)})}
	for _, c := range r.cells {
		evs = append(evs, events.Must(events.CellPlanned, r.id, c.ID, 1, "planner", events.CellPlannedData{
			Task: c.Task.Name, Harness: c.Harness.Name, Model: c.Model, Repeat: c.Repeat, TaskDir: c.Task.Dir,
			TaskRevision: c.Task.Revision, OutputDir: planner.CellDir(r.spec.OutputDir, c)}))
	}
	r.publish(t, evs...)
}

func (r *run) publish(t testing.TB, evs ...events.Envelope) {
	t.Helper()
	if err := r.b.PublishAll(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
}

// pass records a verdict of reward 1 for the cell's attempt.
func (r *run) pass(t testing.TB, cell string, attempt int) {
	t.Helper()
	one := 1.0
	r.publish(t, events.Must(events.Verdict, r.id, cell, attempt, "verifier", events.VerdictData{Reward: &one}))
}

// errored records the cell's attempt errored with class.
func (r *run) errored(t testing.TB, cell string, attempt int, class events.ErrorClass, why string) {
	t.Helper()
	r.publish(t, events.Must(events.CellErrored, r.id, cell, attempt, "verifier", events.CellErroredData{ErrorClass: string(class), Error: why}))
}

// die leaves the run as a killed owner leaves it: running, its lease
// ended.
func (r *run) die(t testing.TB) {
	t.Helper()
	if err := r.b.UpdateRun(context.Background(), r.id, func(rec *bus.RunRecord) {
		rec.Status = bus.StatusRunning
		rec.Renew(time.Now().Add(-time.Hour), time.Minute)
	}); err != nil {
		t.Fatal(err)
	}
}

func (r *run) record(t testing.TB) bus.RunRecord {
	t.Helper()
	rec, err := r.b.GetRun(context.Background(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// logged returns the run's events of type typ, in log order.
func (r *run) logged(t testing.TB, typ events.Type) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	if err := r.b.ReadRun(context.Background(), r.id, func(e events.Envelope) error {
		if e.Type == typ {
			out = append(out, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(ds []lifecycle.Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.CellID)
	}
	return out
}

// TestStartRecordsTheRun: Start writes the index record (requested, the
// spec, the identity and its inputs, the owner and a lease ahead of now)
// before RunRequested, which carries the spec and the version.
func TestStartRecordsTheRun(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := newRun(t, b, 1, "oracle")
	r.start(t)
	rec := r.record(t)
	if rec.Status != bus.StatusRequested || rec.Owner != "host-a pid 1" || !strings.HasPrefix(rec.Identity, "sha256:") ||
		rec.Inputs["task a revision"] == "" || rec.Spec.TasksRoot != r.root {
		t.Errorf("record %+v", rec)
	}
	if rec.LeaseExpired(time.Now()) || rec.LeaseExpired(time.Now().Add(bus.LeaseDuration/2)) {
		t.Errorf("lease until %s is not ahead of now", rec.LeaseUntil)
	}
	req := r.logged(t, events.RunRequested)
	var d events.RunRequestedData
	if len(req) != 1 || events.Into(req[0], &d) != nil || d.Spec.TasksRoot != r.root || d.ProctorVersion != "test" || d.Host != "host-a" {
		t.Errorf("RunRequested %+v", req)
	}
}

// TestHoldLeaseRenews: the lease moves forward every LeaseDuration/6
// while HoldLease runs, and stops moving when its context ends.
func TestHoldLeaseRenews(t *testing.T) {
	b, _ := bustest.Bus(t)
	was := bus.LeaseDuration
	bus.LeaseDuration = 600 * time.Millisecond
	t.Cleanup(func() { bus.LeaseDuration = was })
	r := newRun(t, b, 1, "oracle")
	r.start(t)
	first := r.record(t).LeaseUntil
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); lifecycle.HoldLease(ctx, b, r.id) }()
	for deadline := time.Now().Add(10 * time.Second); r.record(t).LeaseUntil == first; {
		if time.Now().After(deadline) {
			t.Fatal("the lease was never renewed")
		}
		time.Sleep(20 * time.Millisecond) // polling the index
	}
	cancel()
	<-done
	last := r.record(t).LeaseUntil
	time.Sleep(300 * time.Millisecond) // three renewal periods: none may come
	if got := r.record(t).LeaseUntil; got != last {
		t.Errorf("the lease moved after HoldLease ended: %s → %s", last, got)
	}
}

// TestRecoverDeadEndsUnfinishedRuns: a run the index shows running (its
// owner gone) is ended as interrupted, with its reason and how to resume
// it on the record, its RunFinished published and its partial artifact
// written (the cell without a verdict an errored row); a finished run is
// left alone.
func TestRecoverDeadEndsUnfinishedRuns(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	dead := newRun(t, b, 1, "oracle")
	dead.start(t)
	dead.pass(t, dead.cells[0].ID, 1)
	dead.die(t)
	done := bus.RunRecord{ID: events.NewID(), Status: bus.StatusFinished}
	if err := b.PutRun(ctx, done); err != nil {
		t.Fatal(err)
	}
	found, err := lifecycle.RecoverDead(ctx, b, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].ID != dead.id || found[0].Err != nil || !strings.Contains(found[0].Why, "proctor runs resume "+dead.id) {
		t.Fatalf("recovered %+v, want only the dead run", found)
	}
	rec := dead.record(t)
	if rec.Status != bus.StatusInterrupted || rec.Error != found[0].Why || rec.Artifact == "" {
		t.Errorf("dead run's record %+v", rec)
	}
	if n := len(dead.logged(t, events.RunFinished)); n != 1 {
		t.Errorf("%d RunFinished events, want 1", n)
	}
	a, err := artifact.Read(rec.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, row := range a.Results {
		outcomes = append(outcomes, row.Outcome)
	}
	if !slices.Equal(outcomes, []string{"passed", "errored"}) {
		t.Errorf("partial artifact outcomes %v", outcomes)
	}
	if got, _ := b.GetRun(ctx, done.ID); got.Status != bus.StatusFinished || got.Error != "" {
		t.Errorf("the finished run was touched: %+v", got)
	}
}

// TestAbandonWritesWhatFinished: an abandoned run ends with the status
// given and the artifact of what finished.
func TestAbandonWritesWhatFinished(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := newRun(t, b, 2, "oracle")
	r.start(t)
	r.pass(t, r.cells[0].ID, 1)
	rec, c, err := lifecycle.Abandon(b, nil, r.id, bus.StatusFailed, "test")
	if err != nil || c != (lifecycle.Cleanup{}) {
		t.Fatalf("abandon: %v %+v", err, c)
	}
	if rec.Status != bus.StatusFailed || rec.Counts["passed"] != 1 || rec.Counts["errored"] != 3 || rec.Artifact == "" {
		t.Errorf("record %+v", rec)
	}
}

// TestPrepareResumeRefuses: resume refuses, as the caller's input, a run
// whose owner holds its lease, a finished run, a run never planned, and a
// run whose task changed, naming the task's revision.
func TestPrepareResumeRefuses(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	refusal := func(r *run, want string) {
		t.Helper()
		_, err := lifecycle.PrepareResume(ctx, b, r.id, time.Now(), nil)
		var ref *lifecycle.Refused
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), want) {
			t.Errorf("PrepareResume: %v, want a refusal saying %q", err, want)
		}
	}
	alive := newRun(t, b, 1, "oracle")
	alive.start(t)
	refusal(alive, "is alive: host-a pid 1 holds its lease until")

	finished := newRun(t, b, 1, "oracle")
	finished.start(t)
	if err := b.UpdateRun(ctx, finished.id, func(r *bus.RunRecord) { r.Status = bus.StatusFinished }); err != nil {
		t.Fatal(err)
	}
	refusal(finished, "nothing to resume")

	unplanned := newRun(t, b, 1, "oracle")
	if err := lifecycle.Start(ctx, b, lifecycle.Request{RunID: unplanned.id, Spec: unplanned.spec}); err != nil {
		t.Fatal(err)
	}
	unplanned.die(t)
	refusal(unplanned, "was never planned")

	changed := newRun(t, b, 1, "oracle")
	changed.start(t)
	changed.die(t)
	writeFiles(t, filepath.Join(changed.root, "a"), map[string]string{"instruction.md": "Do it otherwise.\n"})
	refusal(changed, "task a revision changed")
}

// TestResumeRunsUnfinishedCellsAgain: after its owner died, a run's cells
// with a verdict are kept and those without one run again; Begin moves
// the record to epoch 1 (running, the new owner, a fresh lease) before
// RunResumed names the cells, and queues one launch job per cell run
// again, as the attempt after its last.
func TestResumeRunsUnfinishedCellsAgain(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	r := newRun(t, b, 2, "oracle")
	r.start(t)
	a1, a2, b1, b2 := r.cells[0].ID, r.cells[1].ID, r.cells[2].ID, r.cells[3].ID
	r.pass(t, a1, 1)
	r.pass(t, b2, 1)
	r.publish(t, events.Must(events.Started, r.id, a2, 1, "launcher", events.StartedData{}))
	r.die(t)
	if _, err := lifecycle.RecoverDead(ctx, b, "test"); err != nil {
		t.Fatal(err)
	}
	res, err := lifecycle.PrepareResume(ctx, b, r.id, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 1 || !slices.Equal(ids(res.Again), []string{a2, b1}) || !slices.Equal(ids(res.Kept), []string{a1, b2}) {
		t.Fatalf("epoch %d, again %v, kept %v", res.Epoch, ids(res.Again), ids(res.Kept))
	}
	if err := res.Begin(ctx, b, "host-b pid 2", "", ""); err != nil {
		t.Fatal(err)
	}
	// A run of a store without the bucket stores nothing.
	if _, err := trees.Lookup(ctx, b); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the resume of a single-process run made the bucket: %v", err)
	}
	rec := r.record(t)
	if rec.Status != bus.StatusRunning || rec.Epoch != 1 || rec.Owner != "host-b pid 2" || rec.Error != "" || rec.LeaseExpired(time.Now()) {
		t.Errorf("record after Begin %+v", rec)
	}
	resumed := r.logged(t, events.RunResumed)
	var d events.RunResumedData
	if len(resumed) != 1 || events.Into(resumed[0], &d) != nil || d.Epoch != 1 || !slices.Equal(d.Cells, []string{a2, b1}) || d.Owner != "host-b pid 2" {
		t.Errorf("RunResumed %+v", d)
	}
	info, err := b.Work.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("%d launch jobs queued, want 2", info.State.Msgs)
	}
	m, err := b.Work.GetLastMsgForSubject(ctx, events.LaunchSubject)
	if err != nil {
		t.Fatal(err)
	}
	var job events.LaunchJob
	// b1's last attempt is its plan's (CellPlanned is attempt 1): it runs
	// again as attempt 2.
	if err := json.Unmarshal(m.Data, &job); err != nil || job.CellID != b1 || job.Epoch != 1 || job.AttemptBase != 1 {
		t.Errorf("last launch job %+v (%v)", job, err)
	}
	if _, err := lifecycle.PrepareResume(ctx, b, r.id, time.Now(), nil); err == nil || !strings.Contains(err.Error(), "is alive: host-b pid 2") {
		t.Errorf("a second resume while the first holds the lease: %v", err)
	}
}

// TestIdentityNoticesChangedArmFiles: the identity hashes what each arm
// brings into its cells (harness.Arm.IdentityInputs): a file changed
// below a probe's skill directory, or in a subdirectory of an agent
// directory, changes it, and resume refuses the run naming the input.
func TestIdentityNoticesChangedArmFiles(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	for _, c := range []struct {
		harness, dir, file, input string
		files                     map[string]string
	}{
		{"docker-probe:skills/s", "skills/s", "scripts/run.sh", "harness docker-probe:skills/s skill dir changed",
			map[string]string{"SKILL.md": "---\nname: s\ndescription: d\n---\n", "scripts/run.sh": "echo 1\n"}},
		{"agent:agents/x", "agents/x", "lib/helper.sh", "harness agent:agents/x agent dir changed",
			map[string]string{"agent.toml": "run = \"bash /opt/proctor/agent/lib/helper.sh\"\n", "lib/helper.sh": "echo 1\n"}},
	} {
		t.Run(c.harness, func(t *testing.T) {
			base := t.TempDir()
			writeFiles(t, filepath.Join(base, c.dir), c.files)
			r := newRunIn(t, b, base, 1, c.harness)
			r.start(t)
			r.die(t)
			writeFiles(t, filepath.Join(base, c.dir), map[string]string{c.file: "echo 2\n"})
			_, err := lifecycle.PrepareResume(ctx, b, r.id, time.Now(), nil)
			if err == nil || !strings.Contains(err.Error(), c.input) {
				t.Fatalf("resume after %s changed: %v, want a refusal naming %q", c.file, err, c.input)
			}
		})
	}
}

// TestResumeRunsInfraErroredCellsAgain: a cell whose attempt ended
// errored by proctor's own machinery (class infra: its container was
// killed mid-verify, and the redelivered verify job found it) runs again
// on resume, as --retries would run it, instead of keeping its error; a
// cell errored by the agent (solver_error) keeps it, as a passed one
// does. Each decision says why.
func TestResumeRunsInfraErroredCellsAgain(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	r := newRun(t, b, 2, "oracle")
	r.start(t)
	a1, a2, b1, b2 := r.cells[0].ID, r.cells[1].ID, r.cells[2].ID, r.cells[3].ID
	r.pass(t, a1, 1)
	killed := "the verify job was delivered again after its VerifyStarted: the sandbox was stopped mid-verify"
	r.errored(t, a2, 1, events.ClassInfra, killed)
	r.errored(t, b1, 1, events.ClassSolverError, "the solver made no attempt")
	r.die(t)
	if _, err := lifecycle.RecoverDead(ctx, b, "test"); err != nil {
		t.Fatal(err)
	}
	res, err := lifecycle.PrepareResume(ctx, b, r.id, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(res.Again), []string{a2, b2}) || !slices.Equal(ids(res.Kept), []string{a1, b1}) {
		t.Fatalf("again %v, kept %v; want the infra-errored and the unfinished cell run again", ids(res.Again), ids(res.Kept))
	}
	why := map[string]string{}
	for _, d := range append(res.Again, res.Kept...) {
		why[d.CellID] = d.Why
	}
	for cell, want := range map[string]string{a1: "passed (reward 1)", a2: "errored (infra): " + killed,
		b1: "errored (solver_error): the solver made no attempt", b2: "no terminal event"} {
		if why[cell] != want {
			t.Errorf("%s: why %q, want %q", cell, why[cell], want)
		}
	}
	if err := res.Begin(ctx, b, "host-b pid 2", "", ""); err != nil {
		t.Fatal(err)
	}
	m, err := b.Work.GetLastMsgForSubject(ctx, events.LaunchSubject)
	if err != nil {
		t.Fatal(err)
	}
	var job events.LaunchJob
	if err := json.Unmarshal(m.Data, &job); err != nil || job.CellID != b2 {
		t.Fatalf("last launch job %+v (%v), want %s's", job, err, b2)
	}
	first, err := b.Work.GetMsg(ctx, m.Sequence-1)
	if err != nil {
		t.Fatal(err)
	}
	var firstJob events.LaunchJob
	if err := json.Unmarshal(first.Data, &firstJob); err != nil || firstJob.CellID != a2 || firstJob.AttemptBase != 1 {
		t.Errorf("launch job of the infra-errored cell %+v (%v), want attempt 2 of %s", firstJob, err, a2)
	}
}

// TestIdentityHoldsTheAgentUser: who the agents run as is part of a run's
// identity (--agent-user task hashes apart from sealed and names its
// input); sealed, the default, adds no input, so a run recorded before
// the flag existed keeps its identity.
func TestIdentityHoldsTheAgentUser(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := newRunIn(t, b, t.TempDir(), 1, "oracle")
	ident := func(mode string) lifecycle.Identity {
		s := r.spec
		s.AgentUser = mode
		id, err := lifecycle.Identify(s, r.cells, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	old, sealed, task := ident(""), ident("sealed"), ident("task")
	if old.Hash != sealed.Hash {
		t.Errorf("sealed changed the identity of a run without --agent-user: %s vs %s", sealed.Hash, old.Hash)
	}
	if task.Hash == sealed.Hash {
		t.Errorf("--agent-user task has the identity of sealed: %s", task.Hash)
	}
	if d := lifecycle.Changes(sealed.Inputs, task.Inputs); !slices.Equal(d, []string{"agent user (--agent-user) is new"}) {
		t.Errorf("Changes(sealed → task) = %q, want the agent user named", d)
	}
}

// TestResumeStoresTreesAgain: on a cluster whose bucket lost a run's
// trees to `proctor gc` after the run ended, resume stores again the task
// tree of each cell it runs again, under the revision its CellPlanned
// names, and not the tree of a cell whose verdict it keeps.
func TestResumeStoresTreesAgain(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	r := newRun(t, b, 1, "oracle")
	if _, err := planner.StoreInputs(ctx, b, r.spec, r.cells, nil); err != nil {
		t.Fatal(err)
	}
	r.start(t)
	a, bb := r.cells[0], r.cells[1]
	r.pass(t, a.ID, 1)
	r.die(t)
	if _, err := lifecycle.RecoverDead(ctx, b, "test"); err != nil {
		t.Fatal(err)
	}
	store, err := trees.Lookup(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.cells {
		if err := trees.Remove(ctx, b, trees.Stored{Name: c.Task.Revision}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := lifecycle.PrepareResume(ctx, b, r.id, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(res.Again), []string{bb.ID}) {
		t.Fatalf("again %v, want %s", ids(res.Again), bb.ID)
	}
	if err := res.Begin(ctx, b, "host-b pid 2", "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GetInfo(ctx, bb.Task.Revision); err != nil {
		t.Errorf("the tree of the cell run again, %s: %v", bb.Task.Revision, err)
	}
	if _, err := store.GetInfo(ctx, a.Task.Revision); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("the tree of the kept cell was stored again: %v", err)
	}
}

// TestSelectorExplain: a requeue that picks nothing says what it asked for
// and what the run's cells are instead: errored cells of a class --class
// leaves out, errored cells the task files decide (refused,
// unresolved_env: a requeue never runs them), or, when no cell has the
// outcome, the run's cells by outcome.
func TestSelectorExplain(t *testing.T) {
	errored := func(class string) artifact.Result {
		return artifact.Result{Outcome: artifact.OutcomeErrored, ErrorClass: class}
	}
	rows := []artifact.Result{
		{Outcome: artifact.OutcomePassed}, errored(artifact.ErrorCancelled),
		errored(artifact.ErrorUnresolvedEnv), errored(artifact.ErrorUnresolvedEnv),
	}
	for _, c := range []struct {
		sel  lifecycle.Selector
		want []string
	}{
		{lifecycle.Selector{Outcomes: []string{"errored"}, Classes: []string{"infra"}}, []string{
			"no cell to run again has outcome errored (class infra)",
			"errored of a class --class leaves out: 1 cancelled",
			"which the task files decide", "2 unresolved_env",
		}},
		{lifecycle.Selector{Outcomes: []string{"solver_timeout"}}, []string{
			"no cell to run again has outcome solver_timeout; the run's done cells: 3 errored, 1 passed",
		}},
	} {
		got := c.sel.Explain(rows)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.sel, got, w)
			}
		}
	}
	if got := (lifecycle.Selector{Outcomes: []string{"errored"}}).Explain(rows[:1]); !strings.Contains(got, "the run's done cells: 1 passed") {
		t.Errorf("no errored cell: %q", got)
	}
}

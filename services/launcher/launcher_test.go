package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// Launcher unit tests: a real in-process nats-server, the scripted fake
// sandbox, no container engine.

type fixture struct {
	b   *bus.Bus
	d   *sandboxfake.Driver
	s   *Service
	run string
}

func newFixture(t *testing.T, d *sandboxfake.Driver, driver sandbox.Driver) *fixture {
	t.Helper()
	b, _ := bustest.Bus(t)
	if driver == nil {
		driver = d
	}
	s, err := New(Config{Node: "n1", Host: d}, b, driver)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{b: b, d: d, s: s, run: events.NewID()}
}

// launch plans one cell of harness name on tk and runs its launch job.
func (f *fixture) launch(t *testing.T, files harnesstest.Files, name string, attempt int) ([]events.Envelope, error) {
	t.Helper()
	tk := harnesstest.Task(t, "t", files)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, name)
	err := f.s.Launch(context.Background(), job, attempt)
	return harnesstest.CellEvents(t, f.b, f.run, job.CellID), err
}

func types(evs []events.Envelope) []events.Type { return harnesstest.TypesOf(evs) }

func last[T any](t *testing.T, evs []events.Envelope, typ events.Type) T {
	t.Helper()
	var d T
	for _, e := range evs {
		if e.Type == typ {
			if err := events.Into(e, &d); err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatalf("no %s in %v", typ, types(evs))
	return d
}

// verifyJobs fetches the verify jobs queued for node n1.
func verifyJobs(t *testing.T, b *bus.Bus) []events.VerifyJob {
	t.Helper()
	ctx := context.Background()
	cons, err := b.WorkConsumer(ctx, "test-verifier", events.VerifySubject("n1"), time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.VerifyJob
	for m := range batch.Messages() {
		var j events.VerifyJob
		if err := events.Into(events.Envelope{Data: m.Data(), Type: "VerifyJob"}, &j); err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	return out
}

// TestLaunchOracleHandsOver: the oracle's cell records its image, sandbox,
// start, its harness invocation as an operation (so an oracle row is not
// "0 operations") and finish, and hands the still-running sandbox to this
// node's verifier with a verify job.
func TestLaunchOracleHandsOver(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solve.sh", Stdout: "ok\n"}}, HandleLimits: sandbox.Limits{MemoryMB: 2048}}
	f := newFixture(t, d, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.Type{events.ImageBuilt, events.SandboxStarted, events.Started, events.Operation, events.Finished}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	op := last[events.OperationData](t, evs, events.Operation)
	if el, ok := op.Fields["elapsed_sec"].(float64); op.OpType != HarnessOperation || op.Fields["harness"] != "oracle" || !ok || el < 0 || op.Fields["exit_code"] != 0.0 {
		t.Errorf("harness operation %+v", op)
	}
	sb := last[events.SandboxStartedData](t, evs, events.SandboxStarted)
	if sb.Network != sandbox.NetworkBridge || sb.Limits == nil || sb.Limits.MemoryMB != 2048 || sb.Node != "n1" {
		t.Errorf("SandboxStarted %+v", sb)
	}
	if len(d.Destroyed()) != 0 {
		t.Error("the launcher destroyed a sandbox it handed over")
	}
	jobs := verifyJobs(t, f.b)
	if len(jobs) != 1 || jobs[0].Sandbox.ID != "fake-1" || jobs[0].Attempt != 1 {
		t.Errorf("verify jobs %+v", jobs)
	}
}

// TestLaunchBuildFailure: a failed build is recorded and errors the cell
// (build); no sandbox starts and nothing goes to the verifier.
func TestLaunchBuildFailure(t *testing.T) {
	d := &sandboxfake.Driver{BuildErr: errors.New("pull access denied")}
	f := newFixture(t, d, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); !slices.Equal(got, []events.Type{events.ImageBuilt, events.CellErrored}) {
		t.Fatalf("events %v", got)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != string(events.ClassBuild) {
		t.Errorf("errored %+v", e)
	}
	if len(d.Started()) != 0 || len(verifyJobs(t, f.b)) != 0 {
		t.Error("a failed build went on")
	}
}

// TestLaunchStartFailure: a sandbox that cannot start errors the cell
// (sandbox).
func TestLaunchStartFailure(t *testing.T) {
	f := newFixture(t, &sandboxfake.Driver{StartErr: errors.New("no space")}, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != string(events.ClassSandbox) || !strings.Contains(e.Error, "no space") {
		t.Errorf("errored %+v", e)
	}
}

// TestLaunchEngineTimeoutIsInfra: a sandbox whose engine did not answer
// its create errors the cell as infra (not sandbox), naming the request.
func TestLaunchEngineTimeoutIsInfra(t *testing.T) {
	hang := fmt.Errorf("sandbox: docker: create container from x: %w", &sandbox.EngineTimeoutError{Call: "POST /containers/create", Bound: time.Minute})
	f := newFixture(t, &sandboxfake.Driver{StartErr: hang}, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != string(events.ClassInfra) || !strings.Contains(e.Error, "did not answer POST /containers/create within 1m0s") {
		t.Errorf("errored %+v", e)
	}
}

// TestLaunchSolveFailureDestroysFirst: a solve the sandbox cannot run
// errors the cell (infra) after its sandbox is gone; no verify job; the
// harness invocation is recorded as failed.
func TestLaunchSolveFailureDestroysFirst(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solve.sh", Err: sandbox.ErrDestroyed}}}
	f := newFixture(t, d, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != string(events.ClassInfra) {
		t.Errorf("errored %+v", e)
	}
	// The invocation happened and failed: it is still the cell's operation.
	if op := last[events.OperationData](t, evs, events.Operation); op.OpType != HarnessOperation || op.Fields["failed"] != true {
		t.Errorf("harness operation %+v", op)
	}
	if len(d.Destroyed()) != 1 || len(verifyJobs(t, f.b)) != 0 {
		t.Errorf("destroyed %v", d.Destroyed())
	}
}

// TestLaunchTaskChanged: a task edited after planning is never run under
// the old plan: infra, naming the task.
func TestLaunchTaskChanged(t *testing.T) {
	d := &sandboxfake.Driver{}
	f := newFixture(t, d, nil)
	tk := harnesstest.Task(t, "t", nil)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, "oracle")
	if err := os.WriteFile(filepath.Join(tk.Dir, "tests", "test.sh"), []byte("echo 1 > /logs/verifier/reward.txt # edited\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Launch(context.Background(), job, 1); err != nil {
		t.Fatal(err)
	}
	evs := harnesstest.CellEvents(t, f.b, f.run, job.CellID)
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != "infra" || !strings.Contains(e.Error, "changed since the run was planned") {
		t.Errorf("errored %+v", e)
	}
	if len(d.Started()) != 0 {
		t.Error("a changed task ran")
	}
}

// TestLaunchUnavailableHarness: a harness without an arm (a job from a
// newer planner, say) is refused.
func TestLaunchUnavailableHarness(t *testing.T) {
	f := newFixture(t, &sandboxfake.Driver{}, nil)
	evs, err := f.launch(t, nil, "no-such-harness:x", 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != "refused" {
		t.Errorf("errored %+v", e)
	}
}

// TestLaunchEndedRunDropsJob: a job of a finished run records nothing.
func TestLaunchEndedRunDropsJob(t *testing.T) {
	d := &sandboxfake.Driver{}
	f := newFixture(t, d, nil)
	tk := harnesstest.Task(t, "t", nil)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, "oracle")
	if err := f.b.UpdateRun(context.Background(), f.run, func(r *bus.RunRecord) { r.Status = bus.StatusFinished }); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Launch(context.Background(), job, 1); err != nil {
		t.Fatal(err)
	}
	if got := types(harnesstest.CellEvents(t, f.b, f.run, job.CellID)); len(got) != 0 || len(d.Started()) != 0 {
		t.Errorf("events %v", got)
	}
}

// TestLaunchRedeliveredSupersedes: a second attempt first supersedes the
// first.
func TestLaunchRedeliveredSupersedes(t *testing.T) {
	f := newFixture(t, &sandboxfake.Driver{}, nil)
	evs, err := f.launch(t, nil, "oracle", 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); len(got) == 0 || got[0] != events.CellSuperseded {
		t.Fatalf("events %v", got)
	}
	if s := last[events.CellSupersededData](t, evs, events.CellSuperseded); s.PreviousAttempt != 1 {
		t.Errorf("superseded %+v", s)
	}
}

// TestLaunchCommandScoresItself: a command arm runs on the host driver,
// records no network or limits, and its own Verdict; nothing is handed to
// a verifier.
func TestLaunchCommandScoresItself(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solver", Exit: 1}}}
	f := newFixture(t, d, nil)
	evs, err := f.launch(t, nil, "command:solver {task_path}", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.Type{events.SandboxStarted, events.Started, events.Operation, events.Finished, events.Verdict}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if sb := last[events.SandboxStartedData](t, evs, events.SandboxStarted); sb.Network != "" || sb.Limits != nil {
		t.Errorf("SandboxStarted %+v", sb)
	}
	if v := last[events.VerdictData](t, evs, events.Verdict); v.Reward == nil || *v.Reward != 0 || *v.ReturnCode != 1 {
		t.Errorf("verdict %+v", v)
	}
	if len(verifyJobs(t, f.b)) != 0 || len(d.Destroyed()) != 1 {
		t.Errorf("verify jobs or destroy wrong: %v", d.Destroyed())
	}
}

// TestLaunchOOMKilledSolve: an OOM kill during the solve is on Finished.
func TestLaunchOOMKilledSolve(t *testing.T) {
	f := newFixture(t, &sandboxfake.Driver{OOM: []int64{1}}, nil)
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	if fin := last[events.FinishedData](t, evs, events.Finished); !fin.OOMKilled {
		t.Errorf("finished %+v", fin)
	}
}

// TestLaunchAgentInstallFailure: a failed agent install is solver_error.
func TestLaunchAgentInstallFailure(t *testing.T) {
	dir := harnesstest.Agent(t, "install = \"false\"\nrun = \"bash /opt/proctor/agent/agent.sh\"\n")
	f := newFixture(t, &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "bash -c false", Exit: 1}}}, nil)
	evs, err := f.launch(t, nil, "agent:"+dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != "solver_error" {
		t.Errorf("errored %+v", e)
	}
}

// TestLaunchAgentEvents: an agent's event lines are recorded between
// SandboxStarted and Finished with its attempt.
func TestLaunchAgentEvents(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	lines := `{"_tag":"ToolCall","name":"bash","input":{"cmd":"ls"}}` + "\n" + `{"_tag":"Finished","reason":"done"}` + "\n"
	f := newFixture(t, &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Stdout: lines}}}, nil)
	evs, err := f.launch(t, nil, "agent:"+dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.Type{events.ImageBuilt, events.SandboxStarted, events.Started, events.ToolCall, events.Operation, events.Finished}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if fin := last[events.FinishedData](t, evs, events.Finished); fin.Reason != "done" || fin.Synthesized {
		t.Errorf("finished %+v", fin)
	}
	if sb := last[events.SandboxStartedData](t, evs, events.SandboxStarted); sb.Network != sandbox.NetworkInternal {
		t.Errorf("an agent sandbox on %q", sb.Network)
	}
}

// TestLaunchPlainDriverCannotBuild: a driver without the image-building
// ability errors an in-container cell (sandbox) instead of guessing.
func TestLaunchPlainDriverCannotBuild(t *testing.T) {
	d := &sandboxfake.Driver{}
	f := newFixture(t, d, sandboxfake.Plain{D: d})
	evs, err := f.launch(t, nil, "oracle", 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != "sandbox" || !strings.Contains(e.Error, "cannot build images") {
		t.Errorf("errored %+v", e)
	}
}

// TestLaunchServesTheQueue: Run takes a launch job off the work stream,
// runs it and acks it.
func TestLaunchServesTheQueue(t *testing.T) {
	d := &sandboxfake.Driver{}
	f := newFixture(t, d, nil)
	tk := harnesstest.Task(t, "t", nil)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, "oracle")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := f.b.PublishWork(ctx, events.LaunchSubject, f.run+"/"+job.CellID, job); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if slices.Contains(types(harnesstest.CellEvents(t, f.b, f.run, job.CellID)), events.Finished) && len(verifyJobs(t, f.b)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Finished and verify job; events %v", types(harnesstest.CellEvents(t, f.b, f.run, job.CellID)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNewRejectsNil: a launcher needs a bus and a driver.
func TestNewRejectsNil(t *testing.T) {
	if _, err := New(Config{Node: "n"}, nil, &sandboxfake.Driver{}); err == nil {
		t.Error("nil bus accepted")
	}
}

// TestLaunchSameJobDeliveredTwice: a launch job delivered again while this
// launcher still runs it (JetStream redelivers a job whose in-progress
// acks were lost, as when the server the launcher is connected to dies;
// here the same job is queued twice) is not run a second time beside the
// first: the second delivery waits, and once the first has done the job
// it is acked. One solve, one sandbox, the queue empty.
func TestLaunchSameJobDeliveredTwice(t *testing.T) {
	release := make(chan struct{})
	var solves atomic.Int32
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solve.sh", DoContext: func(ctx context.Context, _ sandbox.ExecSpec) error {
		solves.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}}}
	f := newFixture(t, d, nil)
	s, err := New(Config{Node: "n1", Host: d, Concurrency: 2}, f.b, d)
	if err != nil {
		t.Fatal(err)
	}
	tk := harnesstest.Task(t, "t", nil)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, "oracle")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, id := range []string{"first", "again"} {
		if err := f.b.PublishWork(ctx, events.LaunchSubject, f.run+"/"+job.CellID+"/"+id, job); err != nil {
			t.Fatal(err)
		}
	}
	info := func() *jetstream.ConsumerInfo {
		t.Helper()
		c, err := f.b.JS.Consumer(ctx, bus.WorkStream, "launcher")
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return &jetstream.ConsumerInfo{} // Run has not made it yet
		}
		if err != nil {
			t.Fatal(err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ci
	}
	// Both deliveries taken while a solve runs.
	for ci := info(); ci.NumAckPending != 2 || solves.Load() < 1; ci = info() {
		if ctx.Err() != nil {
			t.Fatalf("deliveries unacked %d, solves %d: want both delivered and a solve running", ci.NumAckPending, solves.Load())
		}
		time.Sleep(20 * time.Millisecond) // polling the consumer's state
	}
	close(release)
	for ci := info(); ci.NumAckPending != 0 || ci.NumPending != 0; ci = info() {
		if ctx.Err() != nil {
			t.Fatalf("the queue never emptied: %d pending, %d unacked", ci.NumPending, ci.NumAckPending)
		}
		time.Sleep(20 * time.Millisecond) // polling the consumer's state
	}
	if n := solves.Load(); n != 1 {
		t.Errorf("%d solves of one job, want 1", n)
	}
	var started int
	for _, e := range harnesstest.CellEvents(t, f.b, f.run, job.CellID) {
		if e.Type == events.SandboxStarted {
			started++
		}
	}
	if started != 1 || len(d.Started()) != 1 {
		t.Errorf("%d SandboxStarted events, %d sandboxes started; want 1 each", started, len(d.Started()))
	}
}

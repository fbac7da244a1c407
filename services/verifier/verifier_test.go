package verifier

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/verify"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// Verifier unit tests: a real in-process nats-server, the scripted fake
// sandbox standing for the sandbox the launcher handed over, no engine.
// Every reward path is played by a cheating test script or solver.

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
	s, err := New(Config{Node: "n1"}, b, driver)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{b: b, d: d, s: s, run: events.NewID()}
}

// verify plans an oracle cell on a task with files, hands the verifier a
// sandbox started on network, and returns the cell's events.
func (f *fixture) verify(t *testing.T, files harnesstest.Files, network string) []events.Envelope {
	t.Helper()
	tk := harnesstest.Task(t, "t", files)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, "oracle")
	if err := f.s.Verify(context.Background(), f.job(job, network)); err != nil {
		t.Fatal(err)
	}
	return harnesstest.CellEvents(t, f.b, f.run, job.CellID)
}

func (f *fixture) job(j events.LaunchJob, network string) events.VerifyJob {
	return events.VerifyJob{RunID: j.RunID, CellID: j.CellID, Attempt: 1, Node: "n1",
		Sandbox: events.SandboxStartedData{Driver: "fake", ID: "fake-9", Network: network}}
}

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
	t.Fatalf("no %s in %v", typ, harnesstest.TypesOf(evs))
	return d
}

// testScript is a test.sh run that leaves files in the sandbox.
func testScript(files map[string]sandbox.FileResult) sandboxfake.Script {
	return sandboxfake.Script{Match: "test.sh", Files: files, Stdout: "tests ran\n"}
}

func reward(t *testing.T, v events.VerdictData) float64 {
	t.Helper()
	if v.Reward == nil {
		t.Fatalf("no reward: %+v", v)
	}
	return *v.Reward
}

// TestVerifyRewardTxt: reward.txt the script wrote is the verdict; the
// sandbox is frozen before the reward is read, destroyed before the
// Verdict, and /logs is copied into the cell directory.
func TestVerifyRewardTxt(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1\n")})}}
	f := newFixture(t, d, nil)
	evs := f.verify(t, nil, sandbox.NetworkBridge)
	if got := harnesstest.TypesOf(evs); !slices.Equal(got, []events.Type{events.VerifyStarted, events.Verdict}) {
		t.Fatalf("events %v", got)
	}
	v := last[events.VerdictData](t, evs, events.Verdict)
	if reward(t, v) != 1 || v.Error != "" || *v.ReturnCode != 0 || v.LeftoverProcesses == nil || *v.LeftoverProcesses != 0 {
		t.Errorf("verdict %+v", v)
	}
	if _, frozen, _, _ := d.Counts(); frozen != 1 {
		t.Errorf("frozen %d times", frozen)
	}
	if got := d.Destroyed(); !slices.Equal(got, []string{"fake-9"}) {
		t.Errorf("destroyed %v", got)
	}
}

// TestVerifyRewardJSON: reward.json alone gives the reward and the named
// rewards.
func TestVerifyRewardJSON(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardJSON: sandboxfake.Regular(`{"reward": 0.25}`)})}}
	v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
	if reward(t, v) != 0.25 || v.Rewards["reward"] != 0.25 {
		t.Errorf("verdict %+v", v)
	}
}

// TestVerifyRewardSymlinkIsNoVerdict: a reward.txt the solver replaced by
// a symlink (to a file holding 1) is never followed: no reward, the
// reason recorded (verifier_error), never a pass.
func TestVerifyRewardSymlinkIsNoVerdict(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{
		rewardTxt:    sandboxfake.Symlink(rewardTxt, "/app/one.txt"),
		"/app/x.txt": sandboxfake.Regular("1"),
	})}}
	v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
	if v.Reward != nil || !strings.Contains(v.Error, "reward.txt: not read") || !strings.Contains(v.Error, "symlink") {
		t.Errorf("verdict %+v", v)
	}
}

// TestVerifyRewardTooLarge: a reward file over the cap is no verdict.
func TestVerifyRewardTooLarge(t *testing.T) {
	big := strings.Repeat("1", harness.MaxRewardFileBytes+1)
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular(big)})}}
	v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
	if v.Reward != nil || v.Error == "" {
		t.Errorf("verdict %+v", v.Error)
	}
}

// TestVerifyRewardGarbage: a reward that is not a plain number in [0, 1]
// is no verdict with the reason.
func TestVerifyRewardGarbage(t *testing.T) {
	for _, body := range []string{"1; rm -rf /", "2", "NaN", "0x1"} {
		d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular(body)})}}
		v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
		if v.Reward != nil || v.Error == "" {
			t.Errorf("reward.txt %q: verdict reward %v error %q", body, v.Reward, v.Error)
		}
	}
}

// TestVerifyNoRewardFile: a script that wrote no reward gives no reward
// and says so; its exit code alone never passes (as Harbor). A script
// that failed says with which exit code.
func TestVerifyNoRewardFile(t *testing.T) {
	for _, exit := range []int{0, 3} {
		d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "test.sh", Exit: exit}}}
		v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
		said := strings.Contains(v.Error, "(the test script exited 3)")
		if v.Reward != nil || !strings.Contains(v.Error, "the verifier wrote neither /logs/verifier/reward.txt nor reward.json") || said != (exit == 3) ||
			!strings.HasSuffix(v.Error, "; the test script printed nothing") {
			t.Errorf("exit %d: verdict %+v", exit, v)
		}
	}
	// A script that printed its result instead of writing it: the
	// error quotes the end of its output, and a printed "1" is no pass.
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "test.sh", Stdout: "checking /app\nall tests passed\n1\n\n"}}}
	v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
	if want := "the verifier wrote neither /logs/verifier/reward.txt nor reward.json; the test script's output ends \"1\" (the verifier log has it all)"; v.Reward != nil || v.Error != want {
		t.Errorf("a script that printed its reward: verdict reward %v, error %q, want none and %q", v.Reward, v.Error, want)
	}
}

// TestVerifyTimeout: a test script stopped at its budget is reward 0 with
// TimedOut, whatever reward file it left.
func TestVerifyTimeout(t *testing.T) {
	sc := testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})
	sc.TimedOut = true
	v := last[events.VerdictData](t, newFixture(t, &sandboxfake.Driver{Scripts: []sandboxfake.Script{sc}}, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
	if reward(t, v) != 0 || !v.TimedOut {
		t.Errorf("verdict %+v", v)
	}
}

// TestVerifyLeftoversCounted: processes the script left alive are frozen
// and counted.
func TestVerifyLeftoversCounted(t *testing.T) {
	d := &sandboxfake.Driver{Alive: 3, Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("0")})}}
	v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge), events.Verdict)
	if v.LeftoverProcesses == nil || *v.LeftoverProcesses != 3 || reward(t, v) != 0 {
		t.Errorf("verdict %+v", v)
	}
}

// TestVerifyWithoutFreezeIsErrored: a driver that cannot freeze the
// sandbox gets no verdict (infra): a reward a leftover could still
// rewrite is not trusted. The sandbox is destroyed all the same.
func TestVerifyWithoutFreezeIsErrored(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	evs := newFixture(t, d, sandboxfake.Plain{D: d}).verify(t, nil, sandbox.NetworkBridge)
	if e := last[events.CellErroredData](t, evs, events.CellErrored); e.ErrorClass != "infra" || !strings.Contains(e.Error, "freeze") {
		t.Errorf("errored %+v", e)
	}
	if len(d.Destroyed()) != 1 {
		t.Error("sandbox left behind")
	}
}

// TestVerifyFreezeFailureIsErrored: a freeze that fails is no verdict.
func TestVerifyFreezeFailureIsErrored(t *testing.T) {
	d := &sandboxfake.Driver{FreezeErr: sandbox.ErrDestroyed, Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	evs := newFixture(t, d, nil).verify(t, nil, sandbox.NetworkBridge)
	last[events.CellErroredData](t, evs, events.CellErrored)
}

// TestVerifyJoinsTheBridge: a public verifier of a sandbox on the internal
// network joins the bridge first; a no-network verifier never does, and
// leaves the internal network for none at all (on it, an agent arm's
// verifier waited out every name lookup).
func TestVerifyJoinsTheBridge(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	evs := newFixture(t, d, nil).verify(t, nil, sandbox.NetworkInternal)
	if vs := last[events.VerifyStartedData](t, evs, events.VerifyStarted); vs.Network != sandbox.NetworkBridge {
		t.Errorf("verify started %+v", vs)
	}
	if c, _, _, _ := d.Counts(); c != 1 {
		t.Errorf("joined %d times", c)
	}
	d2 := &sandboxfake.Driver{Scripts: d.Scripts}
	closed := harnesstest.Files{"task.toml": "version = \"1.0\"\n[agent]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"no-network\"\n"}
	evs = newFixture(t, d2, nil).verify(t, closed, sandbox.NetworkInternal)
	if vs := last[events.VerifyStartedData](t, evs, events.VerifyStarted); vs.Network != sandbox.NetworkNone {
		t.Errorf("no-network verifier on %q", vs.Network)
	}
	if c, _, _, _ := d2.Counts(); c != 0 || !slices.Equal(d2.Moves(), []string{sandbox.NetworkNone}) {
		t.Errorf("a no-network verifier joined the bridge %d times, moved %v", c, d2.Moves())
	}
}

// TestVerifyTaskChanged: the verifier checks the task revision too: a
// test script edited after planning is never the judge.
func TestVerifyTaskChanged(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	f := newFixture(t, d, nil)
	tk := harnesstest.Task(t, "t", nil)
	job := harnesstest.PlanCell(t, f.b, f.run, tk, "oracle")
	if err := os.WriteFile(filepath.Join(tk.Dir, "tests", "test.sh"), []byte("echo 1 > /logs/verifier/reward.txt # easier\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Verify(context.Background(), f.job(job, "bridge")); err != nil {
		t.Fatal(err)
	}
	evs := harnesstest.CellEvents(t, f.b, f.run, job.CellID)
	if e := last[events.CellErroredData](t, evs, events.CellErrored); !strings.Contains(e.Error, "changed since the run was planned") {
		t.Errorf("errored %+v", e)
	}
	if len(d.Execs()) != 0 {
		t.Error("the edited test script ran")
	}
}

// TestVerifyEndedRun: a job of an ended run only destroys the sandbox.
func TestVerifyEndedRun(t *testing.T) {
	d := &sandboxfake.Driver{}
	f := newFixture(t, d, nil)
	job := harnesstest.PlanCell(t, f.b, f.run, harnesstest.Task(t, "t", nil), "oracle")
	if err := f.b.UpdateRun(context.Background(), f.run, func(r *bus.RunRecord) { r.Status = bus.StatusInterrupted }); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Verify(context.Background(), f.job(job, "bridge")); err != nil {
		t.Fatal(err)
	}
	if got := harnesstest.TypesOf(harnesstest.CellEvents(t, f.b, f.run, job.CellID)); len(got) != 0 || len(d.Destroyed()) != 1 {
		t.Errorf("events %v destroyed %v", got, d.Destroyed())
	}
}

// TestVerifyOOMDuringTests: an OOM kill during the tests (not before) is
// on the Verdict.
func TestVerifyOOMDuringTests(t *testing.T) {
	d := &sandboxfake.Driver{OOM: []int64{1, 2}, Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("0")})}}
	if v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, "bridge"), events.Verdict); !v.OOMKilled {
		t.Errorf("verdict %+v", v)
	}
	d = &sandboxfake.Driver{OOM: []int64{1, 1}, Scripts: d.Scripts}
	if v := last[events.VerdictData](t, newFixture(t, d, nil).verify(t, nil, "bridge"), events.Verdict); v.OOMKilled {
		t.Error("the solve's OOM kill counted against the verifier")
	}
}

// TestVerifyPlacementFailure: a sandbox where the tests cannot be put in
// place (the prep step's own exit code and message) is errored, not 0.
func TestVerifyPlacementFailure(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "test.sh", Exit: harness.PrepExitCode, Stdout: "proctor: /tests is a file\n"}}}
	evs := newFixture(t, d, nil).verify(t, nil, "bridge")
	if e := last[events.CellErroredData](t, evs, events.CellErrored); !strings.Contains(e.Error, "prepare the verifier") {
		t.Errorf("errored %+v", e)
	}
}

// TestVerifyServesTheQueue: Run takes a verify job off this node's queue
// and records the Verdict.
func TestVerifyServesTheQueue(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	f := newFixture(t, d, nil)
	job := harnesstest.PlanCell(t, f.b, f.run, harnesstest.Task(t, "t", nil), "oracle")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := f.b.PublishWork(ctx, events.VerifySubject("n1"), f.run+"/"+job.CellID+"/1", f.job(job, "bridge")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(harnesstest.TypesOf(harnesstest.CellEvents(t, f.b, f.run, job.CellID)), events.Verdict) {
		if time.Now().After(deadline) {
			t.Fatal("no Verdict")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNewNeedsNode: the verifier serves one node's queue.
func TestNewNeedsNode(t *testing.T) {
	b, _ := bustest.Bus(t)
	if _, err := New(Config{}, b, &sandboxfake.Driver{}); err == nil {
		t.Error("no node accepted")
	}
}

// The reward files the verifier reads (pkg/verify).
const (
	rewardTxt  = verify.RewardTxt
	rewardJSON = verify.RewardJSON
)

// TestVerifySIGTERMKeepsTheSandbox is fault 4: a verifier stopped during
// the tests gives its job back without destroying the sandbox or
// recording anything, so the job's next delivery finds it.
func TestVerifySIGTERMKeepsTheSandbox(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "test.sh", Do: func(sandbox.ExecSpec) error { cancel(); return nil }}}}
	f := newFixture(t, d, nil)
	job := harnesstest.PlanCell(t, f.b, f.run, harnesstest.Task(t, "t", nil), "oracle")
	if err := f.s.Verify(ctx, f.job(job, "bridge")); err == nil {
		t.Fatal("an interrupted verify returned nil")
	}
	if len(d.Destroyed()) != 0 {
		t.Errorf("the sandbox was destroyed before the job was given back: %v", d.Destroyed())
	}
	for _, e := range harnesstest.CellEvents(t, f.b, f.run, job.CellID) {
		if e.Type == events.Verdict || e.Type == events.CellErrored {
			t.Errorf("an interrupted verify recorded %s", e.Type)
		}
	}
}

// TestVerifyBusErrorKeepsTheSandbox is fault 4: when the event log cannot
// be read (the server gone), the sandbox stays for the retry.
func TestVerifyBusErrorKeepsTheSandbox(t *testing.T) {
	d := &sandboxfake.Driver{}
	b, srv := bustest.Bus(t)
	s, err := New(Config{Node: "n1"}, b, d)
	if err != nil {
		t.Fatal(err)
	}
	job := harnesstest.PlanCell(t, b, events.NewID(), harnesstest.Task(t, "t", nil), "oracle")
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := s.Verify(ctx, events.VerifyJob{RunID: job.RunID, CellID: job.CellID, Attempt: 1, Node: "n1",
		Sandbox: events.SandboxStartedData{Driver: "fake", ID: "fake-9"}}); err == nil {
		t.Fatal("a verify without a bus returned nil")
	}
	if len(d.Destroyed()) != 0 || len(d.Execs()) != 0 {
		t.Errorf("destroyed %v, execs %d after a bus error", d.Destroyed(), len(d.Execs()))
	}
}

// TestVerifyRedeliveredAfterADeadVerifier is fault 4: the job of a
// verifier killed during the tests (its VerifyStarted recorded, no
// verdict) is redelivered; test.sh does not run a second time in the same
// container: the cell is errored, class infra, and the sandbox destroyed.
func TestVerifyRedeliveredAfterADeadVerifier(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	f := newFixture(t, d, nil)
	job := harnesstest.PlanCell(t, f.b, f.run, harnesstest.Task(t, "t", nil), "oracle")
	vj := f.job(job, "bridge")
	if err := f.s.emit(context.Background(), vj, events.VerifyStarted, events.VerifyStartedData{Node: "n1", Network: "bridge"}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Verify(context.Background(), vj); err != nil {
		t.Fatal(err)
	}
	for _, x := range d.Execs() {
		if strings.Contains(strings.Join(x.Spec.Cmd, " "), "test.sh") {
			t.Fatal("test.sh ran a second time in the same container")
		}
	}
	evs := harnesstest.CellEvents(t, f.b, f.run, job.CellID)
	e := last[events.CellErroredData](t, evs, events.CellErrored)
	if e.ErrorClass != "infra" || !strings.Contains(e.Error, "stopped during the tests") {
		t.Errorf("errored %+v", e)
	}
	if slices.Contains(harnesstest.TypesOf(evs), events.Verdict) || len(d.Destroyed()) != 1 {
		t.Errorf("events %v destroyed %v", harnesstest.TypesOf(evs), d.Destroyed())
	}
}

// TestVerifyRedeliveredAfterTheVerdict is fault 9's de-duplication: a
// verify job given again after its attempt's verdict was recorded (its
// ack lost while a stream leader moved) runs no test and records nothing:
// the cell keeps one terminal event.
func TestVerifyRedeliveredAfterTheVerdict(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	f := newFixture(t, d, nil)
	job := harnesstest.PlanCell(t, f.b, f.run, harnesstest.Task(t, "t", nil), "oracle")
	vj := f.job(job, "bridge")
	for range 2 {
		if err := f.s.Verify(context.Background(), vj); err != nil {
			t.Fatal(err)
		}
	}
	tests := 0
	for _, x := range d.Execs() {
		if strings.Contains(strings.Join(x.Spec.Cmd, " "), "test.sh") {
			tests++
		}
	}
	evs := harnesstest.CellEvents(t, f.b, f.run, job.CellID)
	if got := harnesstest.TypesOf(evs); !slices.Equal(got, []events.Type{events.VerifyStarted, events.Verdict}) || tests != 1 {
		t.Errorf("events %v, test.sh ran %d times; want one VerifyStarted and one Verdict from one run", got, tests)
	}
}

// TestVerifierSurvivesAServerRestart is fault 3: the server goes away
// under a serving verifier (a node restarting, a leader moving) and comes
// back on the same address and store; the verifier stays up and serves
// the next job.
func TestVerifierSurvivesAServerRestart(t *testing.T) {
	store := t.TempDir()
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	port := e.Server.Addr().(*net.TCPAddr).Port
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{testScript(map[string]sandbox.FileResult{rewardTxt: sandboxfake.Regular("1")})}}
	s, err := New(Config{Node: "n1"}, b, d)
	if err != nil {
		t.Fatal(err)
	}
	run := events.NewID()
	job := harnesstest.PlanCell(t, b, run, harnesstest.Task(t, "t", nil), "oracle")
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	done := make(chan struct{})
	go func() { runErr = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// Wait until the verifier's consumer exists, then take the server away.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := b.JS.Consumer(ctx, bus.WorkStream, "verifier-n1"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the verifier never made its consumer")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.Shutdown()
	time.Sleep(time.Second) // the server stays down a while: the outage, not a synchronisation
	select {
	case <-done:
		t.Fatalf("the verifier exited while the server was down: %v", runErr)
	default:
	}
	e2, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: store, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Shutdown()
	vj := events.VerifyJob{RunID: run, CellID: job.CellID, Attempt: 1, Node: "n1", Sandbox: events.SandboxStartedData{Driver: "fake", ID: "fake-9", Network: "bridge"}}
	if err := bus.Retry(ctx, nil, "publish", func(ctx context.Context) error {
		return b.PublishWork(ctx, events.VerifySubject("n1"), run+"/"+job.CellID+"/1", vj)
	}); err != nil {
		t.Fatal(err)
	}
	// Far from the verdict's usual second or two and from a pull that is
	// never made again: a pull lost with the old server is given up by the
	// client after two missed 5 s heartbeats, then backed off, on a
	// loaded machine.
	deadline = time.Now().Add(90 * time.Second)
	for !slices.Contains(harnesstest.TypesOf(harnesstest.CellEvents(t, b, run, job.CellID)), events.Verdict) {
		select {
		case <-done:
			t.Fatalf("the verifier exited after the restart: %v", runErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no Verdict after the server came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

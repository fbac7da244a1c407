package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// OracleGrace is the SIGTERM-to-SIGKILL grace of a reference solution at
// its timeout.
const OracleGrace = 2 * time.Second

// oracleArm runs the task's reference solution in the task container, as
// root, under exactly the task's network policy. It checks the setup: its
// rows are never compared.
type oracleArm struct{ ref Ref }

func (a oracleArm) Ref() Ref                                { return a.ref }
func (a oracleArm) Networks(t *task.Task) Networks          { return oracleNetworks(t) }
func (a oracleArm) Check(string, func(string) string) error { return nil }
func (a oracleArm) SetupCheck() bool                        { return true }

func (a oracleArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	return refusal(t, a.needs(t))
}

// needs: the oracle gets every env table; it applies the task's
// allowlist only when its solve's policy is allowlist (task.Refusal's
// rule: public, with or without an egress list, is the open network).
func (a oracleArm) needs(*task.Task) task.Needs { return task.NeedsOracle }

// Prepare builds the task image; the oracle works as root in the task's
// workdir (else the image's) on the network plan of oracleNetworks.
func (a oracleArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	img, err := TaskImage(ctx, env)
	if err != nil {
		return Placement{}, err
	}
	t := env.Task()
	n := a.Networks(t)
	spec, err := composeSpec(ctx, env, containerSpec(env, img.Ref, t.Workdir, n.Start))
	if err != nil {
		return Placement{}, err
	}
	return Placement{
		Driver: env.Driver(), Spec: spec,
		Networks: n, Workdir: t.Workdir, Image: img,
	}, nil
}

// oracleNetworks follows DESIGN §4: the oracle gets exactly the task's
// policy (public → the bridge; allowlist → a per-cell internal network
// whose only way out is the egress proxy; no-network → no way out). A
// sandbox whose verifier phase is public but whose solve phase is not
// starts on a per-cell internal network, because a --network none
// container can never be connected later.
func oracleNetworks(t *task.Task) Networks {
	solvePublic := t.AgentNetwork.Mode == task.NetworkPublic || t.AgentNetwork.Mode == ""
	verifyPublic := t.VerifierNetwork.Mode == task.NetworkPublic || t.VerifierNetwork.Mode == ""
	var n Networks
	switch {
	case solvePublic:
		n = Networks{Start: sandbox.NetworkBridge, Solve: task.NetworkPublic}
	case t.AgentNetwork.Mode == task.NetworkAllowlist:
		n = Networks{Start: sandbox.NetworkInternal, Solve: task.NetworkAllowlist}
	case verifyPublic:
		n = Networks{Start: sandbox.NetworkInternal, Solve: t.AgentNetwork.Mode}
	case t.Compose != nil:
		// Compose services must see each other: an internal network
		// with no proxy is as closed as none.
		n = Networks{Start: sandbox.NetworkInternal, Solve: t.AgentNetwork.Mode}
	default:
		n = Networks{Start: sandbox.NetworkNone, Solve: t.AgentNetwork.Mode}
	}
	n.Verify = verifyNetwork(t, n.Start)
	return n
}

// oracleBudget is the reference solution's budget in seconds: BenchFlow's
// [oracle].timeout_sec when a single-step task sets it, else the agent's
// (as Harbor runs solve.sh under [agent].timeout_sec).
func oracleBudget(t *task.Task) float64 {
	if t.OracleTimeoutSec > 0 && len(t.Steps) == 0 {
		return t.OracleTimeoutSec
	}
	return t.AgentTimeoutSec
}

// oracleEnv is the reference solution's environment: on the open
// network (a public solve), the host's proxy variables (read through
// getenv) without their credentials (sandbox.HostProxyEnv, as the public
// verifier gets them),
// then the task's [solution.env] / [oracle.env] over them; behind the
// egress proxy, the task's table with the proxy's variables over it.
func oracleEnv(t *task.Task, getenv func(string) string, n Networks, h *sandbox.Handle) map[string]string {
	if n.Start == sandbox.NetworkBridge {
		return withEnv(sandbox.HostProxyEnv(orProcess(getenv)), t.OracleEnv)
	}
	return withEnv(t.OracleEnv, sandbox.ProxyEnv(h))
}

// Solve copies the reference solution to /solution and /oracle and runs
// `bash /solution/solve.sh` as root in the task's workdir with
// [agent].timeout_sec, or BenchFlow's [oracle].timeout_sec (oracleBudget;
// as Harbor runs solve.sh; most public tasks ship it without the execute
// bit, some without a shebang): PrepareSolve, then its Solve.
func (a oracleArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	ps, err := a.PrepareSolve(ctx, env, p, h)
	if err != nil {
		return Outcome{}, err
	}
	defer ps.Discard()
	return ps.Solve(ctx)
}

// PrepareSolve stages the reference solution in the sandbox's root
// directory and prepares the one exec that puts it in place and runs it
// (sandbox.PrepareExec): with a driver that is an ExecPreparer the
// exec's process is made now and waits, so the solve's Solve only
// releases it.
func (a oracleArm) PrepareSolve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (PreparedSolve, error) {
	t, dir, d := env.Task(), env.Dir(), p.Driver
	stage := StagePath("solution")
	if err := d.CopyIn(ctx, h, t.SolutionDir, stage); err != nil {
		return nil, fmt.Errorf("copy the solution in: %w", err)
	}
	out, err := dir.OpenCapture("solve.log")
	if err != nil {
		return nil, err
	}
	budget := oracleBudget(t)
	pe, err := sandbox.PrepareExec(ctx, d, h, sandbox.ExecSpec{
		Cmd: PlaceAndRun(stage, []string{"/solution", "/oracle"}, []string{"/solution", "/oracle"}, nil,
			[]string{"bash", "/solution/" + filepath.Base(t.SolutionScript)}),
		Env:     oracleEnv(t, env.Getenv, p.Networks, h),
		Timeout: seconds(budget), Grace: OracleGrace, Stdout: out, Stderr: out,
	})
	if err != nil {
		_ = out.Close(dir, "")
		return nil, fmt.Errorf("run solve.sh: %w", err)
	}
	return &oracleSolve{env: env, p: p, out: out, pe: pe, budget: budget}, nil
}

// oracleSolve is the oracle's PreparedSolve.
type oracleSolve struct {
	env    Env
	p      Placement
	out    *cellfs.Capture
	pe     sandbox.PreparedExec
	budget float64
	done   bool
}

// Discard gives the exec up and removes the solve's empty log.
func (s *oracleSolve) Discard() {
	if s.done {
		return
	}
	s.done = true
	s.pe.Discard()
	dir := s.env.Dir()
	_ = s.out.Close(dir, "")
	_ = os.Remove(dir.Path("solve.log"))
}

func (s *oracleSolve) Solve(ctx context.Context) (Outcome, error) {
	if s.done {
		return Outcome{}, sandbox.ErrPreparedUsed
	}
	s.done = true
	env, dir, out := s.env, s.env.Dir(), s.out
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: env.Plan().Harness, Model: env.Plan().Model}, time.Time{}); err != nil {
		s.pe.Discard()
		_ = out.Close(dir, "stdout.tail.txt")
		return Outcome{}, err
	}
	dir.Logf("solve: bash /solution/solve.sh (timeout %gs, network %s)", s.budget, s.p.Networks.Solve)
	res, err := s.pe.Run(ctx)
	_ = out.Close(dir, "stdout.tail.txt")
	if err != nil {
		return Outcome{}, fmt.Errorf("run solve.sh: %w", err)
	}
	if res.ExitCode == PrepExitCode && strings.Contains(out.Tail.String(), "proctor: ") {
		return Outcome{}, fmt.Errorf("put the solution in place: %s", strings.TrimSpace(cellfs.Suffix(out.Tail.String(), 300)))
	}
	fin := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", res.ExitCode), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationSec: round3(res.Duration.Seconds()), StdoutTail: out.RowTail(),
		Isolation: map[string]any{"network": s.p.Networks.Solve},
	}
	if res.TimedOut {
		fin.Reason = "timeout"
	}
	dir.Logf("solve ended: %s after %.3fs", fin.Reason, fin.DurationSec)
	return Outcome{Finished: fin}, nil
}

package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// Arm is one harness kind's whole behaviour (DESIGN §5): the launcher
// looks the arm up from the cell's harness reference (For) and drives it
// without knowing its kind:
//
//  1. Refusal, from the task files alone, before any build;
//  2. Prepare: the image (built and recorded through Env), files copied
//     into a derived image, the working directory rule and the network
//     plan (Networks), returned as a Placement;
//  3. the launcher starts the sandbox of the Placement and records
//     SandboxStarted;
//  4. Solve runs the harness in it and returns the Finished data (and,
//     for an arm that scores itself, the Verdict).
//
// An error from Prepare or Solve that carries an events.ClassError ends
// the cell errored with that class; any other Prepare error is infra, any
// other Solve error likewise (the event log failing is returned as is by
// Env.Emit and retried).
//
// Adding an arm is one type implementing Arm and one case in For
// (docs/ADDING_A_HARNESS.md).
type Arm interface {
	// Ref is the parsed harness reference the arm was made from.
	Ref() Ref
	// SetupCheck reports whether rows of this arm check the setup (oracle,
	// probe): they are never compared against a baseline, never serve as
	// one and never enter Holm's family.
	SetupCheck() bool
	// Check validates the arm's own files when a run is planned (an
	// agent's agent.toml), with relative paths resolved against
	// baseDir, and what it reads from proctor's environment through
	// getenv (a CLI's path, a provider's credentials; nil: os.Getenv);
	// its error fails the whole run before anything starts.
	Check(baseDir string, getenv func(string) string) error
	// IdentityInputs are the files and directories of the host (relative
	// paths resolved against baseDir) that the arm brings into its cells
	// and whose content is part of the run's identity: its agent or
	// skill directory, the CLI binary it pins. Resume hashes them
	// (HashInput) and refuses a run whose inputs changed. getenv reads
	// proctor's environment (a CLI's path; nil: os.Getenv).
	IdentityInputs(baseDir string, getenv func(string) string) ([]IdentityInput, error)
	// Refusal decides, from the task files alone and before any build,
	// whether the arm refuses the task: the error class and a reason
	// naming the file or key, or ("", "") when the task can run.
	Refusal(t *task.Task) (events.ErrorClass, string)
	// Networks is the arm's network plan for task t: the network its
	// sandbox starts on, the policy its solve runs under and the network
	// the verifier phase runs on (the verifier asks the arm).
	Networks(t *task.Task) Networks
	// Prepare makes everything the sandbox needs before it starts.
	Prepare(ctx context.Context, env Env) (Placement, error)
	// Solve runs the solve phase in the started sandbox h.
	Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error)
	// Needs are the optional abilities of the container driver
	// (Env.Driver; sandbox/abilities.go) that the arm's cells may use,
	// the verifier phase's (VerifierNeeds) included when the task's
	// verifier scores them. A run whose driver does not declare one is
	// refused before it starts (CheckAbilities).
	Needs() []sandbox.Ability
}

// Env is what an arm gets of the cell it runs (the launcher implements it;
// harnesstest has one that records events in memory).
type Env interface {
	// RunID, CellID and Node name the cell and this machine.
	RunID() string
	CellID() string
	Node() string
	// Task is the loaded task, its revision already checked against the
	// plan.
	Task() *task.Task
	// Plan is the cell's CellPlanned data; Spec the run's spec.
	Plan() events.CellPlannedData
	Spec() events.RunSpec
	// Dir is the cell's output directory on the host.
	Dir() cellfs.Dir
	// Driver runs container sandboxes (with the abilities of
	// sandbox/abilities.go where the arm needs them); Host runs host
	// process trees (command arms).
	Driver() sandbox.Driver
	Host() sandbox.Driver
	// Getenv reads one variable of proctor's own environment ("" when
	// unset): an arm reads every setting it takes from the environment
	// through it (environ.go), never from the process. The launcher's is
	// its Config.Getenv.
	Getenv(key string) string
	// Emit records one event of the cell; a zero at means now. Its error
	// is the event log's.
	Emit(ctx context.Context, t events.Type, data any, at time.Time) error
}

// Networks is a cell's network plan (DESIGN §4).
type Networks struct {
	// Start is the network mode the sandbox starts on (sandbox.Network*),
	// "" for a host process.
	Start string
	// Solve is the policy the solve phase runs under, as recorded in
	// Finished.isolation.network.
	Solve string
	// Verify is the network mode the verifier phase runs on: the
	// verifier moves the sandbox there when it is on another
	// (verify.UseNetwork), and a multi-step task's next step moves it
	// back to Start.
	Verify string
}

// StepSolver is the ability of an arm whose one Solve covers every step
// of a multi-step task (the probe: it runs no verifier between steps and
// probes each step's sandbox itself). The launcher then calls Solve once,
// as for a single-step task, instead of running the steps.
type StepSolver interface {
	SolvesSteps() bool
}

// SolvesSteps reports whether a has the StepSolver ability.
func SolvesSteps(a Arm) bool {
	s, ok := a.(StepSolver)
	return ok && s.SolvesSteps()
}

// SolvePreparer is the ability of an arm whose solve can be made ready
// before its solve slot (the oracle: its solve is one exec). The launcher
// calls PrepareSolve once the sandbox is started and healthy, before it
// waits for its solve slot, and at the slot calls the PreparedSolve's
// Solve instead of the arm's: the engine's work of starting the solve is
// then done while the cell waits, not on the slot
// (docs/decisions/2026-12-03-solve-prepared-ahead.md).
type SolvePreparer interface {
	PrepareSolve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (PreparedSolve, error)
}

// PreparedSolve is a solve made ready by PrepareSolve. Nothing of the
// solution or agent has run before Solve: Solve does what Arm.Solve
// does from there, its events and its budget counted from Solve's call
// (sandbox.PreparedExec). Discard gives it up without running anything
// of it (a cancelled or paused cell); Discard after Solve does nothing.
type PreparedSolve interface {
	Solve(ctx context.Context) (Outcome, error)
	Discard()
}

// Placement is where and how an arm's solve runs: the driver (Env.Driver or
// Env.Host), the sandbox spec and the network plan, and what Prepare found
// on the way that Solve needs.
type Placement struct {
	Driver   sandbox.Driver
	Spec     sandbox.Spec
	Networks Networks
	// Workdir is the directory the solve works in ("" the image's).
	Workdir string
	// User is who the solve runs as in the sandbox ("" root): a
	// multi-step task's step setup.sh runs as this user, as Harbor runs
	// it as the step's agent user, the one its agent runs as.
	User string
	// Image is the task image (zero for a host process).
	Image sandbox.ImageInfo
	// State is the arm's own (its loaded agent.toml, its output dir).
	State any
}

// Outcome is what a solve ended with.
type Outcome struct {
	Finished events.FinishedData
	// Verdict is set by an arm that scores itself (command): the launcher
	// records it after Finished and hands nothing to the verifier. nil:
	// the task's verifier scores the cell.
	Verdict *events.VerdictData
}

// For returns the arm of a parsed reference.
func For(r Ref) (Arm, error) {
	switch r.Kind {
	case Oracle, DockerOracle:
		return oracleArm{ref: r}, nil
	case Agent:
		return agentArm{ref: r}, nil
	case Command:
		return commandArm{ref: r}, nil
	case Probe, DockerProbe, DockerProbeSkill, DockerProbeHost:
		return probeArm{ref: r}, nil
	case ClaudeCode, Codex, TerminalBench:
		return harborArm{ref: r}, nil
	case BenchFlow, BenchFlowSkill, BenchFlowSelfGen:
		return benchflowArm{ref: r}, nil
	case DockerClaude, DockerClaudeSkill, DockerClaudeHost, DockerClaudeHostSkill:
		return claudeArm{ref: r}, nil
	case DockerCodex, DockerCodexSkill:
		return codexArm{ref: r}, nil
	}
	return nil, fmt.Errorf("harness %s cannot run in this version", r.Name)
}

// Lookup parses a reference and returns its arm; a reference that does not
// parse or has no arm is a refused ClassError.
func Lookup(name string) (Arm, error) {
	r, err := Parse(name)
	if err != nil {
		return nil, events.Classed(events.ClassRefused, err)
	}
	a, err := For(r)
	if err != nil {
		return nil, events.Classed(events.ClassRefused, err)
	}
	return a, nil
}

// verifyNetwork is the network plan rule of the verifier phase shared by
// the in-container arms, whatever network the solve had: the task's
// verifier policy public (or unset) is the bridge; no-network is no
// network at all, as the oracle's no-network sandbox has (name lookups
// fail at once; on an agent's internal network they went unanswered
// until they timed out), but with compose services, which the verifier
// may need, it stays on the cell's network (no way out); allowlist stays
// on the start network (the egress proxy's, when it has one).
func verifyNetwork(t *task.Task, start string) string {
	switch t.VerifierNetwork.Mode {
	case task.NetworkPublic, "":
		return sandbox.NetworkBridge
	case task.NetworkNone:
		if t.Compose == nil {
			return sandbox.NetworkNone
		}
	}
	return start
}

// containerSpec is the sandbox spec of an in-container arm, with the
// task's egress proxy (EgressFor) when it starts on an internal network.
func containerSpec(env Env, image, workdir, network string) sandbox.Spec {
	t := env.Task()
	s := sandbox.Spec{
		RunID: env.RunID(), CellID: env.CellID(), Image: image, Workdir: workdir,
		Env: t.SandboxEnv, Network: network, CPUs: t.CPUs, MemoryMB: t.MemoryMB,
		Lifetime: lifetime(t),
	}
	if network == sandbox.NetworkInternal {
		s.Egress = EgressFor(t)
	}
	return s
}

// withEnv returns base with add laid over it (add wins); base is not
// changed.
func withEnv(base, add map[string]string) map[string]string {
	if len(add) == 0 {
		return base
	}
	out := make(map[string]string, len(base)+len(add))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range add {
		out[k] = v
	}
	return out
}

// MinLifetime is the least a task container lives (the seed's 1800 s):
// the budgets plus slack, never less, so a short budget never has the
// container gone while proctor still copies files out of it.
const MinLifetime = 30 * time.Minute

// LifetimeSlack is what a task container lives beyond its budgets.
const LifetimeSlack = 10 * time.Minute

// lifetime bounds the container: the solve and verify budgets (of every
// step, for a multi-step task: the steps run one after the other in it)
// plus LifetimeSlack, at least MinLifetime.
func lifetime(t *task.Task) time.Duration {
	budget := seconds(max(t.AgentTimeoutSec, oracleBudget(t))) + seconds(t.VerifierTimeoutSec)
	if len(t.Steps) > 0 {
		budget = 0
		for _, s := range t.Steps {
			budget += seconds(s.AgentTimeoutSec) + seconds(s.VerifierTimeoutSec)
		}
	}
	return max(budget+LifetimeSlack, MinLifetime)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

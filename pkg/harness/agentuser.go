package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// Who an in-container agent arm solves as: the run's --agent-user
// (events.RunSpec.AgentUser).
const (
	// AgentUserSealed is proctor's own rule (the seed's): uid 10001
	// (AgentUser), owning only the working tree, /agent-output, /logs/agent
	// and its HOME. The default.
	AgentUserSealed = "sealed"
	// AgentUserTask is Harbor's: the task's (or the step's) [agent].user,
	// else the image's USER, else root; nothing is chowned to it. Published
	// terminal-bench numbers come from agents run so, mostly as root.
	AgentUserTask = "task"
)

// AgentUserModes are the values of --agent-user.
var AgentUserModes = []string{AgentUserSealed, AgentUserTask}

// ParseAgentUser checks a --agent-user value: "" is AgentUserSealed; any
// other value than AgentUserModes is an error naming them.
func ParseAgentUser(s string) (string, error) {
	switch s {
	case "", AgentUserSealed:
		return AgentUserSealed, nil
	case AgentUserTask:
		return AgentUserTask, nil
	}
	return "", fmt.Errorf("--agent-user %q: want %s (uid 10001 owning only the working tree) or %s (the task's [agent].user, else the image's USER, root included: as Harbor runs it)",
		s, AgentUserSealed, AgentUserTask)
}

// AgentUserMode is the --agent-user of spec: its AgentUser, AgentUserSealed
// when unset (a log written before the flag existed).
func AgentUserMode(spec events.RunSpec) string {
	if spec.AgentUser == "" {
		return AgentUserSealed
	}
	return spec.AgentUser
}

// SolveUser is who an in-container agent arm's solve of t runs as in a
// run of spec, as the exec's user, and where that comes from:
//
//   - sealed: AgentUser ("sealed");
//   - task: t.AgentUser, the step's [steps.agent].user or the task's
//     [agent].user as the loader merged them ("agent.user"); else the
//     image's USER img.User ("the image's USER"); else "0" ("root: the
//     image sets no USER"), as Harbor runs its agent.
//
// t is the task as the solve sees it (a step's view for a multi-step
// task), img the task image.
func SolveUser(spec events.RunSpec, t *task.Task, img sandbox.ImageInfo) (user, from string) {
	if AgentUserMode(spec) != AgentUserTask {
		return AgentUser, AgentUserSealed
	}
	if u := strings.TrimSpace(t.AgentUser); u != "" {
		return u, "agent.user"
	}
	if u := strings.TrimSpace(img.User); u != "" {
		return u, "the image's USER"
	}
	return "0", "root: the image sets no USER"
}

// SolveIdentity is the user a solve runs as, resolved in its sandbox to
// the numeric uid and gid the container gives it.
type SolveIdentity struct {
	// Mode is the run's --agent-user (AgentUserSealed, AgentUserTask).
	Mode string
	// Want is the user as SolveUser gave it (a name, a uid, uid:gid), From
	// where it came from.
	Want, From string
	// UID and GID are what the container resolved Want to.
	UID, GID int
}

// User is the exec user of the solve's processes: "uid:gid".
func (s SolveIdentity) User() string { return strconv.Itoa(s.UID) + ":" + strconv.Itoa(s.GID) }

// Root reports whether the solve runs as root.
func (s SolveIdentity) Root() bool { return s.UID == 0 }

// Sealed reports whether the solve runs under proctor's own rule (uid
// 10001 owning only the working tree, which the verifier gets back with
// its image owners).
func (s SolveIdentity) Sealed() bool { return s.Mode != AgentUserTask }

// Killer is the user whose every process is killed after the solve
// (sandbox.ProcessKiller): the solve's own, User; root's kill reaches
// every process of the container but its keep-alive.
func (s SolveIdentity) Killer() string { return s.User() }

// RootGivesUp are the integrity guarantees a root agent takes away
// (docs/THREATS.md, "A root agent"), as isolation.root_gives_up lists
// them.
var RootGivesUp = []string{
	"system: the agent can change the system the verifier runs on (its interpreters, libraries, tools, /etc)",
	"grader_links: symlinks into grader paths are removed only in the places a sealed agent writes, and a root agent writes everywhere",
	"work_tree_owners: the working tree keeps the owners the agent left",
}

// RootKeeps are the guarantees that hold for a root agent too, as
// isolation.root_keeps lists them.
var RootKeeps = []string{
	"graders_absent: /tests, /verifier and /solution are not in the sandbox while the agent runs",
	"fresh_logs_verifier: /logs/verifier is made fresh when the verifier starts",
	"killed_before_verifier: every process but the container's keep-alive is killed before the verifier",
	"frozen_before_reward: the sandbox is frozen before the reward is read",
	"host_reads_refused: reward files are read through the engine, never through a path on the host",
}

// Note records the identity in a Finished's isolation: agent_user (the
// mode), user (uid:gid), user_from, user_declared (Want, when it is not
// the uid:gid) and, for a root agent, root_gives_up and root_keeps.
func (s SolveIdentity) Note(iso map[string]any) {
	iso["agent_user"] = s.Mode
	iso["user"] = s.User()
	iso["user_from"] = s.From
	if s.Want != s.User() {
		iso["user_declared"] = s.Want
	}
	if s.Root() {
		iso["root_gives_up"] = RootGivesUp
		iso["root_keeps"] = RootKeeps
	}
}

// ResolveSolveUser resolves who the solve of env's task runs as in the
// started sandbox h of placement p (SolveUser): AgentUser needs no look;
// a task's user is resolved by an exec as that user printing its uid and
// gid, so the container decides as it will for the solve. A user the
// image does not know is refused (class refused) naming the user and
// where it came from.
func ResolveSolveUser(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (SolveIdentity, error) {
	want, from := SolveUser(env.Spec(), env.Task(), p.Image)
	id := SolveIdentity{Mode: AgentUserMode(env.Spec()), Want: want, From: from, UID: 10001, GID: 10001}
	if id.Sealed() {
		return id, nil
	}
	var out strings.Builder
	res, err := p.Driver.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", "id -u && id -g"}, User: want, Stdout: &out, Stderr: &out, Timeout: time.Minute,
	})
	if err != nil {
		return id, fmt.Errorf("resolve the agent's user %s (%s): %w", want, from, err)
	}
	f := strings.Fields(out.String())
	if res.ExitCode != 0 || len(f) != 2 {
		return id, events.Classf(events.ClassRefused, "the agent's user %s (%s, --agent-user task) cannot run in the image: exit %d: %s",
			want, from, res.ExitCode, cellfs.Suffix(strings.TrimSpace(out.String()), 300))
	}
	uid, err1 := strconv.Atoi(f[0])
	gid, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return id, events.Classf(events.ClassRefused, "the agent's user %s (%s): the image's id printed %q, not a uid and a gid", want, from, out.String())
	}
	id.UID, id.GID = uid, gid
	return id, nil
}

// agentWorkdirRule is the working directory rule of an agent that runs
// under mode: AgentWorkdirRefusal for sealed (its tree is chowned to it),
// TaskUserWorkdirRefusal for task (nothing is chowned).
func agentWorkdirRule(mode string) func(string) string {
	if mode == AgentUserTask {
		return task.TaskUserWorkdirRefusal
	}
	return task.AgentWorkdirRefusal
}

// needsAs are needs n of an in-container agent arm in a run whose
// --agent-user is mode: under task, the working directory rule is
// TaskUserWorkdirRefusal.
func needsAs(mode string, n task.Needs) task.Needs {
	n.TaskUser = mode == AgentUserTask
	return n
}

// userRefuser is an arm whose refusal depends on the run's --agent-user
// (the in-container agent arms: the working directory rule).
type userRefuser interface {
	refusalAs(mode string, t *task.Task) (events.ErrorClass, string)
}

// RefusalIn is Refusal in a run of spec: an in-container agent arm
// refuses by the working directory rule of the run's --agent-user.
func (r Ref) RefusalIn(spec events.RunSpec, t *task.Task) (events.ErrorClass, string) {
	a, err := For(r)
	if err != nil {
		return events.ClassRefused, err.Error()
	}
	if u, ok := a.(userRefuser); ok {
		return u.refusalAs(AgentUserMode(spec), t)
	}
	return a.Refusal(t)
}

// ArmUser is what an arm's agent runs as, for comparing arms: an
// in-container agent arm's is the run's --agent-user; a delegated arm's
// is "task" (Harbor and BenchFlow run their agents as the task's user); a
// host command's "host"; a host launch's "host-agent" (HostAgentUser); "" for an arm that runs no agent (the setup
// checks).
func ArmUser(spec events.RunSpec, r Ref) string {
	a, err := For(r)
	if err != nil || a.SetupCheck() {
		return ""
	}
	if h, ok := a.(hostLauncher); ok && h.onHost() {
		return "host-agent"
	}
	switch a.(type) {
	case harborArm, benchflowArm:
		return AgentUserTask
	case commandArm:
		return "host"
	}
	return AgentUserMode(spec)
}

// UserMismatches are the warnings of a run of spec whose compared arms do
// not run their agents as the same user (ArmUser): one line per harness
// compared with the baseline whose user differs from the baseline's.
func UserMismatches(spec events.RunSpec) []string {
	if spec.BaselineHarness == "" {
		return nil
	}
	br, err := Parse(spec.BaselineHarness)
	if err != nil {
		return nil
	}
	base := ArmUser(spec, br)
	if base == "" {
		return nil
	}
	var out []string
	for _, h := range spec.Harnesses {
		r, err := Parse(h)
		if err != nil || r.Name == br.Name {
			continue
		}
		if u := ArmUser(spec, r); u != "" && u != base {
			out = append(out, fmt.Sprintf("harness %s runs its agent as %s and the baseline %s as %s: a difference between them may be the user's, not the agent's (--agent-user; docs/harnesses.md#the-agents-user)",
				r.Name, describeArmUser(u), br.Name, describeArmUser(base)))
		}
	}
	return out
}

// hostLauncher is an arm that may run its agent on the host (the
// docker-*-host arms) rather than in the task container.
type hostLauncher interface{ onHost() bool }

// AgentLocation is where an arm's agent runs: "host" for a host launch
// (docker-claude-host, docker-probe-host), "container" for the other
// in-container agent arms, "" for an arm whose agent is not proctor's to
// place (setup checks, host commands, Harbor, BenchFlow).
func AgentLocation(r Ref) string {
	a, err := For(r)
	if err != nil {
		return ""
	}
	if h, ok := a.(hostLauncher); ok && h.onHost() {
		return "host"
	}
	switch a.(type) {
	case agentArm, claudeArm, codexArm:
		return "container"
	}
	return ""
}

// LocationMismatches are the warnings of a run of spec that compares a
// host launch with an in-container baseline, or the reverse: one line
// per such harness, naming what the host cannot seal (HostOpen).
func LocationMismatches(spec events.RunSpec) []string {
	if spec.BaselineHarness == "" {
		return nil
	}
	br, err := Parse(spec.BaselineHarness)
	if err != nil {
		return nil
	}
	base := AgentLocation(br)
	if base == "" {
		return nil
	}
	var out []string
	for _, h := range spec.Harnesses {
		r, err := Parse(h)
		if err != nil || r.Name == br.Name {
			continue
		}
		if l := AgentLocation(r); l != "" && l != base {
			out = append(out, fmt.Sprintf("harness %s runs its agent on the %s and the baseline %s in the %s: the host cannot seal work_tree, operator_config, env, host_filesystem and network (metrics.isolation.host_open), so a difference between them may be the launch's, not the agent's (docs/harnesses.md#host-launches)",
				r.Name, map[string]string{"host": "host", "container": "task container"}[l], br.Name, map[string]string{"host": "host", "container": "task container"}[base]))
		}
	}
	return out
}

func describeArmUser(u string) string {
	switch u {
	case AgentUserSealed:
		return "uid 10001 (--agent-user sealed)"
	case AgentUserTask:
		return "the task's user (Harbor's rule: [agent].user, else the image's USER, often root)"
	case "host":
		return "the operator's host user"
	case "host-agent":
		return "a dedicated unprivileged user on the host (" + HostAgentUserName + ")"
	}
	return u
}

// refusalAs of the in-container agent arms: their needs, with the working
// directory rule of mode (needsAs).
func (a agentArm) refusalAs(mode string, t *task.Task) (events.ErrorClass, string) {
	return refusal(t, needsAs(mode, a.needs(t)))
}

func (a claudeArm) refusalAs(mode string, t *task.Task) (events.ErrorClass, string) {
	if a.onHost() {
		return a.Refusal(t) // the host agent's user is not --agent-user's
	}
	return refusal(t, needsAs(mode, a.needs(t)))
}

func (a codexArm) refusalAs(mode string, t *task.Task) (events.ErrorClass, string) {
	return refusal(t, needsAs(mode, a.needs(t)))
}

func (a probeArm) refusalAs(mode string, t *task.Task) (events.ErrorClass, string) {
	if c, r := refusal(t, needsAs(mode, a.needs(t))); c != "" {
		return c, r
	}
	return probeExpectRefusal(t)
}

// AgentWorkdirIn is AgentWorkdir in a run of spec: the working directory
// rule of its --agent-user (agentWorkdirRule).
func AgentWorkdirIn(spec events.RunSpec, t *task.Task, img sandbox.ImageInfo) (string, error) {
	return agentWorkdir(AgentUserMode(spec), t, img)
}

// String is the identity for a log line: "uid:gid" and, when it is not
// that, the user as declared and where it came from.
func (s SolveIdentity) String() string {
	if s.Sealed() {
		return s.User()
	}
	return fmt.Sprintf("%s (%s, %s)", s.User(), s.Want, s.From)
}

// homeScope is the tree whose holding the verifier's HOME makes proctor
// keep and put back that HOME's start-up files (snapshotHome): the
// agent's working tree realWorkdir, or for a root agent, which can write
// any HOME, every directory ("").
func (s SolveIdentity) homeScope(realWorkdir string) string {
	if s.Root() {
		return ""
	}
	return realWorkdir
}

// StepSolveUser is who a multi-step task t's step s runs its workdir/
// setup.sh as, in a run of spec whose arm placed p: the arm's user
// (p.User; "" for an arm that solves as root, the oracle), under
// --agent-user task the step's own (SolveUser of the step), as Harbor
// runs it as the step's agent user.
func StepSolveUser(spec events.RunSpec, t *task.Task, s *task.Step, p Placement) string {
	if p.User == "" || AgentUserMode(spec) != AgentUserTask {
		return p.User
	}
	v := *t
	v.AgentUser = s.AgentUser
	u, _ := SolveUser(spec, &v, p.Image)
	return u
}

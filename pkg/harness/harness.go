// Package harness names how a cell's solve is driven (DESIGN §5): the
// registry of harness kinds, what each refuses before any build, and the
// reward rules every verifier-scored harness shares.
package harness

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
)

// Kind is a harness kind.
type Kind string

// Harness kinds (DESIGN §5).
const (
	Oracle      Kind = "oracle"
	Agent       Kind = "agent"
	Command     Kind = "command"
	Probe       Kind = "probe" // an alias of DockerProbe
	DockerProbe Kind = "docker-probe"
	// DockerProbeSkill is the probe in a skill arm's sandbox: the skill
	// installed where the skill arm installs it, and only that skill
	// visible (what docker-probe:<skill-path> meant before it took the
	// seed's meaning).
	DockerProbeSkill Kind = "docker-probe-skill"
	// DockerOracle is the task-runs seed's name of Oracle.
	DockerOracle Kind = "docker-oracle"
	ClaudeCode   Kind = "claude-code"
	// Harbor-backed and BenchFlow-backed kinds (delegated.go).
	Codex            Kind = "codex"
	TerminalBench    Kind = "terminal-bench"
	BenchFlow        Kind = "benchflow"
	BenchFlowSkill   Kind = "benchflow-skill"
	BenchFlowSelfGen Kind = "benchflow-selfgen"
	// DockerClaude and DockerClaudeSkill run the Claude Code CLI in the
	// task container, without and with a skill (DESIGN §5.3).
	DockerClaude      Kind = "docker-claude"
	DockerClaudeSkill Kind = "docker-claude-skill"
	// DockerCodex and DockerCodexSkill run the OpenAI Codex CLI in the
	// task container, without and with a skill (DESIGN §5.3).
	DockerCodex      Kind = "docker-codex"
	DockerCodexSkill Kind = "docker-codex-skill"
	// DockerClaudeHost and DockerClaudeHostSkill are the task-runs seed's
	// host launches of the Claude Code CLI: the CLI on the host in a
	// scratch tree holding a copy of the task's working tree, the task
	// container kept for the verifier (untrustedhost.go).
	DockerClaudeHost      Kind = "docker-claude-host"
	DockerClaudeHostSkill Kind = "docker-claude-host-skill"
	// DockerProbeHost is the isolation probe in exactly the host arms'
	// sandbox; docker-probe-host:<skill-path> also forbids that skill.
	DockerProbeHost Kind = "docker-probe-host"
)

// Error classes a refusal carries (DESIGN §8); the vocabulary is
// events.ErrorClass.
const (
	ClassRefused       = events.ClassRefused
	ClassUnresolvedEnv = events.ClassUnresolvedEnv
)

// ErrUnknown is returned by Parse for a name no harness answers to.
var ErrUnknown = errors.New("harness: unknown harness")

// aliases maps the task-runs seed's names that differ from proctor's to
// proctor's kind: a reference written either way runs the same arm, and
// keeps the name it was written with (Ref.Name).
var aliases = map[Kind]Kind{DockerOracle: Oracle, Probe: DockerProbe}

// Ref is a parsed harness reference: "oracle", "probe", "agent:<dir>",
// "command:<template>".
type Ref struct {
	// Name is the reference as written (a directory argument cleaned); it
	// names the harness in cell ids, rows and comparisons.
	Name string
	// Kind is proctor's kind, an alias resolved: docker-oracle is Oracle,
	// probe is DockerProbe (the row's harness_kind).
	Kind Kind
	// Arg is the agent directory or the command template.
	Arg string
}

// Info describes a harness kind for `proctor tasks harnesses`.
type Info struct {
	Kind        Kind
	Syntax      string
	Description string
	ScoredBy    string
	Available   bool
}

// Registry lists every harness kind in DESIGN §5 order.
func Registry() []Info {
	return []Info{
		{Oracle, "oracle", "the task's reference solution in the task container, as root", "the task verifier", true},
		{Agent, "agent:<dir>", "your agent process inside the task container (agent.toml in <dir>)", "the task verifier", true},
		{Command, "command:<template>", "a host command; placeholders {task_path} {task_name} {model} {output_dir} {jobs_dir}", "reward.txt in {output_dir}, else the exit code; naming {jobs_dir}: the Harbor trial result.json written there", true},
		{DockerProbe, "docker-probe", "an isolation probe (no model, no cost) in exactly the sandbox an agent arm gets", "every leak class closed, n/a or expected by the task", true},
		{DockerProbe, "docker-probe:<skill-path>", "the isolation probe in the baseline's sandbox that also forbids the skill at <skill-path>: treatment is open when the agent can read that skill (its host path, its files anywhere, any place a skill is offered)", "every leak class closed, n/a or expected by the task", true},
		{DockerProbeSkill, "docker-probe-skill:<skill-path>", "the isolation probe in the skill arm's sandbox: the skill at <skill-path> installed as a skill arm installs it, and only that skill visible", "every leak class closed, n/a or expected by the task", true},
		{Probe, "probe", "an alias of docker-probe", "every leak class closed, n/a or expected by the task", true},
		{DockerOracle, "docker-oracle", "an alias of oracle (the task-runs seed's name)", "the task verifier", true},
		{ClaudeCode, "claude-code", "Claude Code through an installed Harbor: harbor run -a claude-code", "Harbor's verifier run (trial result.json)", true},
		{Codex, "codex", "Codex CLI through an installed Harbor: harbor run -a codex", "Harbor's verifier run (trial result.json)", true},
		{TerminalBench, "terminal-bench:<agent>", "any Harbor agent through an installed Harbor: harbor run -a <agent> (oracle: a setup check)", "Harbor's verifier run (trial result.json)", true},
		{BenchFlow, "benchflow:<agent>", "an agent through an installed BenchFlow: bench eval run --skill-mode no-skill; <agent> is all of the rest (acp:pi is one agent id; oracle: a setup check)", "BenchFlow's verifier run (rollout result.json)", true},
		{BenchFlowSkill, "benchflow-skill:<agent>[:<path>]", "bench eval run --skill-mode with-skill; <agent> one field, two after acp/acpx/ai-sdk/omnigent; <path> a skill directory, its SKILL.md or a root of skills, staged as copies (none: the task's environment/skills)", "BenchFlow's verifier run (rollout result.json)", true},
		{BenchFlowSelfGen, "benchflow-selfgen:<agent>[:<dir>]", "bench eval run --skill-mode self-gen; <agent> as for benchflow-skill; <dir> the skill-creator or a root holding it, staged alone", "BenchFlow's verifier run (rollout result.json)", true},
		{DockerClaude, "docker-claude", "Claude Code CLI in the task container as uid 10001, stream-json parsed live", "the task verifier", true},
		{DockerClaudeSkill, "docker-claude-skill:<skill-path>", "docker-claude with the skill at <skill-path> as a one-skill plugin", "the task verifier", true},
		{DockerCodex, "docker-codex", "OpenAI Codex CLI in the task container as uid 10001, exec --json parsed live", "the task verifier", true},
		{DockerCodexSkill, "docker-codex-skill:<skill-path>", "docker-codex with the skill at <skill-path> as its one skill (/etc/codex/skills)", "the task verifier", true},
		{DockerClaudeHost, "docker-claude-host", "Claude Code CLI on the host (a proctor-run-* scratch tree holding a copy of the working tree, a dedicated unprivileged user, the egress proxy as its route to the model), the tree copied back into the task container; what the host cannot seal is in every row", "the task verifier (in the container)", true},
		{DockerClaudeHostSkill, "docker-claude-host-skill:<skill-path>", "docker-claude-host with the skill at <skill-path> as a one-skill plugin", "the task verifier (in the container)", true},
		{DockerProbeHost, "docker-probe-host", "the isolation probe in exactly the host arms' sandbox: the classes the host cannot seal are reported open", "every leak class closed, n/a or expected by the task", true},
		{DockerProbeHost, "docker-probe-host:<skill-path>", "docker-probe-host that also forbids the skill at <skill-path>", "every leak class closed, n/a or expected by the task", true},
	}
}

// Parse reads a harness reference. Kinds this build does not run yet are
// refused here with a reason, so a run never half-starts.
func Parse(s string) (Ref, error) {
	s = strings.TrimSpace(s)
	kind, arg, hasArg := strings.Cut(s, ":")
	r := Ref{Name: s, Kind: Kind(kind), Arg: arg}
	if r.Kind == Command && !hasArg {
		return r, fmt.Errorf("%w %q: write it as command:<template>, or give bare command with --command-template <template>", ErrUnknown, s)
	}
	var forms []Info
	for _, in := range Registry() {
		if in.Kind == r.Kind {
			forms = append(forms, in)
		}
	}
	for i, in := range forms {
		needsArg := strings.Contains(in.Syntax, ":")
		if needsArg != hasArg || (needsArg && arg == "") {
			if i < len(forms)-1 {
				continue // another form of the kind may fit
			}
			var syn []string
			for _, f := range forms {
				syn = append(syn, f.Syntax)
			}
			return r, fmt.Errorf("%w %q: write it as %s", ErrUnknown, s, strings.Join(syn, " or "))
		}
		if !in.Available {
			return r, fmt.Errorf("harness %q: the %s harness is not available in this version", s, in.Kind)
		}
		if hasArg && (r.Kind == Agent || r.Kind == DockerProbe || r.Kind == DockerProbeSkill || r.Kind == DockerClaudeSkill || r.Kind == DockerCodexSkill || r.Kind == Probe ||
			r.Kind == DockerClaudeHostSkill || r.Kind == DockerProbeHost) {
			r.Name = string(r.Kind) + ":" + path.Clean(arg)
		}
		if k, ok := aliases[r.Kind]; ok {
			r.Kind = k
		}
		return r, nil
	}
	var known, kinds []string
	syntax := map[string]string{} // a kind's first syntax
	for _, in := range Registry() {
		if !in.Available {
			continue
		}
		known = append(known, in.Syntax)
		if k := string(in.Kind); syntax[k] == "" {
			kinds = append(kinds, k)
			syntax[k] = in.Syntax
		}
	}
	if near := syntax[task.Nearest(kind, kinds)]; near != "" {
		if i := strings.Index(near, ":"); i >= 0 && hasArg {
			near = near[:i+1] + arg
		}
		return r, fmt.Errorf("%w %q: did you mean %s? (available: %s)", ErrUnknown, s, near, strings.Join(known, ", "))
	}
	return r, fmt.Errorf("%w %q (available: %s)", ErrUnknown, s, strings.Join(known, ", "))
}

// KindOf is the canonical kind of the harness named name (Ref.Kind, an
// alias resolved), the harness_kind of its rows; for a name that does not
// parse, the part before its first ":".
func KindOf(name string) string {
	if r, err := Parse(name); err == nil {
		return string(r.Kind)
	}
	kind, _, _ := strings.Cut(strings.TrimSpace(name), ":")
	return kind
}

// SameHarness reports whether the references a and b name the same
// harness: equal as written, or the same kind and argument once aliases
// are resolved and directories cleaned (docker-oracle and oracle).
func SameHarness(a, b string) bool {
	if strings.TrimSpace(a) == strings.TrimSpace(b) {
		return true
	}
	ra, err1 := Parse(a)
	rb, err2 := Parse(b)
	if err1 != nil || err2 != nil {
		return false
	}
	_, aa, _ := strings.Cut(ra.Name, ":")
	_, ab, _ := strings.Cut(rb.Name, ":")
	return ra.Kind == rb.Kind && aa == ab
}

// ArgRunsToEnd reports whether the harness reference s (blanks around it
// ignored) has an argument that runs to the end of a comma-separated list
// of references: a command template (command:<template>) may hold commas.
func ArgRunsToEnd(s string) bool {
	kind, _, ok := strings.Cut(strings.TrimSpace(s), ":")
	return ok && Kind(kind) == Command
}

// AgentDir is the absolute agent directory of an agent:<dir> reference,
// resolved against base when relative.
func (r Ref) AgentDir(base string) string {
	if filepath.IsAbs(r.Arg) {
		return filepath.Clean(r.Arg)
	}
	return filepath.Join(base, r.Arg)
}

// Comparable reports whether rows of this harness enter comparisons against
// a baseline: the rows of an arm that is a setup check (Arm.SetupCheck:
// the oracle, the probes) never do.
func (r Ref) Comparable() bool {
	if a, err := For(r); err == nil {
		return !a.SetupCheck()
	}
	return r.Kind != Probe && r.Kind != DockerProbe && r.Kind != DockerProbeSkill && r.Kind != DockerProbeHost && r.Kind != Oracle && r.Kind != DockerOracle
}

// IsSetupCheck reports whether the rows of the harness named name check the
// setup (the oracle, probes) and so never enter comparisons nor Holm's
// family: the arm decides (Arm.SetupCheck), as Ref.Comparable says. It is
// what artifact.CompareOptions.SetupCheck takes; a name that does not parse
// is not a setup check.
func IsSetupCheck(name string) bool {
	if r, err := Parse(name); err == nil {
		return !r.Comparable()
	}
	kind, arg, _ := strings.Cut(strings.TrimSpace(name), ":")
	return !Ref{Name: name, Kind: Kind(kind), Arg: arg}.Comparable()
}

// Refusal decides from the task files alone, before any build, whether this
// harness refuses the task (Arm.Refusal). It returns the error class
// (refused or unresolved_env) and a reason naming the file or key, or ""
// when the task can run: unsupported and blocked tasks first, then
// unresolved env, then what the harness needs (task.Refusal). The image
// WORKDIR check of in-container agent arms needs the built image and is
// done by the arm's Prepare (AgentWorkdir). A kind without an arm is
// refused.
func (r Ref) Refusal(t *task.Task) (class events.ErrorClass, reason string) {
	a, err := For(r)
	if err != nil {
		return events.ClassRefused, err.Error()
	}
	return a.Refusal(t)
}

// needer is an arm whose refusal is task.Refusal of its needs alone (the
// env tables among them): Ref.UnresolvedEnv asks it which env tables its
// cells get.
type needer interface{ needs(t *task.Task) task.Needs }

// UnresolvedEnv returns the keys that make this harness's cells of t
// errored unresolved_env (metrics.unresolved_env): the unresolved keys of
// the env tables its cells get (task.Task.UnresolvedFor), nil when its
// cells of t are not errored so. An arm that does not say which tables it
// gets lists every unresolved key of the task.
func (r Ref) UnresolvedEnv(t *task.Task) []string {
	a, err := For(r)
	if err != nil {
		return nil
	}
	if c, _ := a.Refusal(t); c != events.ClassUnresolvedEnv {
		return nil
	}
	if n, ok := a.(needer); ok {
		return t.UnresolvedFor(n.needs(t))
	}
	return t.UnresolvedEnv
}

// CommandRef is the reference of the command harness running template.
func CommandRef(template string) string { return string(Command) + ":" + template }

// FillTemplate makes a bare command reference (the task-runs seed's
// spelling, the template given apart with --command-template)
// command:<template> and reports whether ref was one; any other
// reference, or an empty template, is returned unchanged.
func FillTemplate(ref, template string) (string, bool) {
	if template == "" || strings.TrimSpace(ref) != string(Command) {
		return ref, false
	}
	return CommandRef(template), true
}

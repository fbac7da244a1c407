package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// BenchFlow skill modes (benchflow/skill_policy.py).
const (
	skillModeNone    = "no-skill"
	skillModeWith    = "with-skill"
	skillModeSelfGen = "self-gen"
)

// benchflowNamespaces are the agent-id namespaces BenchFlow resolves in an
// "<ns>:<id>" agent spec (benchflow/agents/registry.py: the acp, ai-sdk
// and omnigent shorthands, and acpx: runtime keys), so "acp:pi" is one
// agent id.
var benchflowNamespaces = map[string]bool{"acp": true, "acpx": true, "ai-sdk": true, "omnigent": true}

// benchflowArm runs a cell through an installed BenchFlow (DESIGN §5.2).
// The grammar of its names, each rule stated once:
//
//   - benchflow:<agent>: everything after the first colon is the agent id,
//     as `bench --agent` takes it ("claude-agent-acp", "acp:pi",
//     "ai-sdk:codex"); skill mode no-skill.
//   - benchflow-skill:<agent>[:<path>] and
//     benchflow-selfgen:<agent>[:<dir>]: the agent id is the first
//     colon-separated field, or the first two when the first is one of
//     BenchFlow's namespaces (acp, acpx, ai-sdk, omnigent); what follows
//     the next colon is the path (it may hold colons).
//
// Each runs, from the cell directory (so bench never reads the caller's
// ./.env),
//
//	bench eval run --tasks-dir <task> --agent <agent> [--model <model>]
//	  --sandbox docker --skill-mode <mode> [--skills-dir <cell>/skills]
//	  [--skill-creator-dir <cell>/creator/<name>]
//	  [--config-override {"agent":{"timeout_sec":600}}]
//	  --jobs-dir <cell>/jobs --retry-attempts 0 --agent-idle-timeout 0 --quiet
//
// and scores the cell from the rollout's result.json and ACP trajectory
// (benchflowresult.go).
type benchflowArm struct{ ref Ref }

// benchflowState is what Prepare made for Solve.
type benchflowState struct {
	jobs, cwd, agent string
	skillsDir        string          // --skills-dir, "" when none
	creatorDir       string          // --skill-creator-dir, "" when none
	packs            map[string]bool // names of the deployed treatment packs (with-skill)
	env              map[string]string
	notes            []string // what the environment rules changed, for run.log
	deadline         float64  // the hard deadline bench runs under, seconds
	defaulted        float64  // the agent budget proctor declared, seconds; 0 when the task has one
}

func (a benchflowArm) Ref() Ref                     { return a.ref }
func (a benchflowArm) Networks(*task.Task) Networks { return Networks{} }

// parts splits the reference's argument into the agent id and the path
// by the grammar above.
func (a benchflowArm) parts() (agent, path string, err error) {
	arg := a.ref.Arg
	if a.ref.Kind == BenchFlow {
		agent = arg
	} else {
		fields := strings.SplitN(arg, ":", 3)
		n := 1
		if benchflowNamespaces[fields[0]] {
			n = 2
		}
		if len(fields) < n {
			return "", "", fmt.Errorf("agent %q is a BenchFlow namespace: write %s:%s:<id>[:<path>]", fields[0], a.ref.Kind, fields[0])
		}
		agent = strings.Join(fields[:n], ":")
		path = strings.Join(fields[n:], ":")
	}
	ns, id, hasNS := strings.Cut(agent, ":")
	switch {
	case agent == "":
		return "", "", fmt.Errorf("no agent: write it as %s:<agent>", a.ref.Kind)
	case hasNS && (id == "" || !benchflowNamespaces[ns]):
		return "", "", fmt.Errorf("agent %q: an agent id holds a colon only after a BenchFlow namespace (acp, acpx, ai-sdk, omnigent) and before a non-empty id", agent)
	case a.ref.Kind != BenchFlow && strings.HasSuffix(arg, ":") && path == "":
		return "", "", fmt.Errorf("%s: empty path after the agent", a.ref.Name)
	}
	return agent, path, nil
}

func (a benchflowArm) mode() string {
	switch a.ref.Kind {
	case BenchFlowSkill:
		return skillModeWith
	case BenchFlowSelfGen:
		return skillModeSelfGen
	}
	return skillModeNone
}

// SetupCheck: benchflow:oracle (any mode) runs the task's own solution.
func (a benchflowArm) SetupCheck() bool {
	agent, _, _ := a.parts()
	return agent == delegatedOracleAgent
}

// Check: the name parses, and a path resolves (relative to baseDir): for
// benchflow-skill a skill directory, its SKILL.md or a root of skill
// directories (skillPacks); for benchflow-selfgen a skill-creator
// (skillCreator).
func (a benchflowArm) Check(baseDir string, _ func(string) string) error {
	_, p, err := a.parts()
	if err != nil || p == "" {
		return err
	}
	abs := a.abs(baseDir, p)
	if a.ref.Kind == BenchFlowSelfGen {
		_, err = skillCreator(abs)
	} else {
		_, err = skillPacks(abs)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", a.ref.Name, err)
	}
	return nil
}

func (a benchflowArm) abs(baseDir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(baseDir, p)
}

// Refusal: what BenchFlow needs to score an agent (the verifier, the
// image, a prompt; the oracle also the solution); a compose task (bench
// would start it outside proctor's network policy,
// docs/decisions/2026-12-01-compose-which-arms.md) and a
// multi-step one (BenchFlow runs no Harbor steps); a task whose review
// rubric BenchFlow rejects (rubricRefusal); and, for benchflow-skill
// without a path, a task without skills of its own to deploy.
func (a benchflowArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	n := task.Needs{TestScript: true, Image: true, Prompt: true}
	if a.SetupCheck() {
		n = task.NeedsOracle
	}
	n.Compose, n.Steps = false, false
	// bench resolves the env tables itself: every unresolved key errors
	// the cell, as before the tables were scoped by phase.
	n.VerifierEnv, n.OracleEnv, n.SandboxEnv = true, true, true
	if c, why := refusal(t, n); c != "" {
		return c, why
	}
	if why := rubricRefusal(t); why != "" {
		return events.ClassRefused, why
	}
	if _, p, err := a.parts(); err == nil && a.ref.Kind == BenchFlowSkill && p == "" && len(bundledPacks(t)) == 0 {
		return events.ClassRefused, "benchflow-skill:<agent> without a path deploys the task's own skills (environment/skills/<pack>/SKILL.md), and it has none; name a skill with benchflow-skill:<agent>:<path>"
	}
	return "", ""
}

// Prepare empties <cell>/jobs, stages the treatment skill packs under
// <cell>/skills (only the packs, as real copies) or the skill-creator
// under <cell>/creator/<name> (only the creator), declares the agent
// budget a task lacks, and builds bench's environment (benchEnviron).
func (a benchflowArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	dir, t := env.Dir(), env.Task()
	agent, p, err := a.parts()
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	jobs, err := emptyJobs(env, "bench")
	if err != nil {
		return Placement{}, err
	}
	for _, d := range []string{dir.Path("skills"), dir.Path("creator")} {
		if err := os.RemoveAll(d); err != nil {
			return Placement{}, events.Classf(events.ClassInfra, "cannot empty %s: %w; bench was not run", d, err)
		}
	}
	base := env.Spec().BaseDir
	if base == "" {
		base, _ = os.Getwd()
	}
	st := benchflowState{jobs: jobs, cwd: string(dir), agent: agent}
	switch {
	case a.ref.Kind == BenchFlowSkill && p != "":
		// The skill directory or root planned (inputDir: a worker that
		// cannot see it reads its stored tree, named as planned).
		planned := skillDir(base, p)
		src, err := inputDir(ctx, env, planned)
		if err != nil {
			return Placement{}, err
		}
		name := func(pk string) string { return filepath.Base(pk) }
		if src == planned {
			src = a.abs(base, p)
		} else {
			name = func(pk string) string {
				if pk == src {
					return filepath.Base(planned)
				}
				return filepath.Base(pk)
			}
		}
		packs, err := skillPacks(src)
		if err != nil {
			return Placement{}, events.Classed(events.ClassRefused, err)
		}
		st.skillsDir = dir.Path("skills")
		for _, pk := range packs {
			if err := stageCopy(pk, filepath.Join(st.skillsDir, name(pk))); err != nil {
				return Placement{}, events.Classf(events.ClassRefused, "staging skill %s: %w", pk, err)
			}
		}
		st.packs = skillNames(packs)
		if n := filepath.Base(src); src != a.abs(base, p) && st.packs[n] && name(src) != n {
			delete(st.packs, n) // the cache's digest, not a name
			st.packs[name(src)] = true
		}
	case a.ref.Kind == BenchFlowSkill:
		st.packs = skillNames(bundledPacks(t))
	case a.ref.Kind == BenchFlowSelfGen && p != "":
		planned := a.abs(base, p)
		src, err := inputDir(ctx, env, planned)
		if err != nil {
			return Placement{}, err
		}
		creator, err := skillCreator(src)
		if err != nil {
			return Placement{}, events.Classed(events.ClassRefused, err)
		}
		creatorName := filepath.Base(creator)
		if creator == src && src != planned {
			creatorName = filepath.Base(planned)
		}
		st.creatorDir = filepath.Join(dir.Path("creator"), creatorName)
		if err := stageCopy(creator, st.creatorDir); err != nil {
			return Placement{}, events.Classf(events.ClassRefused, "staging skill-creator %s: %w", creator, err)
		}
	}
	if !t.AgentTimeoutDeclared && agent != delegatedOracleAgent {
		st.defaulted = task.DefaultAgentTimeoutSec
	}
	st.deadline, st.env, st.notes = benchEnviron(ctx, base, os.LookupEnv, benchHardDeadline(t, agent, a.mode()))
	return hostPlacement(env, st.cwd, st), nil
}

// Solve runs bench and scores the cell (benchflowOutcome). bench runs
// under BENCHFLOW_ROLLOUT_HARD_DEADLINE; proctor's outer kill comes
// benchOuterMargin (600 s) after it: SIGTERM to bench's process group,
// SIGKILL benchKillGrace (15 s) later, then the cell's rollout containers
// are removed (BenchFlow removes them itself unless killed).
func (a benchflowArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(benchflowState)
	if !ok {
		return Outcome{}, errNoState
	}
	t, plan, dir := env.Task(), env.Plan(), env.Dir()
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: plan.Harness, Model: plan.Model}, time.Time{}); err != nil {
		return Outcome{}, err
	}
	argv := []string{"bench", "eval", "run", "--tasks-dir", t.Dir, "--agent", st.agent}
	if plan.Model != "" && plan.Model != "default" {
		argv = append(argv, "--model", plan.Model)
	}
	argv = append(argv, "--sandbox", "docker", "--skill-mode", a.mode())
	if st.skillsDir != "" {
		argv = append(argv, "--skills-dir", st.skillsDir)
	}
	if st.creatorDir != "" {
		argv = append(argv, "--skill-creator-dir", st.creatorDir)
	}
	if st.defaulted > 0 {
		argv = append(argv, "--config-override", fmt.Sprintf(`{"agent":{"timeout_sec":%s}}`, strconv.FormatFloat(st.defaulted, 'f', -1, 64)))
	}
	argv = append(argv, "--jobs-dir", st.jobs, "--retry-attempts", "0", "--agent-idle-timeout", "0", "--quiet")
	for _, n := range st.notes {
		dir.Logf("bench environment: %s", n)
	}
	// One bench at a time in this process: BenchFlow removes every
	// benchflow.owned container at each job's start and end, so two cells'
	// jobs on one engine would break each other's rollouts.
	select {
	case benchSlot <- struct{}{}:
	default:
		dir.Logf("waiting for this process's other bench to end (BenchFlow removes every benchflow.owned container at each job's start and end, so its jobs run one at a time)")
		select {
		case benchSlot <- struct{}{}:
		case <-ctx.Done():
			return Outcome{}, events.Classf(events.ClassInfra, "cancelled while waiting for another bench: %w", ctx.Err())
		}
	}
	r, err := runDelegated(ctx, env, p, h, argv, st.env, seconds(st.deadline)+delegateTimes.benchOuterMargin, delegateTimes.benchKillGrace)
	if err == nil && r.res.TimedOut {
		removed, rerr := removeRolloutContainers(context.WithoutCancel(ctx), st.jobs)
		dir.Logf("bench killed at the outer deadline: removed the cell's rollout containers %v (%v)", removed, rerr)
	}
	<-benchSlot
	if err != nil {
		return Outcome{}, err
	}
	return a.outcome(ctx, env, st, r)
}

// benchSlot holds the one bench a process runs at a time (Solve).
var benchSlot = make(chan struct{}, 1)

// benchInstallSec is BenchFlow's agent install budget for agent
// (benchflow/agents/install.py, effective_install_timeout, and the
// registry's per-agent install_timeout): 900 s, 1200 s for mimo and
// prime-agent, none for the oracle (nothing is installed).
func benchInstallSec(agent string) float64 {
	id := agent
	if ns, rest, ok := strings.Cut(agent, ":"); ok && benchflowNamespaces[ns] {
		id = rest
	}
	if ns, rest, ok := strings.Cut(id, "/"); ok && (ns == "acp" || ns == "acpx") {
		id = rest
	}
	switch id {
	case delegatedOracleAgent:
		return 0
	case "mimo", "prime-agent":
		return 1200
	}
	return 900
}

// benchHardDeadline is BENCHFLOW_ROLLOUT_HARD_DEADLINE for a cell, in
// seconds, as BenchFlow sums its phase budgets
// (benchflow/rollout/_deadline.py): the agent budget times the turns (two
// for self-gen: the creator's and the solver's; an undeclared budget
// counts 900 s), plus the verifier and build budgets (600 s each when
// undeclared), the agent's install budget (benchInstallSec) and the
// 1800 s margin.
func benchHardDeadline(t *task.Task, agent, mode string) float64 {
	budget := t.AgentTimeoutSec
	if !t.AgentTimeoutDeclared {
		budget = 900
	}
	turns := 1.0
	if mode == skillModeSelfGen {
		turns = 2
	}
	return budget*turns + t.VerifierTimeoutSec + t.BuildTimeoutSec + benchInstallSec(agent) + 1800
}

// benchPathVars are the variables BenchFlow (and the docker CLI it runs)
// read as paths relative to their working directory; bench runs in the
// cell directory, so a relative value is anchored at the caller's.
var benchPathVars = []string{"BENCHFLOW_SKILL_CREATOR_DIR", "DOCKER_CONFIG", "BENCHFLOW_DOTENV_PATH"}

// proxyVars are the variables that put bench behind a proxy.
var proxyVars = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"}

// benchEnviron is what bench runs with beyond the caller's environment
// (lookup), with base the caller's working directory:
//
//   - BENCHFLOW_ROLLOUT_HARD_DEADLINE = computed, unless the caller
//     exported one; the deadline returned is the one in force (the
//     caller's when it is a number > 0, else computed: the outer kill is
//     always bounded);
//   - each relative benchPathVars value, and a relative
//     BENCHFLOW_AGENTS_SOURCE that names a local directory (BenchFlow's
//     remote_manifests reads it as a path then, else as owner/repo),
//     anchored at base;
//   - behind a proxy, the Docker bridge gateway (read from `docker network
//     inspect bridge`, so a custom bip is right), 172.17.0.1 and
//     host.docker.internal added to no_proxy and NO_PROXY, so the sandbox
//     traffic bench sends to the engine's bridge does not go to the proxy.
//
// notes say what was changed, for run.log.
func benchEnviron(ctx context.Context, base string, lookup func(string) (string, bool), computed float64) (float64, map[string]string, []string) {
	extra := map[string]string{}
	var notes []string
	deadline := computed
	if v, ok := lookup("BENCHFLOW_ROLLOUT_HARD_DEADLINE"); ok && strings.TrimSpace(v) != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
			deadline = f
		}
		notes = append(notes, fmt.Sprintf("BENCHFLOW_ROLLOUT_HARD_DEADLINE=%s exported by the caller, kept (proctor's outer kill at %gs + margin)", v, deadline))
	} else {
		extra["BENCHFLOW_ROLLOUT_HARD_DEADLINE"] = strconv.FormatFloat(computed, 'f', -1, 64)
	}
	anchor := func(k, v string) {
		abs := filepath.Join(base, v)
		extra[k] = abs
		notes = append(notes, fmt.Sprintf("%s=%s anchored at the caller's directory: %s", k, v, abs))
	}
	relative := func(v string) bool {
		return v != "" && !filepath.IsAbs(v) && !strings.HasPrefix(v, "~")
	}
	for _, k := range benchPathVars {
		if v, ok := lookup(k); ok && relative(v) {
			anchor(k, v)
		}
	}
	if v, ok := lookup("BENCHFLOW_AGENTS_SOURCE"); ok && relative(strings.TrimSpace(v)) && isDirectory(filepath.Join(base, strings.TrimSpace(v))) {
		anchor("BENCHFLOW_AGENTS_SOURCE", strings.TrimSpace(v))
	}
	proxied := false
	for _, k := range proxyVars {
		if v, ok := lookup(k); ok && strings.TrimSpace(v) != "" {
			proxied = true
		}
	}
	if proxied {
		add := []string{"172.17.0.1", "host.docker.internal"}
		gw, err := dockerCLI(ctx, "network", "inspect", "bridge", "--format", "{{range .IPAM.Config}}{{.Gateway}} {{end}}")
		if err != nil {
			notes = append(notes, "the bridge gateway is unknown: "+err.Error())
		}
		add = append(strings.Fields(gw), add...)
		var have []string
		for _, k := range []string{"no_proxy", "NO_PROXY"} {
			if v, ok := lookup(k); ok {
				have = append(have, strings.Split(v, ",")...)
			}
		}
		list := mergeList(have, add)
		extra["no_proxy"], extra["NO_PROXY"] = list, list
		notes = append(notes, "behind a proxy: no_proxy="+list)
	}
	return deadline, extra, notes
}

// mergeList joins have and add as a comma list, trimmed, without empty
// or repeated entries, in first-seen order.
func mergeList(have, add []string) string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(have, add...) {
		s = strings.TrimSpace(s)
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// composeProject is the Docker Compose project BenchFlow names a rollout's
// sandbox after (benchflow/sandbox/docker.py,
// _sanitize_docker_compose_project_name of the rollout name).
func composeProject(rollout string) string {
	s := strings.ToLower(rollout)
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= '0' && s[0] <= '9') {
		s = "0" + s
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// removeRolloutContainers removes the containers and networks of this
// cell's rollouts: those BenchFlow labelled benchflow.owned=true in the
// Compose project of a rollout directory under jobs (BenchFlow writes a
// rollout's directory before it starts its sandbox). Nothing of another
// sweep is touched. It returns what it removed.
func removeRolloutContainers(ctx context.Context, jobs string) ([]string, error) {
	dirs, _ := filepath.Glob(filepath.Join(jobs, "*", "*"))
	var removed []string
	var firstErr error
	for _, d := range dirs {
		if !isDirectory(d) {
			continue
		}
		proj := "label=com.docker.compose.project=" + composeProject(filepath.Base(d))
		for _, kind := range []string{"container", "network"} {
			ls := []string{kind, "ls", "-q", "--filter", "label=benchflow.owned=true", "--filter", proj}
			if kind == "container" {
				ls = []string{"container", "ls", "-aq", "--filter", "label=benchflow.owned=true", "--filter", proj}
			}
			out, err := dockerCLI(ctx, ls...)
			if err == nil && out != "" {
				ids := strings.Fields(out)
				rm := append([]string{kind, "rm"}, ids...)
				if kind == "container" {
					rm = append([]string{"container", "rm", "-f", "-v"}, ids...)
				}
				_, err = dockerCLI(ctx, rm...)
				if err == nil {
					removed = append(removed, ids...)
				}
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return removed, firstErr
}

// Preflight checks once per run that BenchFlow can run here: `bench
// --help` and `docker compose version` must both succeed (bench starts
// task sandboxes with Docker Compose), and no other BenchFlow sweep may be
// running on the engine: BenchFlow removes every benchflow.owned
// container at each job's start and end, so two sweeps on one engine
// break each other. It is skipped by --dry-run.
func (a benchflowArm) Preflight(ctx context.Context) error {
	for _, argv := range [][]string{{"bench", "--help"}, {"docker", "compose", "version"}} {
		cctx, cancel := context.WithTimeout(ctx, delegateTimes.dockerCall)
		cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			msg := lastLine(string(out), nil)
			if msg != "" {
				msg = ": " + msg
			}
			return fmt.Errorf("BenchFlow arms need `%s` to work, and it failed (%v%s); install BenchFlow (the bench CLI) and Docker Compose v2", strings.Join(argv, " "), err, msg)
		}
	}
	out, err := dockerCLI(ctx, "container", "ls", "-q", "--filter", "label=benchflow.owned=true")
	if err != nil {
		return fmt.Errorf("BenchFlow arms check that no other BenchFlow sweep runs on the Docker engine, and could not: %w", err)
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		return fmt.Errorf("another BenchFlow sweep is running on this Docker engine (%d running containers labelled benchflow.owned=true: %s): BenchFlow removes every benchflow.owned container at each job's start and end, so two sweeps on one engine break each other's rollouts; wait for it to end, or run on another engine", len(ids), strings.Join(ids, " "))
	}
	return nil
}

// PreflightKey: one pre-flight for every BenchFlow arm of a run.
func (a benchflowArm) PreflightKey() string { return "benchflow" }

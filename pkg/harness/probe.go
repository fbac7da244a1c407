package harness

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ProbeBinaryEnv names a statically linked proctor binary the probe copies
// into the sandbox; unset, the running executable is used when it is
// statically linked (CGO_ENABLED=0, as `make build` links it).
const ProbeBinaryEnv = "PROCTOR_PROBE_BINARY"

// ProbeTargetsEnv holds the probe's targets when --probe-targets is not
// given (isoprobe.ParseTargets syntax).
const ProbeTargetsEnv = "PROCTOR_PROBE_TARGETS"

// SkillMount is where the skill of a skill arm (and of
// docker-probe:<skill-path>) is installed: SkillMount/<skill dir name>.
const SkillMount = "/opt/proctor/skills"

// ProbeReportFile is the probe's report in the cell directory.
const ProbeReportFile = "isolation_probe.json"

// probeTimeout bounds the probe program.
const probeTimeout = 5 * time.Minute

// maxProbeReport bounds the probe program's stdout (its JSON report).
const maxProbeReport = 4 << 20

// probeArm runs the isolation probe (DESIGN §6) in exactly the sandbox an
// agent arm gets: the task image, the agent's working directory, uid
// 10001, the agent's network plan and the agent's environment allowlist
// (agentSandbox, RunUntrusted, agentEnv); each probed step's for a
// multi-step task. No model, no cost. It scores itself: reward 1 when
// every leak class is closed, n/a or expected by the task
// (metadata.probe_expect), else 0. Its rows check the setup and are never
// compared.
//
// docker-probe:<skill-path> (the task-runs seed's meaning) runs in the
// baseline's sandbox, nothing installed, and also forbids that skill:
// treatment is open when the agent can read it at its host path, a copy
// of any of its files anywhere, or anything of its name where a skill is
// offered (forbiddenSkillOf, isoprobe.ForbiddenSkill).
// docker-probe-skill:<skill-path> runs in the skill arm's sandbox: the
// skill installed under SkillMount and only that skill visible.
type probeArm struct{ ref Ref }

func (a probeArm) Ref() Ref                       { return a.ref }
func (a probeArm) SetupCheck() bool               { return true }
func (a probeArm) Networks(t *task.Task) Networks { return agentNetworks(t) }

// Check refuses a docker-probe:<skill-path> or
// docker-probe-skill:<skill-path> whose directory holds no SKILL.md.
func (a probeArm) Check(baseDir string, _ func(string) string) error {
	if a.ref.Arg == "" {
		return nil
	}
	dir := a.ref.AgentDir(baseDir)
	if fi, err := os.Stat(filepath.Join(dir, "SKILL.md")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("harness %s: %s holds no SKILL.md", a.ref.Name, dir)
	}
	return nil
}

// Preflight checks once per run, before any image is built, that the
// probe has a static proctor binary to copy into the sandbox
// (ProbeBinary): a dynamically linked one would otherwise error every
// cell of the arm, class infra, after its sandbox was built.
func (a probeArm) Preflight(context.Context) error {
	_, err := ProbeBinary(nil)
	return err
}

// PreflightKey: one pre-flight for every probe arm of a run.
func (a probeArm) PreflightKey() string { return "probe" }

// Refusal refuses what every in-container arm refuses, and a task whose
// metadata.probe_expect is malformed or names no leak class.
func (a probeArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	if a.onHost() {
		if c, why := hostRefusal(t); why != "" {
			return c, why
		}
	}
	if c, r := refusal(t, a.needs(t)); c != "" {
		return c, r
	}
	return probeExpectRefusal(t)
}

// probeExpectRefusal refuses a task whose metadata.probe_expect is
// malformed or names no leak class.
func probeExpectRefusal(t *task.Task) (events.ErrorClass, string) {
	expect, err := t.ProbeExpect()
	if err == nil {
		if err = isoprobe.CheckExpect(expect); err != nil {
			err = fmt.Errorf("%s: metadata.%s: %w", path.Base(t.DefinitionFile), task.ProbeExpectKey, err)
		}
	}
	if err != nil {
		return events.ClassRefused, err.Error()
	}
	return "", ""
}

func (a probeArm) needs(*task.Task) task.Needs { return task.NeedsProbe }

// SolvesSteps: the probe's one Solve covers a multi-step task (probeRuns).
func (a probeArm) SolvesSteps() bool { return true }

var _ StepSolver = probeArm{}

// Prepare makes the sandbox docker-claude would get (the seed's probe
// runs where its agent runs): the same image and networks, and the same
// egress proxy sidecar with the same allowlist (the task's list and the
// Claude provider's hosts), model gateway and CLI variables
// (claudeEgress). When proctor's environment sets up no Claude provider
// (ClaudeProvider fails), the probe gets the sidecar docker-claude would
// get with its default provider, api.anthropic.com with no credential,
// and the cell's log says why.
func (a probeArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	p, err := agentSandbox(ctx, env, a.Networks(env.Task()))
	if err != nil {
		return p, err
	}
	dir := env.Dir()
	pc, err := ClaudeProvider(claudeEnviron(env.Getenv), func(m string) { dir.Logf("probe: %s", m) })
	if err != nil {
		dir.Logf("probe: %v; the sidecar is docker-claude's with its default provider and no credential", err)
		pc = providers.ClaudeConfig{Provider: providers.ClaudeAnthropic, Env: map[string]string{},
			Route: providers.Route{Provider: providers.ClaudeAnthropic, Hosts: []string{"api.anthropic.com:443"}, AuthHeaders: []string{"X-Api-Key", "Authorization"}}}
	}
	var vars map[string]string
	if p.Spec.Egress, vars, _, err = claudeEgress(env, pc); err != nil {
		return Placement{}, err
	}
	p.State = probeState{claudeEnv: vars}
	return p, nil
}

// probeState is what Prepare found for Solve: claudeEnv are the provider
// variables docker-claude's CLI would get (placeholders behind the
// gateway).
type probeState struct{ claudeEnv map[string]string }

// ProbeResult is isolation_probe.json: the statuses, whether the probe
// passed, the targets and the probe program's whole report.
type ProbeResult struct {
	Passed  bool              `json:"passed"`
	Classes map[string]string `json:"classes"`
	// Expected are the classes the task declares open on purpose
	// (metadata.probe_expect) and the probe found open, each with its
	// reason.
	Expected map[string]string `json:"expected,omitempty"`
	Targets  isoprobe.Targets  `json:"targets"`
	Workdir  string            `json:"workdir"`
	// User is the uid:gid the probe ran as (the first probed step's),
	// AgentUser the run's --agent-user.
	User      string `json:"user"`
	AgentUser string `json:"agent_user"`
	// RootGivesUp lists, when a probed step's agent runs as root, what
	// such an agent can do that no leak class covers (RootGivesUp): the
	// probe reports it and does not fail on it.
	RootGivesUp []string `json:"root_gives_up,omitempty"`
	Skill       string   `json:"skill,omitempty"`
	// Forbidden is the host directory of the skill a
	// docker-probe:<skill-path> probe forbids.
	Forbidden string `json:"forbidden_skill,omitempty"`
	// Report is the probe program's report; for a multi-step task, the
	// Merge of its probed steps' (Steps).
	Report   isoprobe.Report `json:"report"`
	Steps    []ProbeStep     `json:"steps,omitempty"`
	Duration float64         `json:"duration_sec"`
}

// Solve runs the probe in the sandbox the agent gets and folds its report
// (isoprobe.Fold, with the task's metadata.probe_expect) into
// isolation_probe.json, Finished.isolation_probe and a Verdict. A
// multi-step task is probed in the sandbox of each step probeRuns names,
// each step's workdir/ uploaded and its setup.sh run first as the
// launcher does, and the reports merged (isoprobe.Merge). A probe program
// that does not report, or a step's sandbox that cannot be made, is an
// error (the cell has no verdict), never a pass.
func (a probeArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	t, dir, d := env.Task(), env.Dir(), p.Driver
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: env.Plan().Harness, Model: env.Plan().Model}, time.Time{}); err != nil {
		return Outcome{}, err
	}
	pr, expect, err := a.stageProbe(ctx, env, d, h)
	if err != nil {
		return Outcome{}, err
	}
	var (
		labels []string
		reps   []isoprobe.Report
		steps  []ProbeStep
		last   sandbox.ExecResult
		total  time.Duration
	)
	// Each probed step runs as its own agent's user (under --agent-user
	// task, the step's [steps.agent].user: StepSolveUser).
	stepUser := func(s *task.Step) string {
		if s == nil {
			return p.User
		}
		return StepSolveUser(env.Spec(), t, s, p)
	}
	var isos []map[string]any
	runs := probeRuns(t, stepUser)
	if a.onHost() {
		// One probe on the host, in the host arms' scratch tree.
		rep, res, iso, err := pr.runHost(ctx, env, p, h)
		if err != nil {
			return Outcome{}, err
		}
		isos, reps, last, total, runs = append(isos, iso), append(reps, rep), res, res.Duration, nil
	}
	for _, r := range runs {
		for _, s := range r.upload {
			if s.WorkdirDir == "" {
				continue
			}
			if err := UploadStepWorkdir(ctx, d, h, s, p.Workdir, stepUser(s), dir); err != nil {
				return Outcome{}, events.Classed(events.ClassSandbox, fmt.Errorf("the sandbox of step %s: %w", r.step.Name, err))
			}
		}
		view := env
		if r.step != nil {
			view = stepView{env, r.step}
		}
		rep, res, iso, err := pr.run(ctx, view, p, h, r.user)
		if err != nil {
			return Outcome{}, err
		}
		isos = append(isos, iso)
		last, total = res, total+res.Duration
		reps = append(reps, rep)
		if r.step != nil {
			labels = append(labels, "step "+r.step.Name)
			ps := ProbeStep{Name: r.step.Name, User: fmt.Sprint(iso["user"]), Report: rep}
			for _, s := range r.upload {
				ps.Uploaded = append(ps.Uploaded, s.Name)
			}
			steps = append(steps, ps)
		}
	}
	rep := isoprobe.Merge(labels, reps)
	statuses, passed := isoprobe.Fold(rep, expect)
	if a.onHost() {
		passed = hostStatuses(statuses, expect) && passed
	}
	first := isos[0]
	result := ProbeResult{Passed: passed, Classes: statuses, Targets: pr.targets, Workdir: p.Workdir, User: fmt.Sprint(first["user"]),
		AgentUser: fmt.Sprint(first["agent_user"]), Skill: pr.skill, Report: rep, Steps: steps, Duration: round3(total.Seconds())}
	for _, iso := range isos {
		if iso["root_gives_up"] != nil {
			// What a root agent can do that no leak class covers: the
			// probe reports it, and passes or fails on its classes alone.
			result.RootGivesUp = RootGivesUp
		}
	}
	if pr.forbid != nil {
		result.Forbidden = pr.forbid.HostDir
	}
	for c, why := range expect {
		if statuses[c] == isoprobe.Expected {
			if result.Expected == nil {
				result.Expected = map[string]string{}
			}
			result.Expected[c] = why
		}
	}
	b, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	if err := os.WriteFile(dir.Path(ProbeReportFile), append(b, '\n'), 0o644); err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	reason := probeReason(statuses, expect)
	if a.onHost() {
		reason = hostProbeReason(statuses, expect)
	}
	if result.RootGivesUp != nil {
		reason += "; the agent runs as root (--agent-user task): it can change the system the verifier runs on"
	}
	dir.Logf("probe: %s", reason)
	fin := events.FinishedData{
		Reason: reason, ExitCode: last.ExitCode, DurationSec: round3(total.Seconds()),
		StdoutTail: reason, IsolationProbe: statuses,
		Isolation: map[string]any{"network": p.Networks.Solve, "workdir": p.Workdir},
	}
	for _, k := range []string{"agent_user", "user", "user_from", "user_declared", "agent_location", "host_open", "cgroup", "leftover_kill"} {
		if v, ok := first[k]; ok {
			fin.Isolation[k] = v
		}
	}
	if result.RootGivesUp != nil {
		fin.Isolation["root_gives_up"], fin.Isolation["root_keeps"] = RootGivesUp, RootKeeps
	}
	reward := 0.0
	if passed {
		reward = 1
	}
	v := events.VerdictData{Reward: &reward, Rewards: map[string]float64{"reward": reward}, ReturnCode: &last.ExitCode}
	_ = dir.WriteReward(reward)
	return Outcome{Finished: fin, Verdict: &v}, nil
}

// stageProbe reads the probe's targets and the task's expected classes
// and copies the skill of docker-probe:<skill-path> and the probe binary
// into the sandbox: what every probe of the cell shares.
func (a probeArm) stageProbe(ctx context.Context, env Env, d sandbox.Driver, h *sandbox.Handle) (probeRun, map[string]string, error) {
	t := env.Task()
	targets, err := isoprobe.ParseTargets(env.Spec().ProbeTargets)
	if err != nil {
		return probeRun{}, nil, events.Classed(events.ClassRefused, err)
	}
	bin, err := ProbeBinary(env.Getenv)
	if err != nil {
		return probeRun{}, nil, events.Classed(events.ClassInfra, err)
	}
	expect, err := t.ProbeExpect()
	if err == nil {
		err = isoprobe.CheckExpect(expect)
	}
	if err != nil {
		return probeRun{}, nil, events.Classed(events.ClassRefused, err)
	}
	skill := ""
	var forbid *isoprobe.ForbiddenSkill
	switch {
	case a.ref.Kind == DockerProbeSkill:
		planned := a.ref.AgentDir(env.Spec().BaseDir)
		src, err := inputDir(ctx, env, planned)
		if err != nil {
			return probeRun{}, nil, err
		}
		skill = path.Join(SkillMount, filepath.Base(planned))
		if err := d.CopyIn(ctx, h, src, skill); err != nil {
			return probeRun{}, nil, events.Classed(events.ClassSandbox, fmt.Errorf("copy the skill in: %w", err))
		}
	case a.ref.Arg != "":
		planned := a.ref.AgentDir(env.Spec().BaseDir)
		dir, err := inputDir(ctx, env, planned)
		if err != nil {
			return probeRun{}, nil, err
		}
		if forbid, err = forbiddenSkillOf(planned, dir); err != nil {
			return probeRun{}, nil, events.Classed(events.ClassRefused, err)
		}
	}
	if a.onHost() {
		// The probe runs on the host: nothing of it enters the container.
		return probeRun{targets: targets, forbid: forbid, bin: bin}, expect, nil
	}
	stage := strings.TrimSuffix(StagePath("probe"), "/probe")
	if err := d.CopyIn(ctx, h, bin, stage); err != nil {
		return probeRun{}, nil, events.Classed(events.ClassSandbox, fmt.Errorf("copy the probe in: %w", err))
	}
	return probeRun{targets: targets, skill: skill, forbid: forbid, stage: stage, bin: path.Join(stage, filepath.Base(bin))}, expect, nil
}

// probeReason is the probe row's reason: the failing classes, else that
// every class is closed or n/a, with the expected ones and their reasons.
func probeReason(statuses, expect map[string]string) string {
	if failing := isoprobe.OpenClasses(statuses); len(failing) > 0 {
		return "leaks: " + strings.Join(failing, ", ")
	}
	if exp := isoprobe.ExpectedClasses(statuses, expect); len(exp) > 0 {
		return "every class closed, n/a or expected; expected: " + strings.Join(exp, ", ")
	}
	return "every class closed or n/a"
}

// probeRun is what every probe of one cell shares: the targets, the
// arm's skill, the stage directory (skipped by the walk) and the binary
// copied there.
type probeRun struct {
	targets           isoprobe.Targets
	skill, stage, bin string
	forbid            *isoprobe.ForbiddenSkill
}

// run probes once as user in the agent's working directory through
// RunUntrusted, so the probe sees what an agent sees and leaves what an
// agent's solve leaves: the agent's directories prepared, the prompt and
// the probe's configuration (hostConfig) staged, and `proctor
// probe-inside` run with the agent's environment; it returns the probe
// program's report.
func (pr probeRun) run(ctx context.Context, env Env, p Placement, h *sandbox.Handle, user string) (isoprobe.Report, sandbox.ExecResult, map[string]any, error) {
	s := &probeSolve{pr: pr, env: env, p: p}
	defer s.close()
	p.User = user
	r, err := RunUntrusted(ctx, env, p, h, s)
	return probeReport(r, err, s.stdout.Bytes(), s.errLog, "")
}

// probeReport reads the probe program's report from its stdout once
// RunUntrusted or RunUntrustedHost returned r and err: an error without a
// class is a sandbox error, and a probe that failed or printed no report
// is one too, naming the end of its stderr (errLog) and where it ran.
func probeReport(r UntrustedResult, err error, stdout []byte, errLog *cellfs.Capture, where string) (isoprobe.Report, sandbox.ExecResult, map[string]any, error) {
	if err != nil {
		if _, ok := events.ClassOf(err); !ok {
			err = events.Classed(events.ClassSandbox, err)
		}
		return isoprobe.Report{}, r.Exec, nil, err
	}
	res := r.Exec
	var rep isoprobe.Report
	if res.ExitCode != 0 || res.TimedOut || json.Unmarshal(stdout, &rep) != nil || rep.Classes == nil {
		tail := ""
		if errLog != nil {
			tail = cellfs.Suffix(errLog.Tail.String(), 300)
		}
		return isoprobe.Report{}, res, nil, events.Classf(events.ClassSandbox, "the probe program did not report%s (exit %d, timed out %v): %s",
			where, res.ExitCode, res.TimedOut, tail)
	}
	return rep, res, r.Isolation, nil
}

// probeSolve is one probe's part of RunUntrusted.
type probeSolve struct {
	pr      probeRun
	env     Env
	p       Placement
	cfgFile string
	stdout  bytes.Buffer
	errLog  *cellfs.Capture
	closed  bool
}

// Stage copies the prompt in as an agent arm does, and the probe's
// configuration (with the agent's variables: the probe's env class
// compares them with the image's) into the stage directory.
func (s *probeSolve) Stage(ctx context.Context, u *UntrustedRun) error {
	t, d, h := s.env.Task(), u.Driver, u.Handle
	if err := copyPrompt(ctx, d, h, t.Prompt); err != nil {
		return events.Classed(events.ClassSandbox, err)
	}
	cfg := isoprobe.Config{
		Root: "/", Workdir: u.Workdir, Home: agentHome, Targets: s.pr.targets, Skill: s.pr.skill, Forbid: s.pr.forbid,
		Skip: []string{s.pr.stage}, TimeoutSec: 3,
	}
	if s.p.Spec.Egress != nil {
		cfg.Allowlist = s.p.Spec.Egress.Allow
	}
	note, err := hostConfig(ctx, s.env, d, s.p.Spec, s.agentVars(u), &cfg)
	if err != nil {
		return events.Classed(events.ClassInfra, err)
	}
	if note != "" {
		s.env.Dir().Logf("probe: %s", note)
	}
	if s.cfgFile, err = writeProbeConfig(cfg); err != nil {
		return events.Classed(events.ClassInfra, err)
	}
	if err := d.CopyIn(ctx, h, s.cfgFile, s.pr.stage); err != nil {
		return events.Classed(events.ClassSandbox, fmt.Errorf("copy the probe in: %w", err))
	}
	return nil
}

// agentVars is the environment an agent of this cell gets: docker-claude's
// provider variables and the gateway's CA variables, the egress proxy's
// variables over them (as RunUntrusted lays them).
func (s *probeSolve) agentVars(u *UntrustedRun) map[string]string {
	t := s.env.Task()
	st, _ := s.p.State.(probeState)
	own := withEnv(maps.Clone(st.claudeEnv), sandbox.CAEnv(u.Handle))
	return withEnv(agentEnv(s.env, u.Workdir, time.Now().Add(seconds(t.AgentTimeoutSec)), own), sandbox.ProxyEnv(u.Handle))
}

func (s *probeSolve) Command(ctx context.Context, u *UntrustedRun) (sandbox.ExecSpec, error) {
	dir := s.env.Dir()
	var err error
	if s.errLog, err = dir.OpenCapture("probe.stderr.log"); err != nil {
		return sandbox.ExecSpec{}, events.Classed(events.ClassInfra, err)
	}
	argv := []string{s.pr.bin, "probe-inside", "--config", path.Join(s.pr.stage, filepath.Base(s.cfgFile))}
	dir.Logf("probe: %s as %s in %s (targets %s)", strings.Join(argv, " "), u.User, u.Workdir, s.pr.targets)
	return sandbox.ExecSpec{
		Cmd: argv, Env: s.agentVars(u), Timeout: probeTimeout,
		Stdout: &capWriter{w: &s.stdout, n: maxProbeReport}, Stderr: s.errLog,
	}, nil
}

func (s *probeSolve) Ended(sandbox.ExecResult) { s.close() }

func (s *probeSolve) close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.errLog != nil {
		_ = s.errLog.Close(s.env.Dir(), "")
	}
	if s.cfgFile != "" {
		_ = os.RemoveAll(filepath.Dir(s.cfgFile))
	}
}

// writeProbeConfig writes cfg as probe.json in a fresh temp directory.
func writeProbeConfig(cfg isoprobe.Config) (string, error) {
	tmp, err := os.MkdirTemp("", "proctor-probe-")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	p := filepath.Join(tmp, "probe.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", err
	}
	return p, nil
}

// ProbeBinary is the proctor binary the probe copies into the sandbox: the
// file PROCTOR_PROBE_BINARY names (read through getenv; nil: os.Getenv),
// else the running executable. It must be
// a statically linked ELF (no interpreter), since a task image may have no
// C library at all or another one; the error says how to get one.
func ProbeBinary(getenv func(string) string) (string, error) {
	p := orProcess(getenv)(ProbeBinaryEnv)
	from := ProbeBinaryEnv
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("the probe needs a static proctor binary: %w", err)
		}
		p, from = exe, "the running proctor"
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("the probe needs a static proctor binary; %s (%s): %w", from, p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("the probe needs a static proctor binary and %s (%s) is dynamically linked: build it with CGO_ENABLED=0 (make build does) or set %s", from, p, ProbeBinaryEnv)
		}
	}
	return p, nil
}

// capWriter keeps the first n bytes written and drops the rest.
type capWriter struct {
	w io.Writer
	n int
}

func (c *capWriter) Write(p []byte) (int, error) {
	if k := min(len(p), c.n); k > 0 {
		_, _ = c.w.Write(p[:k])
		c.n -= k
	}
	return len(p), nil
}

// forbiddenSkillOf describes the skill planned at the directory planned
// and read at dir on this host (inputDir: planned itself, or its stored
// tree in the node's cache) for a docker-probe:<skill-path> probe: its
// absolute directory on this host, its planned directory name and
// frontmatter name, every regular file by size and SHA-256 (symlinks not
// followed), and the places proctor's skill arms install a skill.
func forbiddenSkillOf(planned, dir string) (*isoprobe.ForbiddenSkill, error) {
	fb := &isoprobe.ForbiddenSkill{Name: filepath.Base(planned), HostDir: filepath.ToSlash(dir),
		Places: []string{SkillMount, SkillPluginDir + "/skills"}}
	if sk, err := loadSkillDir(skillDir("", dir), fb.Name); err == nil && sk.Name != fb.Name && skillName.MatchString(sk.Name) {
		fb.Names = []string{sk.Name}
	}
	err := filepath.WalkDir(dir, func(q string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		size, sum, err := sha256File(q)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, q)
		fb.Files = append(fb.Files, isoprobe.FileSig{Name: filepath.ToSlash(rel), Size: size, SHA256: sum})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the forbidden skill %s: %w", dir, err)
	}
	return fb, nil
}

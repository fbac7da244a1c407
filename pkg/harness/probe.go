package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
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
// (agentSandbox, prepareAgentDirs, agentEnv). No model, no cost. It scores
// itself: reward 1 when every leak class is closed or n/a, else 0. Its rows
// check the setup and are never compared.
type probeArm struct{ ref Ref }

func (a probeArm) Ref() Ref                       { return a.ref }
func (a probeArm) SetupCheck() bool               { return true }
func (a probeArm) Networks(t *task.Task) Networks { return agentNetworks(t) }

// Check refuses a docker-probe:<skill-path> whose directory holds no
// SKILL.md.
func (a probeArm) Check(baseDir string) error {
	if a.ref.Arg == "" {
		return nil
	}
	dir := a.ref.AgentDir(baseDir)
	if fi, err := os.Stat(filepath.Join(dir, "SKILL.md")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("harness %s: %s holds no SKILL.md", a.ref.Name, dir)
	}
	return nil
}

func (a probeArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	return refusal(t, a.needs(t))
}

func (a probeArm) needs(*task.Task) task.Needs { return task.NeedsProbe }

func (a probeArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	return agentSandbox(ctx, env, a.Networks(env.Task()))
}

// ProbeResult is isolation_probe.json: the statuses, whether the probe
// passed, the targets and the probe program's whole report.
type ProbeResult struct {
	Passed   bool              `json:"passed"`
	Classes  map[string]string `json:"classes"`
	Targets  isoprobe.Targets  `json:"targets"`
	Workdir  string            `json:"workdir"`
	User     string            `json:"user"`
	Skill    string            `json:"skill,omitempty"`
	Report   isoprobe.Report   `json:"report"`
	Duration float64           `json:"duration_sec"`
}

// Solve prepares the agent's directories and prompt as an agent arm does,
// copies the skill in (skill form), copies a static proctor binary and the
// probe's configuration into a stage directory the walk skips, runs
// `proctor probe-inside` as uid 10001 in the agent's working directory with
// the agent's environment, and folds its JSON report (isoprobe.Fold) into
// isolation_probe.json, Finished.isolation_probe and a Verdict. A probe
// program that does not report is a sandbox error (the cell has no
// verdict), never a pass.
func (a probeArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	t, dir, d, workdir := env.Task(), env.Dir(), p.Driver, p.Workdir
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: env.Plan().Harness, Model: env.Plan().Model}, time.Time{}); err != nil {
		return Outcome{}, err
	}
	targets, err := isoprobe.ParseTargets(env.Spec().ProbeTargets)
	if err != nil {
		return Outcome{}, events.Classed(events.ClassRefused, err)
	}
	bin, err := ProbeBinary()
	if err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	if _, _, err := prepareAgentDirs(ctx, d, h, workdir); err != nil {
		return Outcome{}, events.Classed(events.ClassSandbox, err)
	}
	if err := copyPrompt(ctx, d, h, t.Prompt); err != nil {
		return Outcome{}, events.Classed(events.ClassSandbox, err)
	}
	skill := ""
	if a.ref.Arg != "" {
		src := a.ref.AgentDir(env.Spec().BaseDir)
		skill = path.Join(SkillMount, filepath.Base(src))
		if err := d.CopyIn(ctx, h, src, skill); err != nil {
			return Outcome{}, events.Classed(events.ClassSandbox, fmt.Errorf("copy the skill in: %w", err))
		}
	}
	agentVars := withEnv(agentEnv(env, workdir, time.Now().Add(seconds(t.AgentTimeoutSec)), nil), sandbox.ProxyEnv(h))
	cfg := isoprobe.Config{
		Root: "/", Workdir: workdir, Home: agentHome, Targets: targets, Skill: skill,
		Skip: []string{}, TimeoutSec: 3,
	}
	if p.Spec.Egress != nil {
		cfg.Allowlist = p.Spec.Egress.Allow
	}
	if cfg.TaskFiles, err = taskFileSigs(t); err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	if cfg.EnvAllowed, err = allowedEnv(ctx, d, p.Spec, agentVars); err != nil {
		dir.Logf("probe: env left untested: %v", err)
	}
	stage := strings.TrimSuffix(StagePath("probe"), "/probe")
	cfg.Skip = append(cfg.Skip, stage)
	cfgFile, err := writeProbeConfig(cfg)
	if err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	defer os.RemoveAll(filepath.Dir(cfgFile))
	for _, f := range []string{bin, cfgFile} {
		if err := d.CopyIn(ctx, h, f, stage); err != nil {
			return Outcome{}, events.Classed(events.ClassSandbox, fmt.Errorf("copy the probe in: %w", err))
		}
	}
	var stdout bytes.Buffer
	errLog, err := dir.OpenCapture("probe.stderr.log")
	if err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	argv := []string{path.Join(stage, filepath.Base(bin)), "probe-inside", "--config", path.Join(stage, filepath.Base(cfgFile))}
	dir.Logf("probe: %s as %s in %s (targets %s)", strings.Join(argv, " "), AgentUser, workdir, targets)
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: argv, User: AgentUser, Workdir: workdir, Env: agentVars, Timeout: probeTimeout,
		Stdout: &capWriter{w: &stdout, n: maxProbeReport}, Stderr: errLog,
	})
	_ = errLog.Close(dir, "")
	if err != nil {
		return Outcome{}, events.Classed(events.ClassSandbox, fmt.Errorf("run the probe: %w", err))
	}
	var rep isoprobe.Report
	if res.ExitCode != 0 || res.TimedOut || json.Unmarshal(stdout.Bytes(), &rep) != nil || rep.Classes == nil {
		return Outcome{}, events.Classf(events.ClassSandbox, "the probe program did not report (exit %d, timed out %v): %s",
			res.ExitCode, res.TimedOut, cellfs.Suffix(errLog.Tail.String(), 300))
	}
	statuses, passed := isoprobe.Fold(rep)
	result := ProbeResult{Passed: passed, Classes: statuses, Targets: targets, Workdir: workdir, User: AgentUser,
		Skill: skill, Report: rep, Duration: round3(res.Duration.Seconds())}
	b, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	if err := os.WriteFile(dir.Path(ProbeReportFile), append(b, '\n'), 0o644); err != nil {
		return Outcome{}, events.Classed(events.ClassInfra, err)
	}
	failing := isoprobe.OpenClasses(statuses)
	reason := "every class closed or n/a"
	if len(failing) > 0 {
		reason = "leaks: " + strings.Join(failing, ", ")
	}
	dir.Logf("probe: %s", reason)
	fin := events.FinishedData{
		Reason: reason, ExitCode: res.ExitCode, DurationSec: round3(res.Duration.Seconds()),
		StdoutTail: reason, IsolationProbe: statuses,
		Isolation: map[string]any{"network": p.Networks.Solve, "user": AgentUser, "workdir": workdir},
	}
	reward := 0.0
	if passed {
		reward = 1
	}
	v := events.VerdictData{Reward: &reward, Rewards: map[string]float64{"reward": reward}, ReturnCode: &res.ExitCode}
	_ = dir.WriteReward(reward)
	return Outcome{Finished: fin, Verdict: &v}, nil
}

// ProbeBinary is the proctor binary the probe copies into the sandbox: the
// file PROCTOR_PROBE_BINARY names, else the running executable. It must be
// a statically linked ELF (no interpreter), since a task image may have no
// C library at all or another one; the error says how to get one.
func ProbeBinary() (string, error) {
	p := os.Getenv(ProbeBinaryEnv)
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

// taskFileSigs lists every regular file of the task's tests and solution
// directories by size and SHA-256 (symlinks are not followed).
func taskFileSigs(t *task.Task) ([]isoprobe.FileSig, error) {
	var out []isoprobe.FileSig
	for _, root := range []string{t.TestsDir, t.SolutionDir} {
		if root == "" {
			continue
		}
		err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(t.Dir, p)
			sum := sha256.Sum256(b)
			out = append(out, isoprobe.FileSig{Name: filepath.ToSlash(rel), Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", t.Name, err)
		}
	}
	return out, nil
}

// allowedEnv is the agent's environment allowlist: the image's ENV (the
// driver's ImageEnver ability), the task's declared sandbox env and the
// arm's own variables. nil (env untested) when the image's ENV cannot be
// read.
func allowedEnv(ctx context.Context, d sandbox.Driver, spec sandbox.Spec, own map[string]string) ([]string, error) {
	ie, ok := d.(sandbox.ImageEnver)
	if !ok {
		return nil, fmt.Errorf("the sandbox driver %T cannot read an image's ENV", d)
	}
	img, err := ie.ImageEnv(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, kv := range img {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, m := range []map[string]string{spec.Env, own} {
		for k := range m {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
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

package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// AgentUser is the uid:gid in-container agents run as (DESIGN §4).
const AgentUser = "10001:10001"

// Paths inside the container of an agent arm.
const (
	agentOutput = "/agent-output"
	agentHome   = "/tmp/proctor-agent-home"
)

// installTimeout bounds an agent's install step.
const installTimeout = 15 * time.Minute

// errInstall marks an install step that failed: the agent made no attempt.
var errInstall = errors.New("agent install failed")

// agentArm runs an agent:<dir> arm in the task container (DESIGN §5.1).
type agentArm struct{ ref Ref }

// agentState is what Prepare found for Solve: agent.toml, and what the
// agent calls (nil when it declares nothing).
type agentState struct {
	spec  *AgentSpec
	calls *agentCalls
}

func (a agentArm) Ref() Ref                       { return a.ref }
func (a agentArm) Networks(t *task.Task) Networks { return agentNetworks(t) }

// Check loads agent.toml (LoadAgent) and the variables of the providers
// it declares (AgentProviderEnv), so a bad agent directory or a provider
// that cannot work fails the run before it starts.
func (a agentArm) Check(baseDir string, getenv func(string) string) error {
	spec, err := LoadAgent(a.ref.AgentDir(baseDir))
	if err != nil {
		return err
	}
	if _, err := AgentProviderEnv(spec, orProcess(getenv)); err != nil {
		return fmt.Errorf("agent %s: %w", spec.Dir, err)
	}
	return nil
}
func (a agentArm) SetupCheck() bool { return false }

func (a agentArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	return refusal(t, a.needs(t))
}

func (a agentArm) needs(*task.Task) task.Needs { return task.NeedsContainerAgent }

// agentNetworks: agent arms never get the open network: a per-cell
// internal network whose only way out is the egress proxy (an allowlist
// task, or a public one with an egress list; Solve "allowlist"), else
// none (Solve "internal"); the verifier then moves as verifyNetwork says
// (the bridge when its policy is public, no network when it is
// no-network).
func agentNetworks(t *task.Task) Networks {
	solve := "internal"
	if agentAllowlist(t) != nil {
		solve = task.NetworkAllowlist
	}
	return Networks{Start: sandbox.NetworkInternal, Solve: solve, Verify: verifyNetwork(t, sandbox.NetworkInternal)}
}

// Prepare builds the task image, checks the working directory rule
// (AgentWorkdir; refused), loads agent.toml (refused when it is bad) and
// applies the agent's install step as a derived image (AgentImageRef; a
// failed install is solver_error, anything else of the derived image
// sandbox).
func (a agentArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	p, err := agentSandbox(ctx, env, a.Networks(env.Task()))
	if err != nil {
		return Placement{}, err
	}
	dir, err := inputDir(ctx, env, a.ref.AgentDir(env.Spec().BaseDir))
	if err != nil {
		return Placement{}, err
	}
	spec, err := LoadAgent(dir)
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	runImage, err := agentImage(ctx, env, p.Image, spec)
	if err != nil {
		if ctx.Err() != nil {
			return Placement{}, ctx.Err()
		}
		if errors.Is(err, errInstall) {
			return Placement{}, events.Classed(events.ClassSolverError, err)
		}
		return Placement{}, events.Classed(events.ClassSandbox, err)
	}
	// What the agent declares it calls gets it an egress proxy whatever
	// the task's policy: its model gateway (agentGateway).
	calls, err := agentGateway(env, spec)
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, fmt.Errorf("agent %s: %w", spec.Dir, err))
	}
	if calls != nil {
		p.Spec.Egress = calls.egress
	}
	p.Spec.Image, p.State = runImage, agentState{spec, calls}
	return p, nil
}

// agentSandbox is the sandbox every in-container agent arm (and the probe,
// which must see exactly what an agent sees) runs in: the task image
// (built and recorded), the working directory rule (AgentWorkdir; refused)
// and the network plan n.
func agentSandbox(ctx context.Context, env Env, n Networks) (Placement, error) {
	img, err := TaskImage(ctx, env)
	if err != nil {
		return Placement{}, err
	}
	workdir, err := AgentWorkdirIn(env.Spec(), env.Task(), img)
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	spec, err := composeSpec(ctx, env, containerSpec(env, img.Ref, workdir, n.Start))
	if err != nil {
		return Placement{}, err
	}
	user, _ := SolveUser(env.Spec(), env.Task(), img)
	return Placement{
		Driver: env.Driver(), Spec: spec,
		Networks: n, Workdir: workdir, User: user, Image: img,
	}, nil
}

// AgentWorkdir is where an in-container agent works: the task's workdir,
// else the image's WORKDIR, else / (refused). It must pass
// task.AgentWorkdirRefusal (DESIGN §4: /app, /root, /home/user, ... but
// never a system directory, one of proctor's or /); the error names the
// directory and where it came from.
func AgentWorkdir(t *task.Task, img sandbox.ImageInfo) (string, error) {
	return agentWorkdir(AgentUserSealed, t, img)
}

// agentWorkdir is AgentWorkdir with the working directory rule of an
// agent running under --agent-user mode (agentWorkdirRule).
func agentWorkdir(mode string, t *task.Task, img sandbox.ImageInfo) (string, error) {
	dir, from := t.Workdir, "the task's workdir"
	if dir == "" {
		dir, from = img.Workdir, "the image's WORKDIR"
	}
	if dir == "" {
		dir, from = "/", "the image's WORKDIR (unset)"
	}
	if why := agentWorkdirRule(mode)(dir); why != "" {
		if mode == AgentUserTask {
			return "", fmt.Errorf("%s is %s: %s; refused before the agent starts", from, dir, why)
		}
		return "", fmt.Errorf("in-container agents work as uid 10001 in a working tree chowned to them, and %s is %s: %s; refused before the agent starts", from, dir, why)
	}
	return path.Clean(dir), nil
}

// resolveWorkdir creates the agent's working directory in the sandbox
// (as root) and checks the rule of AgentWorkdir again on it with every
// symlink resolved (`pwd -P`), so an image whose /work is a link to /etc
// is refused (class refused) before anything is chowned. It returns the
// resolved directory, the one to chown (chown -R does not descend through
// a link given as its argument).
func resolveWorkdir(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workdir, mode string) (string, error) {
	var out strings.Builder
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", `mkdir -p "$1" && cd "$1" && pwd -P`, "sh", workdir}, Stdout: &out, Stderr: &out, Timeout: time.Minute,
	})
	if err != nil || res.ExitCode != 0 {
		return "", fmt.Errorf("create the agent's working directory %s: exit %d: %v: %s", workdir, res.ExitCode, err, cellfs.Suffix(out.String(), 300))
	}
	real := strings.TrimSpace(out.String())
	if real == "" || real == workdir {
		return workdir, nil
	}
	if why := agentWorkdirRule(mode)(real); why != "" {
		return "", events.Classed(events.ClassRefused, fmt.Errorf("the agent's working directory %s resolves to %s in the image: %s; refused before the agent starts", workdir, real, why))
	}
	return real, nil
}

// agentImage returns the image an agent arm runs in: the task image with
// the agent's install step applied, cached per (task image id, agent
// files) as a committed image (the driver's DerivedImager ability), so
// install runs once per task image (and again on a task image built from
// other bases or another image map).
func agentImage(ctx context.Context, env Env, img sandbox.ImageInfo, a *AgentSpec) (string, error) {
	if strings.TrimSpace(a.Install) == "" {
		return img.Ref, nil
	}
	d := env.Driver()
	di, ok := d.(sandbox.DerivedImager)
	if !ok {
		return "", fmt.Errorf("the sandbox driver %T cannot make derived images (agent install)", d)
	}
	dir := env.Dir()
	ref := AgentImageRef(img.ID, a.Hash)
	_, err := di.EnsureDerived(ctx, ref, sandbox.Spec{
		RunID: env.RunID(), CellID: env.CellID(), Image: img.Ref, Network: sandbox.NetworkBridge, Lifetime: installTimeout + time.Minute,
	}, func(ctx context.Context, h *sandbox.Handle) error {
		if err := d.CopyIn(ctx, h, a.Dir, AgentMount); err != nil {
			return err
		}
		out, err := dir.OpenCapture("install.log")
		if err != nil {
			return err
		}
		dir.Logf("agent install: %s", a.Install)
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{
			Cmd: []string{"bash", "-c", a.Install}, Workdir: AgentMount, Timeout: installTimeout, Stdout: out, Stderr: out,
		})
		_ = out.Close(dir, "")
		switch {
		case err != nil:
			return err
		case res.TimedOut:
			return fmt.Errorf("%w: timed out after %s (install.log)", errInstall, installTimeout)
		case res.ExitCode != 0:
			return fmt.Errorf("%w: exit %d: %s", errInstall, res.ExitCode, cellfs.Suffix(out.Tail.String(), 500))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return ref, nil
}

// AgentImageRef is the committed image of an agent's install step on a
// task image: proctor-agent:<image id hex[:12]>-<agent hash[:12]>.
func AgentImageRef(taskImageID, agentHash string) string {
	id := strings.TrimPrefix(taskImageID, "sha256:")
	return "proctor-agent:" + id[:min(12, len(id))] + "-" + agentHash[:min(12, len(agentHash))]
}

// Solve runs the agent (DESIGN §5.1) through RunUntrusted: the agent
// directory at /opt/proctor/agent and the prompt in /agent-output
// (agentSolve.Stage), the agent as uid 10001 in its workdir with the
// Anpord, Archal and proctor environment variables, stdin closed, SIGTERM
// at the deadline and SIGKILL after the grace period. Its stdout is parsed
// line by line into events as it runs; after RunUntrusted's epilogue its
// operations file and metrics.json are read back (agentSolve.finish).
func (a agentArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, _ := p.State.(agentState)
	if st.spec == nil {
		return Outcome{}, errors.New("agent arm: Solve without Prepare")
	}
	s := &agentSolve{env: env, ag: st.spec, calls: st.calls}
	defer s.close()
	r, err := RunUntrusted(ctx, env, p, h, s)
	if err != nil {
		return Outcome{}, err
	}
	return s.finish(ctx, p, h, r)
}

// agentSolve is an agent:<dir> arm's part of RunUntrusted: its captures
// (solve.log, agent.stderr.log, response.txt) and its event-line stream.
type agentSolve struct {
	env Env
	ag  *AgentSpec

	out, logs, resp *cellfs.Capture
	run             *stream
	lines, errLines *sandbox.Lines
	closed          bool

	// calls is what the agent declares it calls; envFile its provider
	// variables' file in the sandbox (agentCalls.install), red the
	// redactor of their real values over everything the agent prints.
	calls          *agentCalls
	envFile        string
	red            *Redactor
	stdout, stderr io.WriteCloser
}

func (s *agentSolve) Stage(ctx context.Context, u *UntrustedRun) error {
	if err := u.Driver.CopyIn(ctx, u.Handle, s.ag.Dir, AgentMount); err != nil {
		return fmt.Errorf("copy the agent in: %w", err)
	}
	if err := copyPrompt(ctx, u.Driver, u.Handle, s.env.Task().Prompt); err != nil {
		return err
	}
	var err error
	if s.envFile, s.red, err = s.calls.install(ctx, s.env, u.Driver, u.Handle); err != nil {
		return err
	}
	s.env.Dir().Logf("agent directory, prompt and /agent-output ready")
	return nil
}

func (s *agentSolve) Command(ctx context.Context, u *UntrustedRun) (sandbox.ExecSpec, error) {
	dir := s.env.Dir()
	budget := s.ag.Budget(s.env.Task().AgentTimeoutSec)
	var err error
	for _, c := range []struct {
		name string
		to   **cellfs.Capture
	}{{"solve.log", &s.out}, {"agent.stderr.log", &s.logs}, {"response.txt", &s.resp}} {
		if *c.to, err = dir.OpenCapture(c.name); err != nil {
			return sandbox.ExecSpec{}, err
		}
	}
	s.run = newStream(ctx, s.env, s.resp)
	s.lines, s.errLines = s.run.lines(), s.run.stderrLines()
	deadline := time.Now().Add(seconds(budget))
	dir.Logf("agent: %s as %s in %s (budget %gs, grace %s, network internal, egress %s)", s.ag.Run, u.User, u.Workdir, budget, u.Grace, u.Egress)
	// The gateway's CA variables win over agent.toml, as the proxy's do
	// (RunUntrusted adds those), and the provider variables of the env
	// file over both.
	env := withEnv(withEnv(withEnv(agentEnv(s.env, u.Workdir, deadline, s.ag.Env), s.ag.Vars()), recorderEnv()), sandbox.CAEnv(u.Handle))
	s.stdout, s.stderr = s.red.Writer(io.MultiWriter(s.out, s.lines)), s.red.Writer(io.MultiWriter(s.logs, s.errLines))
	return sandbox.ExecSpec{
		Cmd: agentCommand(s.ag.Run, s.envFile), Env: env,
		Timeout: seconds(budget), Stdout: s.stdout, Stderr: s.stderr,
	}, nil
}

func (s *agentSolve) Ended(sandbox.ExecResult) { s.close() }

// close ends the stream and closes the captures, once.
func (s *agentSolve) close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.stdout != nil {
		_, _ = s.stdout.Close(), s.stderr.Close()
	}
	if s.run != nil {
		_, _ = s.lines.Close(), s.errLines.Close()
		s.run.wait()
	}
	dir := s.env.Dir()
	for _, c := range []struct {
		c    *cellfs.Capture
		tail string
	}{{s.out, "stdout.tail.txt"}, {s.logs, ""}, {s.resp, ""}} {
		if c.c != nil {
			_ = c.c.Close(dir, c.tail)
		}
	}
}

// lastStderrLine is the last non-blank line of an agent's stderr tail (already
// redacted), at most 200 bytes of valid UTF-8: the reason a solve that
// made no attempt gives first (a run command the image cannot start names
// its missing interpreter there).
func lastStderrLine(tail string) string {
	lines := strings.Split(strings.TrimRight(tail, " \t\r\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 200 {
		last = strings.ToValidUTF8(last[:200], "") + "…"
	}
	return last
}

// finish builds the Finished of a solve RunUntrusted ended (r): the
// agent's own Finished line folded in, no attempt when it printed nothing,
// its operations file and metrics.json read back; then AfterSolve (work/,
// the recompile) and the cell's prompt.txt and solver.json.
func (s *agentSolve) finish(ctx context.Context, p Placement, h *sandbox.Handle, r UntrustedResult) (Outcome, error) {
	run, res, dir, d := s.run, r.Exec, s.env.Dir(), p.Driver
	run.mu.Lock()
	defer run.mu.Unlock()
	r.Isolation["network"] = sandbox.NetworkInternal
	if sandbox.CAEnv(h) != nil {
		r.Isolation["gateway"] = "intercept" // the credentials stayed in the proxy
	}
	fin := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", res.ExitCode), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationSec: round3(res.Duration.Seconds()), StdoutTail: s.out.RowTail(), Synthesized: true,
		Isolation: r.Isolation,
		LongLines: run.longLines, ResponseTruncated: s.resp.Capped(), LowFidelityOps: run.lowFidelity(),
	}
	if res.TimedOut {
		fin.Reason = "timeout"
	}
	if run.finished != nil {
		fin.Synthesized = false
		if run.finished.Reason != "" && !res.TimedOut {
			fin.Reason = run.finished.Reason
		}
	}
	fin.NoAttempt = !res.TimedOut && !run.anything && s.out.Tail.Total() == 0
	if fin.NoAttempt {
		fin.Reason = fmt.Sprintf("exit %d before any event or output", res.ExitCode)
		if last := lastStderrLine(s.logs.Tail.String()); last != "" {
			fin.Reason += "; its stderr ends: " + last
		}
	}
	if err := AfterSolve(ctx, s.env, d, h, r.RealWorkdir, &fin); err != nil {
		return Outcome{}, err
	}
	run.ensureStarted(time.Time{})
	readAgentOperations(ctx, d, h, run, dir)
	publishRecorded(ctx, d, h, run, dir)
	if resp := responseTail(s.resp.Tail.String()); resp != "" {
		run.publish(events.Message, events.MessageData{Role: "response", Text: resp}, time.Time{})
	}
	m := readMetrics(ctx, d, h, dir)
	if m != nil && !run.usage {
		if u, ok := UsageFromMetrics(m); ok {
			run.publish(events.Usage, u, time.Time{})
		}
	}
	fin.AgentReported = archalReported(dir, m, run.usage)
	if run.publishErr != nil {
		return Outcome{Finished: fin}, run.publishErr
	}
	if err := writeAgentCellFiles(dir, s.env.Task().Prompt, responseTail(s.resp.Tail.String()), fin); err != nil {
		return Outcome{}, err
	}
	dir.Logf("agent ended: %s after %.3fs", fin.Reason, fin.DurationSec)
	return Outcome{Finished: fin}, capError(res.TimedOut, s.ag.Budget(s.env.Task().AgentTimeoutSec), s.env.Task().AgentTimeoutSec)
}

// writeAgentCellFiles writes an agent: arm's prompt.txt (the prompt it
// was given) and solver.json: its final claim (the end of its response
// text, as the row's agent_claim takes it; "" when it said nothing), the
// solve's ending and what its metrics.json reported.
func writeAgentCellFiles(dir cellfs.Dir, prompt, claim string, fin events.FinishedData) error {
	if err := writeCellFile(dir, PromptFile, []byte(prompt)); err != nil {
		return err
	}
	return writeSolverJSON(dir, map[string]any{
		"result": claim, "reason": fin.Reason, "exit_code": fin.ExitCode,
		"timed_out": fin.TimedOut, "duration_sec": fin.DurationSec, "metrics": fin.AgentReported,
	})
}

// GraderPaths are where the verifier's and the oracle's files appear only
// after an agent's solve (the tests, the solution, the reward directory,
// proctor's stage directories and exit hook): a symlink an agent left that
// resolves into one would let it hand the verifier a grader's file as its
// answer (RemoveGraderLinks).
var GraderPaths = []string{"/tests", "/verifier", "/solution", "/oracle", "/logs/verifier"}

// graderLinkScript removes every symlink under its arguments that resolves
// (readlink -m, following links that exist, so through a link to a
// directory, a chain, a relative link or /proc/self/root; readlink without
// -m, the link's own text, where -m is missing) into GraderPaths or a
// /.proctor-* path, and prints each as "LINK -> TARGET".
var graderLinkScript = func() string {
	var pats []string
	for _, g := range GraderPaths {
		pats = append(pats, g, g+"/*")
	}
	pats = append(pats, "/.proctor-*")
	return `for l; do
  r=$(readlink -m -- "$l" 2>/dev/null) || r=$(readlink -- "$l") || continue
  case "$r" in ` + strings.Join(pats, "|") + `) printf '%s -> %s\n' "$l" "$r"; rm -f -- "$l" ;; esac
done`
}()

// RemoveGraderLinks runs after an agent's processes are killed and before
// the verifier copies the graders in (DESIGN §4, "The agent's working
// directory"): it removes every symlink in the places an agent writes (its
// working tree, /tmp, /var/tmp, /dev/shm, its HOME, /agent-output, /logs)
// that resolves into a grader path (GraderPaths), and returns them as
// "LINK -> TARGET". Such a link points at nothing while the agent runs; it
// exists only to be read by the verifier as the grader's own file. The
// verifier then sees what the agent wrote itself, or nothing.
func RemoveGraderLinks(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workdir string) ([]string, error) {
	var out, errOut strings.Builder
	cmd := []string{"sh", "-c", `for d; do [ -e "$d" ] && printf '%s\0' "$d"; done | xargs -0 -r sh -c 'find "$@" -type l -exec sh -c "$0" sh {} +' ` + shq(graderLinkScript),
		"sh", workdir, "/tmp", "/var/tmp", "/dev/shm", agentHome, agentOutput, "/logs"}
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: cmd, Stdout: &out, Stderr: &errOut, Timeout: 5 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		return nil, fmt.Errorf("remove symlinks into grader paths: exit %d: %v: %s", res.ExitCode, err, cellfs.Suffix(errOut.String(), 300))
	}
	var links []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l != "" {
			links = append(links, l)
		}
	}
	return links, nil
}

// noteGraderLinks records the links RemoveGraderLinks removed in the cell
// log and as isolation.grader_links_removed (their count).
func noteGraderLinks(dir cellfs.Dir, iso map[string]any, links []string) {
	if len(links) == 0 {
		return
	}
	iso["grader_links_removed"] = len(links)
	for _, l := range links {
		dir.Logf("removed a symlink into a grader path before the verifier: %s", l)
	}
}

// agentEnv is the environment an in-container agent runs with, on top of
// the sandbox's (the task's declared env): own (agent.toml's [env]), then
// the Anpord, Archal and proctor variables of DESIGN §5.1, which win. It
// is the whole allowlist: nothing of the host's environment is passed.
func agentEnv(env Env, workdir string, deadline time.Time, own map[string]string) map[string]string {
	t, plan := env.Task(), env.Plan()
	out := map[string]string{}
	for k, v := range own {
		out[k] = v
	}
	for k, v := range map[string]string{
		"PROCTOR_PROMPT": t.Prompt, "ANPORD_PROMPT": t.Prompt, "AGENT_TASK": t.Prompt,
		"PROCTOR_PROMPT_FILE": agentOutput + "/prompt.md",
		"PROCTOR_MODEL":       plan.Model, "ANPORD_MODEL": plan.Model, "AGENT_MODEL": plan.Model,
		"PROCTOR_WORKSPACE": workdir, "ANPORD_WORKSPACE": workdir,
		"AGENT_RUN_MODE":     "local",
		"AGENT_METRICS_FILE": agentOutput + "/metrics.json",
		"AGENT_TRACE_FILE":   agentOutput + "/agent-trace.json",
		"PROCTOR_DEADLINE":   strconv.FormatInt(deadline.UnixMilli(), 10),
		"PROCTOR_TASK":       t.Name, "PROCTOR_RUN_ID": env.RunID(), "PROCTOR_CELL_ID": env.CellID(),
		"PROCTOR_AGENT_DIR": AgentMount, "HOME": agentHome, "ANPORD_HOME": agentHome,
		// Archal's session id is the cell's; its clone URLs name the
		// task's git services, and proctor's tasks declare none.
		"AGENT_SESSION_ID": env.CellID(), "AGENT_CLONE_URLS": "{}",
		"PROCTOR_OPERATIONS_FILE": AgentOperationsFile, "DOKIMI_OPERATIONS_FILE": AgentOperationsFile,
	} {
		out[k] = v
	}
	if t.InheritPriorSession {
		// A step that continues the prior step's session: an agent that
		// can resume its own session (its state under HOME or
		// /agent-output, which persist between steps) does.
		out["PROCTOR_INHERIT_PRIOR_SESSION"] = "1"
	}
	return out
}

// responseTail is the Message{role: response} text: the last
// cellfs.RowTailBytes (4 KiB) of the response text as valid UTF-8, without
// the blank space around it (the end of a response is where an agent's
// final answer is).
func responseTail(text string) string {
	return strings.TrimSpace(cellfs.Suffix(strings.TrimRight(text, " \t\r\n"), cellfs.RowTailBytes))
}

// copyPrompt writes the prompt to /agent-output/prompt.md.
func copyPrompt(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, prompt string) error {
	dir, err := os.MkdirTemp("", "proctor-prompt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := dir + "/prompt.md"
	if err := os.WriteFile(p, []byte(prompt), 0o644); err != nil {
		return err
	}
	if err := d.CopyIn(ctx, h, p, agentOutput); err != nil {
		return fmt.Errorf("copy the prompt in: %w", err)
	}
	return nil
}

// readMetrics copies /agent-output out (symlinks stored as symlinks,
// never followed) and reads the Archal metrics.json when the agent wrote
// one from the same copy, never through the host: a regular file of at
// most MaxMetricsBytes (the driver's FileCopier ability; a driver without
// it yields no metrics). The values are kept as reported; a metrics.json
// that is a link, a device, too large or not JSON is ignored and the row
// says why ({"error": reason}).
func readMetrics(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, dir cellfs.Dir) map[string]any {
	const metricsPath = agentOutput + "/metrics.json"
	fc, ok := d.(sandbox.FileCopier)
	if !ok {
		dir.Logf("metrics.json not read: the sandbox driver %T cannot read files out", d)
		return nil
	}
	files, err := fc.CopyOutFiles(ctx, h, agentOutput, dir.Path(), map[string]int64{metricsPath: MaxMetricsBytes})
	if err != nil {
		if !errors.Is(err, sandbox.ErrNotFound) {
			dir.Logf("copy %s out: %v", agentOutput, err)
		}
		return nil
	}
	f, ok := files[metricsPath]
	switch {
	case !ok:
		return nil
	case f.Err != nil:
		dir.Logf("metrics.json ignored: %v", f.Err)
		return map[string]any{"error": "metrics.json ignored: " + f.Err.Error()}
	}
	m, err := ReadMetrics(f.Data)
	if err != nil {
		dir.Logf("%v", err)
		return map[string]any{"error": err.Error()}
	}
	return m
}

// UsageFromMetrics fills token counts from metrics.json (Archal shape:
// inputTokens, outputTokens, llmCallCount) when no Usage event carried
// them. A key metrics.json lacks stays nil in the event: unreported, not 0.
func UsageFromMetrics(m Metrics) (events.UsageData, bool) {
	in, okIn := m.Int("inputTokens")
	out, okOut := m.Int("outputTokens")
	if !okIn && !okOut {
		return events.UsageData{}, false
	}
	var u events.UsageData
	if okIn {
		u.PromptTokens = events.Count(in)
	}
	if okOut {
		u.CompletionTokens = events.Count(out)
	}
	if n, ok := m.Int("llmCallCount"); ok {
		u.Calls = events.Count(n)
	}
	if p, ok := m["provider"].(string); ok {
		u.Model = p
	}
	if s, ok := m["model"].(string); ok {
		u.Model = s
	}
	return u, true
}

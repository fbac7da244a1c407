package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Solve runs the CLI (DESIGN §5.3) through RunUntrusted as uid 10001 (under
// --agent-user task the task's user, ResolveSolveUser; as root with
// IS_SANDBOX=1) in
// the working directory: the prompt (after the skill notice, for the
// skill arm) on stdin, the provider variables from an env file on the
// agent's HOME that the wrapper sources and deletes before the CLI starts
// (never on argv), stdout written to a file in the container and followed
// live into events (claudeSolve). At the deadline the CLI gets SIGTERM,
// then SIGKILL after the grace period; ResultGrace after a result event
// the live reader saw, everything of uid 10001 still running is killed
// (resultGrace). After RunUntrusted's epilogue the skill plugin is
// removed before the verifier runs, and the stream file is read back
// (the authority: lines the live reader missed are published from it)
// and stored redacted as solver.jsonl, claude.stream.jsonl a link to it
// (claudeSolve.finish); then AfterSolve (work/, the recompile) and the
// cell's prompt.txt and solver.json (the last result event). The
// Finished and the error are claudeEnding's and claudeSolveError's.
func (a claudeArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(claudeState)
	if !ok || st.env == nil {
		return Outcome{}, errors.New("claude arm: Solve without Prepare")
	}
	if a.onHost() {
		return a.solveHost(ctx, env, p, h, st)
	}
	reader, ok := p.Driver.(sandbox.FileReader)
	if !ok {
		return Outcome{}, fmt.Errorf("the sandbox driver %T cannot read the stream file back", p.Driver)
	}
	s := &claudeSolve{env: env, st: st, red: NewRedactor(st.secrets)}
	if st.skill != nil {
		s.treatment = st.skill.Name
	}
	defer s.close()
	r, err := RunUntrusted(ctx, env, p, h, s)
	if err != nil {
		return Outcome{}, err
	}
	if len(st.files) > 0 {
		if r, err := p.Driver.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"rm", "-rf", claudeFilesDir}, Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
			return Outcome{}, fmt.Errorf("remove %s after the solve: exit %d: %v", claudeFilesDir, r.ExitCode, err)
		}
	}
	if st.skill != nil {
		if r, err := p.Driver.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"rm", "-rf", SkillPluginDir}, Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
			return Outcome{}, fmt.Errorf("remove %s before the verifier: exit %d: %v", SkillPluginDir, r.ExitCode, err)
		}
	}
	return s.finish(ctx, p.Driver, reader, h, r)
}

// claudeSolve is the Claude arms' part of RunUntrusted: the staged files,
// the wrapper script, the live reader of the stream and the result grace.
type claudeSolve struct {
	env       Env
	st        claudeState
	red       *Redactor
	treatment string
	resumed   string // the session of the step before this one resumes
	host      bool   // the CLI ran on the host (claudehost.go)
	prompt    string // as the CLI is given it (prompt.txt)

	logs    *cellfs.Capture
	stderr  io.WriteCloser
	stdout  io.WriteCloser
	lines   *sandbox.Lines
	live    *cliLive
	grace   *resultGrace
	gr      graceReport
	ca      map[string]string
	started time.Time
	closed  bool
}

// Stage copies in, in one go, everything the container needs and puts it
// in place as root (stageCLI): the provider env file, the prompt (after
// the skill notice, for the skill arm), an empty stream file, and the
// skill plugin (root's, read-only) at SkillPluginDir.
func (s *claudeSolve) Stage(ctx context.Context, u *UntrustedRun) error {
	prompt, place := s.env.Task().Prompt, ""
	if s.st.skill != nil {
		prompt = fmt.Sprintf(SkillNotice, s.st.skill.Name) + prompt
		place = fmt.Sprintf("rm -rf %[1]s && cp -R {stage}/abskill %[1]s && chown -R 0:0 %[1]s && chmod -R a+rX,go-w %[1]s\n", SkillPluginDir)
	}
	s.prompt = prompt
	return stageCLI(ctx, u, s.env, s.red, cliFiles{prompt: prompt, env: s.st.env, files: s.st.files, skill: s.st.skill, envPath: claudeEnvPath, stream: claudeStreamPath, place: place})
}

// cliFiles are what an agent CLI's solve stages (stageCLI).
type cliFiles struct {
	prompt string
	// env are the provider variables, written to envPath (0600, the
	// solver's) for the wrapper to source and delete.
	env     map[string]string
	envPath string
	// files are the provider variables' files, copied to their Sandbox
	// paths (one directory, the solver's, 0700; each file 0600).
	files []providers.File
	// stream is the (empty, the solver's) file the CLI's stdout goes to.
	stream string
	// skill, when set, is written as a one-skill plugin to <stage>/abskill
	// (its skill in abskill/skills/<name>); place is more of the root
	// script, where {stage} is the stage directory.
	skill *Skill
	place string
}

// stageCLI stages an agent CLI's files on the host and copies them in in
// one go, then puts them in place as root: the provider env file (removed
// from the host as soon as it is copied in; one a killed proctor leaves is
// the run's, and `proctor gc` removes it), the prompt in /agent-output,
// the empty stream file, then f.place; the stage is removed after.
func stageCLI(ctx context.Context, u *UntrustedRun, env Env, red *Redactor, f cliFiles) error {
	d, h, dir := u.Driver, u.Handle, env.Dir()
	host, err := StageDir(env.RunID())
	if err != nil {
		return err
	}
	defer os.RemoveAll(host)
	if f.skill != nil {
		skipped, err := f.skill.WritePlugin(filepath.Join(host, "abskill"))
		if err != nil {
			return fmt.Errorf("write the skill: %w", err)
		}
		for _, sk := range skipped {
			dir.Logf("skill: left out %s", sk)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "prompt.md"), []byte(f.prompt), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(host, "provider.env"), envFile(f.env), 0o600); err != nil {
		return err
	}
	place := ""
	if len(f.files) > 0 {
		if err := os.Mkdir(filepath.Join(host, "files"), 0o700); err != nil {
			return err
		}
		for i, pf := range f.files {
			name := fmt.Sprintf("%d", i)
			if err := os.WriteFile(filepath.Join(host, "files", name), pf.Data, 0o600); err != nil {
				return err
			}
			dst := shq(pf.Sandbox)
			place += fmt.Sprintf("mkdir -p %[1]s && chown %[2]s %[1]s && chmod 0700 %[1]s && cp {stage}/files/%[3]s %[4]s && chown %[2]s %[4]s && chmod 0600 %[4]s\n",
				shq(parentOf(pf.Sandbox)), u.User, name, dst)
		}
	}
	stage := StagePath("in")
	err = d.CopyIn(ctx, h, host, stage)
	_ = os.RemoveAll(host)
	if err != nil {
		return fmt.Errorf("copy the prompt and provider env in: %w", err)
	}
	prep := fmt.Sprintf(`set -e
cp %[3]s/provider.env %[4]s && chown %[2]s %[4]s && chmod 0600 %[4]s
cp %[3]s/prompt.md %[1]s/prompt.md && chown %[2]s %[1]s/prompt.md
: > %[5]s && chown %[2]s %[5]s
`, agentOutput, u.User, stage, f.envPath, f.stream)
	prep += strings.ReplaceAll(place+f.place, "{stage}", stage)
	prep += "rm -rf " + shq(parentOf(stage)) + "\n"
	var out bytes.Buffer
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", prep}, Stdout: &out, Stderr: &out, Timeout: 5 * time.Minute}); err != nil || res.ExitCode != 0 {
		return fmt.Errorf("stage the CLI's files: exit %d: %v: %s", res.ExitCode, err, red.String(out.String()))
	}
	return nil
}

// claudeEnvPath is the provider env file the wrapper sources and deletes.
const claudeEnvPath = agentHome + "/.provider.env"

// Command is the wrapper: it sources and deletes the provider env file,
// runs the CLI with the prompt on stdin and its stdout to the stream
// file, and follows that file to its own stdout (the live reader) until
// the CLI ends.
func (s *claudeSolve) Command(ctx context.Context, u *UntrustedRun) (sandbox.ExecSpec, error) {
	t, dir, plan := s.env.Task(), s.env.Dir(), s.env.Plan()
	var argv []string
	args, resumed := sessionArgs(ClaudeArgs(plan.Model, s.st.skill), t, s.st.session)
	for _, a := range args {
		argv = append(argv, shq(a))
	}
	if s.resumed = resumed; resumed != "" {
		dir.Logf("claude: resumes session %s of the step before (inherit_prior_session)", resumed)
	}
	script := fmt.Sprintf(`set -a; . %[1]s; set +a; rm -f %[1]s
%[2]s < %[3]s/prompt.md > %[4]s &
pid=$!
tail -c +1 -s 0.2 -f --pid=$pid %[4]s &
tpid=$!
wait $pid; rc=$?
wait $tpid
exit $rc
`, claudeEnvPath, strings.Join(argv, " "), agentOutput, claudeStreamPath)
	if err := s.sinks(ctx, func() error { return u.Killer.KillAll(ctx, u.Handle, u.Identity.Killer()) }); err != nil {
		return sandbox.ExecSpec{}, err
	}
	// The provider is reached through the sandbox's egress proxy (the
	// only way out of its internal network; RunUntrusted lays its
	// variables over these), with the gateway's CA when it intercepts.
	s.ca = sandbox.CAEnv(u.Handle)
	dir.Logf("claude: %s as %s in %s (budget %gs, grace %s, egress %s)", plan.Harness, u.Identity, u.Workdir, t.AgentTimeoutSec, u.Grace, u.Egress)
	cliEnv := claudeCLIEnv(s.env)
	cliEnv["HOME"], cliEnv["PATH"] = agentHome, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if u.Identity.Root() {
		// As root (--agent-user task) the CLI refuses
		// --dangerously-skip-permissions unless told it runs in a
		// sandbox, as Harbor runs it.
		cliEnv["IS_SANDBOX"] = "1"
	}
	s.started = time.Now()
	return sandbox.ExecSpec{
		Cmd:     []string{"sh", "-c", script},
		Env:     withEnv(cliEnv, s.ca),
		Timeout: seconds(t.AgentTimeoutSec), Stdout: s.stdout, Stderr: s.stderr,
	}, nil
}

// claudeCLIEnv is what the CLI gets beside the provider variables in
// every Claude arm: the bundled skills, non-essential traffic and the
// updater off, and the task and cell named.
func claudeCLIEnv(env Env) map[string]string {
	return map[string]string{
		"CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER": "1", "PROCTOR_TASK": env.Task().Name, "PROCTOR_CELL_ID": env.CellID(),
	}
}

// sinks opens the solve's live sinks: agent.stderr.log (redacted), the
// result grace (kill ends every process of the agent) and the live
// reader of the stream behind s.stdout.
func (s *claudeSolve) sinks(ctx context.Context, kill func() error) error {
	dir := s.env.Dir()
	var err error
	if s.logs, err = dir.OpenCapture("agent.stderr.log"); err != nil {
		return err
	}
	s.stderr = s.red.Writer(s.logs)
	s.grace = newResultGrace(ResultGrace, func() {
		if err := kill(); err != nil {
			dir.Logf("claude: kill the agent's processes %s after the result: %v", ResultGrace, err)
		}
	})
	results := 0 // the result lines the live reader saw: each (re)starts the grace
	s.live = newCLILive(ctx, s.env, func() lineFolder { return newClaudeStream(s.treatment) }, func(at time.Time) {
		if n := s.live.fold.(*claudeStream).results; n > results {
			results = n
			s.grace.result(at)
		}
	})
	s.lines = sandbox.NewLines(s.live.feed, 0)
	s.stdout = s.red.Writer(s.lines)
	return nil
}

// Ended stops the live reader and the result grace.
func (s *claudeSolve) Ended(sandbox.ExecResult) { s.close() }

// close ends the live reader and the grace and closes the captures, once.
func (s *claudeSolve) close() {
	if s.closed || s.live == nil {
		return
	}
	s.closed = true
	end := time.Now()
	_ = s.stdout.Close()
	_ = s.lines.Close()
	s.live.wait()
	s.gr = s.grace.stop(s.started, end)
	_ = s.stderr.Close()
	_ = s.logs.Close(s.env.Dir(), "")
}

// finish reads the stream file back (the authority: replayed with a fresh
// state, publishing what the live reader did not), stores it redacted and
// builds the Finished.
func (s *claudeSolve) finish(ctx context.Context, d sandbox.Driver, reader sandbox.FileReader, h *sandbox.Handle, r UntrustedResult) (Outcome, error) {
	dir, res := s.env.Dir(), r.Exec
	text, rerr, err := storeCLIStream(ctx, dir, reader, h, "claude", claudeStreamPath, s.red, s.prompt)
	if err != nil {
		return Outcome{}, err
	}
	live := s.live
	f, truncated := live.replay(text, rerr)
	defer live.mu.Unlock()
	st := f.(*claudeStream)
	if truncated && st.result != nil {
		truncated = false // the result line ended; only a partial line after it
	}
	iso := r.Isolation
	iso["network"], iso["home"] = sandbox.NetworkInternal, "tmpfs"
	if s.host {
		iso["network"], iso["home"] = "host", "scratch"
	}
	fin := events.FinishedData{
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationSec: round3(res.Duration.Seconds()),
		StdoutTail: cellfs.Suffix(text, cellfs.RowTailBytes), Synthesized: true, Isolation: iso,
	}
	if s.st.skill != nil {
		fin.Treatment = &events.Treatment{Skill: s.st.skill.Name, NoticeVersion: SkillNoticeVersion}
	}
	if id, _ := st.init["session_id"].(string); id != "" {
		s.st.session.set(id)
	}
	if s.resumed != "" {
		iso["resumed_session"] = s.resumed
	}
	if s.ca != nil {
		iso["gateway"] = "intercept" // the credentials stayed in the proxy
	}
	if err := AfterSolve(ctx, s.env, d, h, r.RealWorkdir, &fin); err != nil {
		return Outcome{}, err
	}
	if st.result != nil {
		// The last result event, as the stream (redacted) has it.
		if err := writeSolverJSON(dir, st.result); err != nil {
			return Outcome{}, err
		}
	}
	fin.AgentReported = st.metrics(truncated && st.result == nil)
	claudeEnding(&fin, st, res, s.gr, truncated)
	if s.gr.killed {
		dir.Logf("claude: still running %s after its result event: every process of %s killed (the verdict stands)", ResultGrace, iso["user"])
	}
	if u, n := st.unreported(); n > 0 {
		u.Partial = partialReason(st, n, fin.Reason)
		dir.Logf("claude: usage partial: %s", u.Partial)
		live.publish(claudeEvent{events.Usage, u}, time.Time{})
	}
	if live.publishErr != nil {
		return Outcome{Finished: fin}, live.publishErr
	}
	if err := claudeSolveError(st, fin, s.st.skill); err != nil {
		return Outcome{Finished: fin}, err
	}
	dir.Logf("claude ended: %s after %.3fs (tools %v)", fin.Reason, fin.DurationSec, slices.Sorted(maps.Keys(st.tools)))
	return Outcome{Finished: fin}, nil
}

// ResultGrace is how long the agent's processes may run on after the
// CLI's result event before every process of uid 10001 is killed: 2.1.332
// in print mode waits up to 10 minutes for background tasks after its last
// turn (a server the agent started keeps it alive), and a background
// task's notification may start one more turn, which gets this long from
// the result before it to finish (a later result starts the grace again).
const ResultGrace = 10 * time.Second

// resultGrace kills the agent's processes a fixed time after the last
// result event the live reader saw, unless the solve ended first. Its
// methods are safe for concurrent use.
type resultGrace struct {
	after time.Duration
	kill  func()

	mu       sync.Mutex
	timer    *time.Timer
	last     time.Time // when the last result line was read (zero: none)
	killedAt time.Time // when kill ran (zero: never)
	stopped  bool
	firing   sync.WaitGroup
}

func newResultGrace(after time.Duration, kill func()) *resultGrace {
	return &resultGrace{after: after, kill: kill}
}

// result (re)starts the grace at the read time at of a result line.
func (g *resultGrace) result(at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.last = at
	if g.timer != nil {
		g.timer.Stop()
	}
	g.timer = time.AfterFunc(g.after-time.Since(at), g.fire)
}

func (g *resultGrace) fire() {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.killedAt = time.Now()
	g.firing.Add(1)
	g.mu.Unlock()
	defer g.firing.Done()
	g.kill()
}

// graceReport is what the grace saw of a solve whose exec ran from start
// to end.
type graceReport struct {
	start, end time.Time
	// lastResult is when the live reader read the last result line
	// (zero: none).
	lastResult time.Time
	// killed: the grace ran out while the exec ran, and every process of
	// the agent was killed at killedAt.
	killed   bool
	killedAt time.Time
}

// stop ends the grace (no kill after it returns) and reports it for the
// exec that ran from start to end.
func (g *resultGrace) stop(start, end time.Time) graceReport {
	g.mu.Lock()
	g.stopped = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
	g.firing.Wait()
	r := graceReport{start: start, end: end, lastResult: g.last}
	if !g.killedAt.IsZero() && g.killedAt.Before(end) {
		r.killed, r.killedAt = true, g.killedAt
	}
	return r
}

// claudeEnding sets fin's Reason, TimedOut, NoAttempt and DurationSec from
// the stream s, the exec's result res and the grace report g (DESIGN
// §5.3). A solve killed after its result, by the grace or by the budget's
// end with nothing of the model after the result, keeps the result's
// verdict: never a timeout, its solve time ending at the result, the
// kill recorded in isolation.killed_after_result_sec. A timeout is
// otherwise "timeout", a miss. The solver made no attempt when it did not
// time out, no assistant turn of the model had output or a tool call
// (claudeStream.attempted), and no result says it succeeded.
func claudeEnding(fin *events.FinishedData, s *claudeStream, res sandbox.ExecResult, g graceReport, truncated bool) {
	_, after := s.unreported()
	lingered := s.result != nil && !g.lastResult.IsZero() && (g.killed || (res.TimedOut && after == 0))
	switch {
	case lingered:
		at, by := g.killedAt, fmt.Sprintf("%s after its result", ResultGrace)
		if !g.killed {
			at, by = g.end, "at the end of the budget"
		}
		fin.Reason = resultReason(s) + "; still running after its result: killed " + by
		fin.TimedOut = false
		fin.DurationSec = round3(g.lastResult.Sub(g.start).Seconds())
		fin.Isolation["killed_after_result_sec"] = round3(at.Sub(g.lastResult).Seconds())
	case res.TimedOut:
		fin.Reason = "timeout"
	case s.result == nil:
		fin.Reason = fmt.Sprintf("exit %d without a result event", res.ExitCode)
		if truncated {
			fin.Reason += " (truncated stream)"
		}
	default:
		fin.Reason = resultReason(s)
	}
	fin.NoAttempt = !fin.TimedOut && !s.attempted() && (s.result == nil || s.failed())
}

// resultReason describes the last result: "<subtype> (terminal_reason
// R)", or for a failed one "error: <subtype> (terminal_reason R, API
// status N): <what went wrong>".
func resultReason(s *claudeStream) string {
	r := s.result
	if !s.failed() {
		return fmt.Sprintf("%s (terminal_reason %v)", sval(r["subtype"]), r["terminal_reason"])
	}
	why := fmt.Sprintf("error: %s (terminal_reason %v", sval(r["subtype"]), r["terminal_reason"])
	if v := r["api_error_status"]; v != nil {
		why += fmt.Sprintf(", API status %v", v)
	}
	why += ")"
	if e := s.errorMessage(); e != "" {
		why += ": " + e
	}
	return why
}

// partialReason says why the usage of n assistant messages is partial.
func partialReason(s *claudeStream, n int, reason string) string {
	where := "no result event"
	if s.result != nil {
		where = fmt.Sprintf("%d assistant message(s) after the last result event", n)
	}
	return fmt.Sprintf("%s (%s): tokens summed from %d assistant message(s) once each, as the stream carries them (output counts are the stream's first figures, an undercount; no cost)", where, reason, n)
}

// claudeSolveError is the error a solve ends with instead of a verdict
// (nil: the verifier scores it, or NoAttemptError decides): a skill arm's
// treatment the CLI's init event does not offer is solver_error
// "treatment not offered" (out of the comparison: the cell was not
// treated); no attempt because of a provider error a new attempt may not
// meet (claudeStream.transientAPIError: a 429, an overloaded or failing
// provider, a connection that failed) is infra, which `tasks run
// --retries N` runs again.
func claudeSolveError(s *claudeStream, fin events.FinishedData, skill *Skill) error {
	if skill != nil && s.init != nil && !s.treatmentOffered() {
		return events.Classf(events.ClassSolverError,
			"treatment not offered: the CLI's init event does not offer the skill as %s (skills: %s; plugins: %s; see agent.stderr.log)",
			s.offeredAs, strings.Join(s.offered("skills"), ", "), strings.Join(s.offered("plugins"), ", "))
	}
	if fin.NoAttempt && s.transientAPIError() {
		return events.Classf(events.ClassInfra, "the model provider failed before any attempt (%s): a provider error, not the solver's; --retries runs the cell again", fin.Reason)
	}
	return nil
}

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// claudeLive is the live half of a solve: the stream-json lines read from
// the exec's stdout, folded and published in order by one goroutine.
type claudeLive struct {
	ctx   context.Context
	env   Env
	s     *claudeStream
	queue chan rawLine
	done  chan struct{}
	// onResult is called with the time a result line was read (from the
	// worker goroutine, mu held).
	onResult func(time.Time)

	mu         sync.Mutex
	started    bool
	emitted    int  // lines whose events were published live, in order
	stopped    bool // a line was cut (over the line cap): the rest waits for the file
	publishErr error
}

func newClaudeLive(ctx context.Context, env Env, treatment string, onResult func(time.Time)) *claudeLive {
	l := &claudeLive{ctx: ctx, env: env, s: newClaudeStream(treatment), queue: make(chan rawLine, 4096), done: make(chan struct{}), onResult: onResult}
	go func() {
		defer close(l.done)
		for r := range l.queue {
			l.handle(r)
		}
	}()
	return l
}

func (l *claudeLive) feed(text string, truncated bool) {
	if truncated {
		text = "\x00truncated"
	}
	l.queue <- rawLine{text, time.Now()}
}

func (l *claudeLive) handle(r rawLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || r.text == "\x00truncated" {
		l.stopped = true
		return
	}
	results := l.s.results
	for _, ev := range l.s.line(r.text) {
		l.publish(ev, r.at)
	}
	l.emitted++
	if l.s.results > results && l.onResult != nil {
		l.onResult(r.at)
	}
}

// publish records one event, a Started (the plan's harness and model)
// before the first; mu held.
func (l *claudeLive) publish(ev claudeEvent, at time.Time) {
	plan := l.env.Plan()
	if ev.Type == events.Started {
		if l.started {
			return
		}
		ev.Data = events.StartedData{Harness: plan.Harness, Model: plan.Model}
	}
	if !l.started {
		l.started = true
		if ev.Type != events.Started {
			l.emit(events.Started, events.StartedData{Harness: plan.Harness, Model: plan.Model, Synthesized: true}, at)
		}
	}
	l.emit(ev.Type, ev.Data, at)
}

func (l *claudeLive) emit(t events.Type, data any, at time.Time) {
	if err := l.env.Emit(l.ctx, t, data, at); err != nil && l.publishErr == nil {
		l.publishErr = err
	}
}

func (l *claudeLive) wait() {
	close(l.queue)
	<-l.done
}

// Solve runs the CLI (DESIGN §5.3) as uid 10001 in the working directory:
// the prompt (after the skill notice, for the skill arm) on stdin, the
// provider variables from an env file on the tmpfs HOME that the wrapper
// sources and deletes before the CLI starts (never on argv), stdout
// written to a file in the container and followed live into events. At
// the deadline the CLI gets SIGTERM, then SIGKILL after the grace period;
// ResultGrace after a result event the live reader saw, everything of
// uid 10001 still running is killed (resultGrace); whatever uid 10001
// left is killed, the stream file is read back (the
// authority: lines the live reader missed are published from it) and
// stored redacted as claude.stream.jsonl, and the skill plugin is removed
// before the verifier runs. The Finished and the error are claudeEnding's
// and claudeSolveError's.
func (a claudeArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(claudeState)
	if !ok || st.env == nil {
		return Outcome{}, errors.New("claude arm: Solve without Prepare")
	}
	t, dir, d, workdir, plan := env.Task(), env.Dir(), p.Driver, p.Workdir, env.Plan()
	killer, ok := d.(sandbox.ProcessKiller)
	if !ok {
		return Outcome{}, fmt.Errorf("the sandbox driver %T cannot kill an agent's leftover processes", d)
	}
	reader, ok := d.(sandbox.FileReader)
	if !ok {
		return Outcome{}, fmt.Errorf("the sandbox driver %T cannot read the stream file back", d)
	}
	red := NewRedactor(st.secrets)
	termGrace := sandbox.DefaultGrace
	if sp := env.Spec(); sp.AgentGraceSec > 0 {
		termGrace = seconds(sp.AgentGraceSec)
	}

	// The working directory with its symlinks resolved passes the rule
	// before anything (the provider env above all) is copied in.
	realWorkdir, err := resolveWorkdir(ctx, d, h, workdir)
	if err != nil {
		return Outcome{}, err
	}
	owners, err := snapshotOwners(ctx, d, h, realWorkdir)
	if err != nil {
		return Outcome{}, err
	}
	// Everything the container needs, staged on the host and copied in one
	// go, then put in place by root. The staging directory (the provider
	// env file above all) is removed as soon as it is copied in; one a
	// killed proctor leaves is the run's, and `proctor gc` removes it.
	host, err := StageDir(env.RunID())
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(host)
	prompt, treatment := t.Prompt, ""
	if st.skill != nil {
		treatment = st.skill.Name
		prompt = fmt.Sprintf(SkillNotice, st.skill.Name) + prompt
		skipped, err := st.skill.WritePlugin(filepath.Join(host, "abskill"))
		if err != nil {
			return Outcome{}, fmt.Errorf("write the skill plugin: %w", err)
		}
		for _, s := range skipped {
			dir.Logf("skill plugin: left out %s", s)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "prompt.md"), []byte(prompt), 0o644); err != nil {
		return Outcome{}, err
	}
	if err := os.WriteFile(filepath.Join(host, "provider.env"), envFile(st.env), 0o600); err != nil {
		return Outcome{}, err
	}
	stage := StagePath("in")
	err = d.CopyIn(ctx, h, host, stage)
	_ = os.RemoveAll(host)
	if err != nil {
		return Outcome{}, fmt.Errorf("copy the prompt and provider env in: %w", err)
	}
	envPath := agentHome + "/.provider.env"
	prep := fmt.Sprintf(`set -e
mkdir -p %[1]s %[2]s /logs/agent
chown -R %[4]s %[1]s %[2]s /logs/agent
chown %[4]s %[3]s && chmod 0700 %[3]s
cp %[5]s/provider.env %[6]s && chown %[4]s %[6]s && chmod 0600 %[6]s
cp %[5]s/prompt.md %[2]s/prompt.md && chown %[4]s %[2]s/prompt.md
: > %[7]s && chown %[4]s %[7]s
`, shq(realWorkdir), agentOutput, agentHome, AgentUser, stage, envPath, claudeStreamPath)
	if st.skill != nil {
		prep += fmt.Sprintf("rm -rf %[1]s && cp -R %[2]s/abskill %[1]s && chown -R 0:0 %[1]s && chmod -R a+rX,go-w %[1]s\n", SkillPluginDir, stage)
	}
	prep += "rm -rf " + shq(parentOf(stage)) + "\n"
	var prepOut bytes.Buffer
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", prep}, Stdout: &prepOut, Stderr: &prepOut, Timeout: 5 * time.Minute}); err != nil || res.ExitCode != 0 {
		return Outcome{}, fmt.Errorf("prepare the agent's directories: exit %d: %v: %s", res.ExitCode, err, red.String(prepOut.String()))
	}
	home, err := snapshotHome(ctx, d, h, realWorkdir, t.VerifierEnv["HOME"])
	if err != nil {
		return Outcome{}, err
	}

	var argv []string
	args, resumed := sessionArgs(ClaudeArgs(plan.Model, st.skill), t, st.session)
	for _, a := range args {
		argv = append(argv, shq(a))
	}
	if resumed != "" {
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
`, envPath, strings.Join(argv, " "), agentOutput, claudeStreamPath)

	logs, err := dir.OpenCapture("agent.stderr.log")
	if err != nil {
		return Outcome{}, err
	}
	stderr := red.Writer(logs)
	grace := newResultGrace(ResultGrace, func() {
		if err := killer.KillAll(ctx, h, AgentUser); err != nil {
			dir.Logf("claude: kill the agent's processes %s after the result: %v", ResultGrace, err)
		}
	})
	live := newClaudeLive(ctx, env, treatment, grace.result)
	lines := sandbox.NewLines(live.feed, 0)
	stdout := red.Writer(lines)
	budget := t.AgentTimeoutSec
	// The provider is reached through the sandbox's egress proxy (the
	// only way out of its internal network): its variables, never the
	// host's.
	proxy := sandbox.ProxyEnv(h)
	egress := "none"
	if proxy != nil {
		egress = "proxy"
	}
	ca := sandbox.CAEnv(h)
	proxy = withEnv(proxy, ca)
	dir.Logf("claude: %s as %s in %s (budget %gs, grace %s, egress %s)", plan.Harness, AgentUser, workdir, budget, termGrace, egress)
	start := time.Now()
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", script}, User: AgentUser, Workdir: workdir,
		Env: withEnv(map[string]string{
			"HOME": agentHome, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER": "1", "PROCTOR_TASK": t.Name, "PROCTOR_CELL_ID": env.CellID(),
		}, proxy),
		Timeout: seconds(budget), Grace: termGrace, Stdout: stdout, Stderr: stderr,
	})
	end := time.Now()
	_ = stdout.Close()
	_ = lines.Close()
	live.wait()
	gr := grace.stop(start, end)
	_ = stderr.Close()
	_ = logs.Close(dir, "")
	if err != nil {
		return Outcome{}, fmt.Errorf("run the Claude Code CLI: %w", err)
	}
	if err := killer.KillAll(ctx, h, AgentUser); err != nil {
		return Outcome{}, fmt.Errorf("stop the agent's processes: %w", err)
	}
	links, err := RemoveGraderLinks(ctx, d, h, workdir)
	if err != nil {
		return Outcome{}, err
	}
	reset, err := home.reset(ctx, d, h)
	if err != nil {
		return Outcome{}, err
	}
	restored, err := owners.restore(ctx, d, h)
	if err != nil {
		return Outcome{}, err
	}
	if st.skill != nil {
		if r, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"rm", "-rf", SkillPluginDir}, Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
			return Outcome{}, fmt.Errorf("remove %s before the verifier: exit %d: %v", SkillPluginDir, r.ExitCode, err)
		}
	}

	// The file is the authority: replay it with a fresh state and publish
	// what the live reader did not.
	raw, rerr := reader.ReadFile(ctx, h, claudeStreamPath, maxStreamBytes)
	if rerr != nil {
		dir.Logf("claude: read %s back: %v (the live lines stand)", claudeStreamPath, rerr)
	}
	text := red.String(string(raw))
	if err := os.WriteFile(dir.Path("claude.stream.jsonl"), []byte(text), 0o644); err != nil {
		return Outcome{}, err
	}
	live.mu.Lock()
	defer live.mu.Unlock()
	s := live.s
	truncated := false
	if rerr == nil {
		truncated = text != "" && !strings.HasSuffix(text, "\n")
		all := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		if truncated {
			all = all[:len(all)-1] // an unterminated last line is never read as an event
		}
		if text == "" {
			all = nil
		}
		s = newClaudeStream(treatment)
		now := time.Now()
		for i, l := range all {
			evs := s.line(l)
			if i >= live.emitted {
				for _, ev := range evs {
					live.publish(ev, now)
				}
			}
		}
	}
	if !live.started {
		live.publish(claudeEvent{Type: events.Started}, time.Time{})
	}
	if truncated && s.result != nil {
		truncated = false // the result line ended; only a partial line after it
	}

	fin := events.FinishedData{
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationSec: round3(res.Duration.Seconds()),
		StdoutTail: cellfs.Suffix(text, cellfs.RowTailBytes), Synthesized: true,
		Isolation: map[string]any{"network": sandbox.NetworkInternal, "egress": egress, "user": AgentUser, "workdir": workdir, "home": "tmpfs"},
	}
	if id, _ := s.init["session_id"].(string); id != "" {
		st.session.set(id)
	}
	if resumed != "" {
		fin.Isolation["resumed_session"] = resumed
	}
	if ca != nil {
		fin.Isolation["gateway"] = "intercept" // the credentials stayed in the proxy
	}
	noteGraderLinks(dir, fin.Isolation, links)
	noteHomeReset(dir, fin.Isolation, reset)
	noteOwners(dir, fin.Isolation, owners, restored)
	fin.AgentReported = s.metrics(truncated && s.result == nil)
	claudeEnding(&fin, s, res, gr, truncated)
	if gr.killed {
		dir.Logf("claude: still running %s after its result event: every process of %s killed (the verdict stands)", ResultGrace, AgentUser)
	}
	if u, n := s.unreported(); n > 0 {
		u.Partial = partialReason(s, n, fin.Reason)
		dir.Logf("claude: usage partial: %s", u.Partial)
		live.publish(claudeEvent{events.Usage, u}, time.Time{})
	}
	if live.publishErr != nil {
		return Outcome{Finished: fin}, live.publishErr
	}
	if err := claudeSolveError(s, fin, st.skill); err != nil {
		return Outcome{Finished: fin}, err
	}
	dir.Logf("claude ended: %s after %.3fs (tools %v)", fin.Reason, fin.DurationSec, slices.Sorted(maps.Keys(s.tools)))
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

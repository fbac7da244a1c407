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

	mu         sync.Mutex
	started    bool
	emitted    int  // lines whose events were published live, in order
	stopped    bool // a line was cut (over the line cap): the rest waits for the file
	publishErr error
}

func newClaudeLive(ctx context.Context, env Env, treatment string) *claudeLive {
	l := &claudeLive{ctx: ctx, env: env, s: newClaudeStream(treatment), queue: make(chan rawLine, 4096), done: make(chan struct{})}
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
	for _, ev := range l.s.line(r.text) {
		l.publish(ev, r.at)
	}
	l.emitted++
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
// whatever uid 10001 left is killed, the stream file is read back (the
// authority: lines the live reader missed are published from it) and
// stored redacted as claude.stream.jsonl, and the skill plugin is removed
// before the verifier runs.
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
	creds := map[string]string{}
	for _, k := range ClaudeCredentialEnv {
		if v := st.env[k]; v != "" {
			creds[k] = v
		}
	}
	red := NewRedactor(creds)
	grace := sandbox.DefaultGrace
	if sp := env.Spec(); sp.AgentGraceSec > 0 {
		grace = seconds(sp.AgentGraceSec)
	}

	// The working directory with its symlinks resolved passes the rule
	// before anything (the provider env above all) is copied in.
	realWorkdir, err := resolveWorkdir(ctx, d, h, workdir)
	if err != nil {
		return Outcome{}, err
	}
	// Everything the container needs, staged on the host and copied in one
	// go, then put in place by root.
	host, err := os.MkdirTemp("", "proctor-claude-")
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
	if err := d.CopyIn(ctx, h, host, stage); err != nil {
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
	for _, a := range ClaudeArgs(plan.Model, st.skill) {
		argv = append(argv, shq(a))
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
	live := newClaudeLive(ctx, env, treatment)
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
	dir.Logf("claude: %s as %s in %s (budget %gs, grace %s, egress %s)", plan.Harness, AgentUser, workdir, budget, grace, egress)
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", script}, User: AgentUser, Workdir: workdir,
		Env: withEnv(map[string]string{
			"HOME": agentHome, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER": "1", "PROCTOR_TASK": t.Name, "PROCTOR_CELL_ID": env.CellID(),
		}, proxy),
		Timeout: seconds(budget), Grace: grace, Stdout: stdout, Stderr: stderr,
	})
	_ = stdout.Close()
	_ = lines.Close()
	live.wait()
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
	noteGraderLinks(dir, fin.Isolation, links)
	noteHomeReset(dir, fin.Isolation, reset)
	fin.AgentReported = s.metrics(truncated && s.result == nil)
	switch {
	case res.TimedOut:
		fin.Reason = "timeout"
	case s.result == nil:
		fin.Reason = fmt.Sprintf("exit %d without a result event", res.ExitCode)
		if truncated {
			fin.Reason += " (truncated stream)"
		}
		fin.NoAttempt = !s.attempted()
	case s.failed():
		fin.Reason = fmt.Sprintf("error: %s (terminal_reason %v", sval(s.result["subtype"]), s.result["terminal_reason"])
		if v := s.result["api_error_status"]; v != nil {
			fin.Reason += fmt.Sprintf(", API status %v", v)
		}
		fin.Reason += ")"
		fin.NoAttempt = !s.attempted()
	default:
		fin.Reason = fmt.Sprintf("%s (terminal_reason %v)", sval(s.result["subtype"]), s.result["terminal_reason"])
	}
	if live.publishErr != nil {
		return Outcome{Finished: fin}, live.publishErr
	}
	if st.skill != nil && s.init != nil && !s.pluginOffered() {
		return Outcome{Finished: fin}, events.Classf(events.ClassSolverError,
			"treatment not offered: the CLI's init event lists no %s plugin (plugins: %s; see agent.stderr.log)",
			skillPluginName, strings.Join(s.offered("plugins"), ", "))
	}
	dir.Logf("claude ended: %s after %.3fs (tools %v)", fin.Reason, fin.DurationSec, slices.Sorted(maps.Keys(s.tools)))
	return Outcome{Finished: fin}, nil
}

package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
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

// agentWorkdir is where an in-container agent works: the task's workdir,
// else the image's WORKDIR; it must be /app or inside it.
func agentWorkdir(t *task.Task, img sandbox.ImageInfo) (string, error) {
	dir, from := t.Workdir, "the task's workdir"
	if dir == "" {
		dir, from = img.Workdir, "the image's WORKDIR"
	}
	if dir == "" {
		dir, from = "/", "the image's WORKDIR (unset)"
	}
	if !task.WorkdirAllowedForAgent(dir) {
		return "", fmt.Errorf("in-container agents work in /app (or a directory inside it) as uid 10001, and %s is %s: refused before the agent starts", from, dir)
	}
	return path.Clean(dir), nil
}

// agentImage returns the image an agent arm runs in: the task image with
// the agent's install step applied, cached per (task image id, agent
// files) as a committed image, so install runs once per task image (and
// again on a task image built from other bases or another image map).
func (c *cell) agentImage(ctx context.Context, t *task.Task, img sandbox.ImageInfo, a *harness.AgentSpec) (string, error) {
	if strings.TrimSpace(a.Install) == "" {
		return img.Ref, nil
	}
	ref := AgentImageRef(img.ID, a.Hash)
	_, err := c.s.docker.EnsureDerived(ctx, ref, sandbox.Spec{
		RunID: c.job.RunID, CellID: c.job.CellID, Image: img.Ref, Network: sandbox.NetworkBridge, Lifetime: installTimeout + time.Minute,
	}, func(ctx context.Context, h *sandbox.Handle) error {
		if err := c.s.docker.CopyIn(ctx, h, a.Dir, harness.AgentMount); err != nil {
			return err
		}
		out, err := c.dir.OpenCapture("install.log")
		if err != nil {
			return err
		}
		c.dir.Logf("agent install: %s", a.Install)
		res, err := c.s.docker.Exec(ctx, h, sandbox.ExecSpec{
			Cmd: []string{"bash", "-c", a.Install}, Workdir: harness.AgentMount, Timeout: installTimeout, Stdout: out, Stderr: out,
		})
		_ = out.Close(c.dir, "")
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

// agentRun is the state of one agent solve: what its stdout said so far.
// Lines are handed from the output reader to one worker goroutine that
// parses and publishes them in order, so reading the container's output and
// encoding events overlap.
type agentRun struct {
	c          *cell
	ctx        context.Context
	queue      chan rawLine
	done       chan struct{}
	mu         sync.Mutex
	started    bool
	anything   bool
	usage      bool
	finished   *events.FinishedData
	response   *cellfs.Capture // response.txt: every response-text line
	publishErr error
}

type rawLine struct {
	text string
	at   time.Time
}

// newAgentRun starts the worker; feed lines to it, then call wait.
// response receives the response text (nil: dropped).
func newAgentRun(c *cell, ctx context.Context, response *cellfs.Capture) *agentRun {
	r := &agentRun{c: c, ctx: ctx, queue: make(chan rawLine, 4096), done: make(chan struct{}), response: response}
	go func() {
		defer close(r.done)
		for l := range r.queue {
			r.line(l.text, l.at)
		}
	}()
	return r
}

// feed is the sandbox.Lines callback: it queues one line with the time it
// was read.
func (r *agentRun) feed(text string, _ bool) { r.queue <- rawLine{text, time.Now()} }

// wait stops the worker after the queued lines are handled.
func (r *agentRun) wait() {
	close(r.queue)
	<-r.done
}

// publish records one event of the agent at time at.
func (r *agentRun) publish(t events.Type, data any, at time.Time) {
	e := events.Must(t, r.c.job.RunID, r.c.job.CellID, r.c.attempt, Source, data)
	if !at.IsZero() {
		e.At = at.UTC()
	}
	if err := r.c.s.bus.Publish(r.ctx, e); err != nil && r.publishErr == nil {
		r.publishErr = err
	}
}

func (r *agentRun) ensureStarted(at time.Time) {
	if !r.started {
		r.started = true
		r.publish(events.Started, events.StartedData{Harness: r.c.plan.Harness, Model: r.c.plan.Model, Synthesized: true}, at)
	}
}

// line handles one stdout line under the event-line protocol.
func (r *agentRun) line(text string, readAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := harness.ParseLine(text, readAt)
	r.anything = true
	switch l.Kind {
	case harness.LineText:
		// All of it goes to response.txt (capped like the logs); its tail
		// keeps the end, where an agent's final answer is.
		if r.response != nil {
			_, _ = io.WriteString(r.response, text+"\n")
		}
		return
	case harness.LineEvent:
		switch l.Type {
		case events.Started:
			if r.started {
				return
			}
			r.started = true
			d := l.Data.(*events.StartedData)
			d.Harness, d.Model = r.c.plan.Harness, r.c.plan.Model
			r.publish(events.Started, d, l.At)
			return
		case events.Finished:
			// Folded into the launcher's own Finished, which adds the exit
			// code, timing and output tail.
			r.finished = l.Data.(*events.FinishedData)
			return
		case events.Usage:
			r.usage = true
		}
	}
	r.ensureStarted(l.At)
	r.publish(l.Type, l.Data, l.At)
}

// solveAgent runs an agent:<dir> arm in the task container (DESIGN §5.1):
// the agent directory at /opt/proctor/agent, the agent as uid 10001 in its
// workdir (chowned to it with /agent-output), the Anpord, Archal and
// proctor environment variables, stdin closed, SIGTERM at the deadline and
// SIGKILL after the grace period. Its stdout is parsed line by line into
// events as it runs; metrics.json is read back afterwards.
func (c *cell) solveAgent(ctx context.Context, t *task.Task, h *sandbox.Handle, a *harness.AgentSpec, workdir string) (events.FinishedData, error) {
	budget := a.Budget(t.AgentTimeoutSec)
	grace := sandbox.DefaultGrace
	if c.spec.AgentGraceSec > 0 {
		grace = seconds(c.spec.AgentGraceSec)
	}
	prep := fmt.Sprintf("mkdir -p %[1]s %[2]s %[3]s /logs/agent && chown -R %[4]s %[1]s %[2]s %[3]s /logs/agent", shq(workdir), agentOutput, agentHome, AgentUser)
	if res, err := c.s.docker.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", prep}, Timeout: 5 * time.Minute}); err != nil || res.ExitCode != 0 {
		return events.FinishedData{}, fmt.Errorf("prepare the agent's directories: exit %d: %v", res.ExitCode, err)
	}
	if err := c.s.docker.CopyIn(ctx, h, a.Dir, harness.AgentMount); err != nil {
		return events.FinishedData{}, fmt.Errorf("copy the agent in: %w", err)
	}
	if err := c.copyPrompt(ctx, h, t.Prompt); err != nil {
		return events.FinishedData{}, err
	}
	c.dir.Logf("agent directory, prompt and /agent-output ready")
	deadline := time.Now().Add(seconds(budget))
	env := map[string]string{}
	for k, v := range a.Env {
		env[k] = v
	}
	for k, v := range map[string]string{
		"PROCTOR_PROMPT": t.Prompt, "ANPORD_PROMPT": t.Prompt, "AGENT_TASK": t.Prompt,
		"PROCTOR_PROMPT_FILE": agentOutput + "/prompt.md",
		"PROCTOR_MODEL":       c.plan.Model, "ANPORD_MODEL": c.plan.Model, "AGENT_MODEL": c.plan.Model,
		"PROCTOR_WORKSPACE": workdir, "ANPORD_WORKSPACE": workdir,
		"AGENT_RUN_MODE":     "local",
		"AGENT_METRICS_FILE": agentOutput + "/metrics.json",
		"AGENT_TRACE_FILE":   agentOutput + "/agent-trace.json",
		"PROCTOR_DEADLINE":   strconv.FormatInt(deadline.UnixMilli(), 10),
		"PROCTOR_TASK":       t.Name, "PROCTOR_RUN_ID": c.job.RunID, "PROCTOR_CELL_ID": c.job.CellID,
		"PROCTOR_AGENT_DIR": harness.AgentMount, "HOME": agentHome,
	} {
		env[k] = v
	}
	out, err := c.dir.OpenCapture("solve.log")
	if err != nil {
		return events.FinishedData{}, err
	}
	logs, err := c.dir.OpenCapture("agent.stderr.log")
	if err != nil {
		return events.FinishedData{}, err
	}
	response, err := c.dir.OpenCapture("response.txt")
	if err != nil {
		return events.FinishedData{}, err
	}
	run := newAgentRun(c, ctx, response)
	lines := sandbox.NewLines(run.feed, 0)
	c.dir.Logf("agent: %s as %s in %s (budget %gs, grace %s, network internal)", a.Run, AgentUser, workdir, budget, grace)
	res, err := c.s.docker.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"bash", "-c", a.Run}, User: AgentUser, Workdir: workdir, Env: env,
		Timeout: seconds(budget), Grace: grace, Stdout: io.MultiWriter(out, lines), Stderr: logs,
	})
	_ = lines.Close()
	run.wait()
	_ = out.Close(c.dir, "stdout.tail.txt")
	_ = logs.Close(c.dir, "")
	_ = response.Close(c.dir, "")
	if err != nil {
		return events.FinishedData{}, fmt.Errorf("run the agent: %w", err)
	}
	// Whatever the agent left running goes before the verifier starts: a
	// process of uid 10001 signalling -1 reaches every process of that uid.
	// KillAll also gets through a fork bomb holding the pids limit, and
	// gives the verifier the sandbox's whole pids budget back.
	if err := c.s.docker.KillAll(ctx, h, AgentUser); err != nil {
		return events.FinishedData{}, fmt.Errorf("stop the agent's processes: %w", err)
	}

	run.mu.Lock()
	defer run.mu.Unlock()
	fin := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", res.ExitCode), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationSec: round3(res.Duration.Seconds()), StdoutTail: out.RowTail(), Synthesized: true,
		Isolation: map[string]any{"network": sandbox.NetworkInternal, "egress": "none", "user": AgentUser, "workdir": workdir},
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
	fin.NoAttempt = !res.TimedOut && !run.anything && out.Tail.Total() == 0
	if fin.NoAttempt {
		fin.Reason = fmt.Sprintf("exit %d before any event or output", res.ExitCode)
	}
	run.ensureStarted(time.Time{})
	if resp := responseTail(response.Tail.String()); resp != "" {
		run.publish(events.Message, events.MessageData{Role: "response", Text: resp}, time.Time{})
	}
	if m := c.readMetrics(ctx, h); m != nil {
		fin.AgentReported = m
		if !run.usage {
			if u, ok := usageFromMetrics(m); ok {
				run.publish(events.Usage, u, time.Time{})
			}
		}
	}
	if run.publishErr != nil {
		return fin, run.publishErr
	}
	c.dir.Logf("agent ended: %s after %.3fs", fin.Reason, fin.DurationSec)
	return fin, nil
}

// responseTail is the Message{role: response} text: the last
// cellfs.RowTailBytes (4 KiB) of the response text as valid UTF-8, without
// the blank space around it (DESIGN §9: the end of a response is where an
// agent's final answer is).
func responseTail(text string) string {
	return strings.TrimSpace(cellfs.Suffix(strings.TrimRight(text, " \t\r\n"), cellfs.RowTailBytes))
}

// copyPrompt writes the prompt to /agent-output/prompt.md.
func (c *cell) copyPrompt(ctx context.Context, h *sandbox.Handle, prompt string) error {
	dir, err := os.MkdirTemp("", "proctor-prompt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := dir + "/prompt.md"
	if err := os.WriteFile(p, []byte(prompt), 0o644); err != nil {
		return err
	}
	if err := c.s.docker.CopyIn(ctx, h, p, agentOutput); err != nil {
		return fmt.Errorf("copy the prompt in: %w", err)
	}
	return nil
}

// readMetrics copies /agent-output out (symlinks stored as symlinks,
// never followed) and reads the Archal metrics.json when the agent wrote
// one from the same copy, never through the host: a regular file of at
// most harness.MaxMetricsBytes (sandbox.Docker.CopyOutFiles). The values
// are kept as reported; a metrics.json that is a link, a device, too large
// or not JSON is ignored and the row says why ({"error": reason}).
func (c *cell) readMetrics(ctx context.Context, h *sandbox.Handle) map[string]any {
	const metricsPath = agentOutput + "/metrics.json"
	files, err := c.s.docker.CopyOutFiles(ctx, h, agentOutput, c.dir.Path(), map[string]int64{metricsPath: harness.MaxMetricsBytes})
	if err != nil {
		if !errors.Is(err, sandbox.ErrNotFound) {
			c.dir.Logf("copy %s out: %v", agentOutput, err)
		}
		return nil
	}
	f, ok := files[metricsPath]
	switch {
	case !ok:
		return nil
	case f.Err != nil:
		c.dir.Logf("metrics.json ignored: %v", f.Err)
		return map[string]any{"error": "metrics.json ignored: " + f.Err.Error()}
	}
	m, err := harness.ReadMetrics(f.Data)
	if err != nil {
		c.dir.Logf("%v", err)
		return map[string]any{"error": err.Error()}
	}
	return m
}

// usageFromMetrics fills token counts from metrics.json (Archal shape:
// inputTokens, outputTokens, llmCallCount) when no Usage event carried
// them. A key metrics.json lacks stays nil in the event: unreported, not 0.
func usageFromMetrics(m harness.Metrics) (events.UsageData, bool) {
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

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

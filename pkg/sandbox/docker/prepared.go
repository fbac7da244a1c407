package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// heldScript is the command a prepared exec starts: it waits for one line
// on its stdin (the release) and then becomes the real command ("$@")
// with stdin from /dev/null, as Exec runs it; stdin closed without the
// line (a discard, the connection lost) ends it before the command runs.
const heldScript = `IFS= read -r _ || exit 125; exec "$@" </dev/null`

// PrepareExec implements sandbox.ExecPreparer: the exec is created and
// started with its stdin attached, its command held by `sh -c heldScript`
// (the image needs a `sh`, as Exec's kill does), and PrepareExec returns
// once the engine reports its process running, so the engine's exec
// create and start (a runc exec) happen now; Run writes the release line,
// closes stdin, and follows the exec as Exec does from there, its Timeout
// counted from Run. The held process is one of the container's: a
// Destroy ends it, and so does Discard (stdin closed without the line).
// Nothing else should run in the sandbox between PrepareExec and Run: a
// kill of Exec's (kill -1) would end the held process too.
func (d *Driver) PrepareExec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.PreparedExec, error) {
	cid, err := d.container(h)
	if err != nil {
		return nil, err
	}
	if len(spec.Cmd) == 0 {
		return nil, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	user := spec.User
	if user == "" {
		user = "0"
	}
	created, err := d.cli.ContainerExecCreate(ctx, cid, container.ExecOptions{
		User:         user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Env:          envList(spec.Env),
		WorkingDir:   spec.Workdir,
		Cmd:          append([]string{"sh", "-c", heldScript, "sh"}, spec.Cmd...),
	})
	if err != nil {
		return nil, d.execErr(err)
	}
	resp, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, d.execErr(err)
	}
	if err := d.awaitHeld(ctx, created.ID); err != nil {
		resp.Close()
		return nil, err
	}
	return &preparedExec{d: d, cid: cid, execID: created.ID, resp: resp, spec: spec}, nil
}

// awaitHeld waits until the engine reports the prepared exec's process
// running: the engine answers the start once it has taken the connection
// and makes the process (the runc exec) after, so without this wait the
// release could come before the process exists and pay for it. An exec
// that ended (no `sh`, the pids limit) is an error; one not running
// within the engine's slack is ErrEngineTimeout.
func (d *Driver) awaitHeld(ctx context.Context, execID string) error {
	deadline := time.Now().Add(d.cli.slack)
	interval := 2 * time.Millisecond
	for {
		ins, err := d.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return d.execErr(err)
		}
		switch {
		case ins.Running && ins.Pid > 0:
			return nil
		case !ins.Running && (ins.Pid > 0 || ins.ExitCode != 0):
			return fmt.Errorf("sandbox: docker: the prepared exec %s ended before its release (exit %d)", short(execID), ins.ExitCode)
		case time.Now().After(deadline):
			return &sandbox.EngineTimeoutError{Call: "POST /exec/" + short(execID) + "/start", Bound: d.cli.slack}
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		interval = min(interval*2, 50*time.Millisecond)
	}
}

// preparedExec is a started exec held on its stdin (PrepareExec).
type preparedExec struct {
	d           *Driver
	cid, execID string
	resp        types.HijackedResponse
	spec        sandbox.ExecSpec
	mu          sync.Mutex
	used        bool
}

// take marks the exec used; false when it already was.
func (p *preparedExec) take() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used {
		return false
	}
	p.used = true
	return true
}

// Run releases the held command and follows it as Exec does. A Hold in
// ctx that is frozen delays the release to its thaw; a ctx that ends
// first discards the command (nothing ran: the timeout result, as Exec
// gives for a ctx ended before its start).
func (p *preparedExec) Run(ctx context.Context) (sandbox.ExecResult, error) {
	if !p.take() {
		return sandbox.ExecResult{}, sandbox.ErrPreparedUsed
	}
	hold := sandbox.HoldOf(ctx)
	if hold != nil {
		if err := hold.WaitThawed(ctx); err != nil {
			p.resp.Close()
			return sandbox.ExecResult{TimedOut: true, ExitCode: sandbox.TimeoutExitCode}, nil
		}
	}
	if ctx.Err() != nil {
		p.resp.Close()
		return sandbox.ExecResult{TimedOut: true, ExitCode: sandbox.TimeoutExitCode}, nil
	}
	if _, err := p.resp.Conn.Write([]byte("\n")); err != nil {
		p.resp.Close()
		return sandbox.ExecResult{}, fmt.Errorf("sandbox: docker: release the prepared exec %s: %w", short(p.execID), err)
	}
	if err := p.resp.CloseWrite(); err != nil {
		p.resp.Close()
		return sandbox.ExecResult{}, fmt.Errorf("sandbox: docker: release the prepared exec %s: %w", short(p.execID), err)
	}
	return p.d.follow(ctx, p.cid, p.execID, p.resp, p.spec, hold)
}

// Discard closes the exec's connection: its stdin ends without the
// release line and the held shell exits without running the command.
func (p *preparedExec) Discard() {
	if p.take() {
		p.resp.Close()
	}
}

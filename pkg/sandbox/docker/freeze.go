package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Freeze stops every process in the sandbox's container at once, through
// the engine's pause (the cgroup freezer, as `docker pause`), and returns
// how many processes other than the container's PID 1 (the keep-alive
// sleep) were still alive in it; zombies are not counted (the keep-alive
// sleep does not reap, so killed orphans of earlier phases stay as
// zombies). A frozen process cannot run again: nothing it would still
// write reaches the container's files. After Freeze, CopyOut and ReadFile
// still work, Exec does not, and Destroy removes the container. A
// container that is no longer running has nothing alive (0, nil); one
// already paused is counted as it is; a pause the runtime could not
// complete (a busy cgroup v1 freezer) is asked for again (see pause).
// When the engine runs on this machine the count comes from the
// container's cgroup on the host (its cgroup.procs, each process's state
// from /proc; see hostAlive), else from the engine's top (ps on the
// engine's host, filtered to the container's processes). Both are read
// outside the container, after the pause, so nothing in it can change
// them.
//
// The verifier freezes the container when the test script has ended and
// before it reads the reward, so the reward is what the script left, not
// what a process it started (an agent's code run as root) writes later.
func (d *Driver) Freeze(ctx context.Context, h *sandbox.Handle) (alive int, err error) {
	cid, err := d.container(h)
	if err != nil {
		return 0, err
	}
	ins, err := d.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return 0, d.execErr(err)
	}
	if ins.State == nil || !ins.State.Running {
		return 0, nil
	}
	if !ins.State.Paused {
		if err := d.pause(ctx, cid); err != nil {
			if cerrdefs.IsNotFound(err) {
				return 0, fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
			}
			return 0, fmt.Errorf("sandbox: docker: pause %s: %w", short(cid), err)
		}
	}
	if n, ok := hostAlive(d.cgroupRoot, cid, ins.State.Pid); ok {
		return n, nil
	}
	top, err := d.cli.ContainerTop(ctx, cid, []string{"-o", "pid,stat"})
	if err != nil {
		return 0, fmt.Errorf("sandbox: docker: list the processes of %s: %w", short(cid), err)
	}
	return countAlive(top.Titles, top.Processes, ins.State.Pid)
}

// pauseTries bounds the pauses of one Freeze that the runtime could not
// complete (see pause).
const pauseTries = 8

// pause pauses container cid through the engine, again when the runtime
// failed to freeze it: the cgroup v1 freezer can stay FREEZING while
// processes fork or wait in the kernel, and runc then thaws the cgroup
// and fails with "unable to freeze" (its source calls freezing a busy
// cgroup v1 "a game of chances"; the kernel's older freezer
// documentation told userspace to retry or thaw). The container is left
// running, so the pause can be asked for again. Up to pauseTries pauses,
// 100 ms apart and doubling to 1 s (about 5 s in all); any other error,
// or the last, is returned.
func (d *Driver) pause(ctx context.Context, cid string) error {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		err := d.cli.ContainerPause(ctx, cid)
		if err == nil || try == pauseTries || !strings.Contains(err.Error(), "OCI runtime pause failed") {
			return err
		}
		d.log.Debug("sandbox: the runtime could not freeze the container; pausing again", "container", short(cid), "try", try, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// Thaw undoes Freeze for a multi-step task's next step: it unpauses the
// container (when paused) and sends SIGCONT to every process in it, so the
// processes the verifier's exit hook stopped with SIGSTOP (a server the
// agent started in an earlier step) run again, as they would in Harbor's
// one shared environment (from this machine when it can, see hostSignal;
// else by an exec). When it returns, the engine will not report the
// container paused again (see awaitPauseEvents). A container that is not
// running is an error.
func (d *Driver) Thaw(ctx context.Context, h *sandbox.Handle) error {
	cid, err := d.container(h)
	if err != nil {
		return err
	}
	ins, err := d.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return d.execErr(err)
	}
	if ins.State == nil || !ins.State.Running {
		return fmt.Errorf("%w: container %s is not running", sandbox.ErrDestroyed, short(cid))
	}
	if ins.State.Paused {
		if err := d.cli.ContainerUnpause(ctx, cid); err != nil {
			return fmt.Errorf("sandbox: docker: unpause %s: %w", short(cid), err)
		}
	}
	script := "exit 0"
	if ok, err := d.hostSignal(ctx, cid, "0", unix.SIGCONT); ok {
		if err != nil {
			return fmt.Errorf("sandbox: docker: resume the processes of %s: %w", short(cid), err)
		}
	} else {
		// No way from this machine: the exec that awaits the engine
		// sends the SIGCONT.
		script = "kill -CONT -1 2>/dev/null; exit 0"
	}
	if err := d.awaitPauseEvents(ctx, cid, script); err != nil {
		return fmt.Errorf("sandbox: docker: resume %s: %w", short(cid), err)
	}
	return nil
}

// paused reports whether the engine says container cid is paused (false
// when it cannot tell).
func (d *Driver) paused(ctx context.Context, cid string) bool {
	ins, err := d.cli.ContainerInspect(ctx, cid)
	return err == nil && ins.State != nil && ins.State.Paused
}

// unpause unpauses container cid when the engine says it is paused, so a
// stopped Exec can signal its processes; failures are logged (the
// caller's Destroy removes a paused container all the same).
func (d *Driver) unpause(ctx context.Context, cid string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
	defer cancel()
	if !d.paused(cctx, cid) {
		return
	}
	if err := d.cli.ContainerUnpause(cctx, cid); err != nil {
		d.log.Warn("sandbox: unpause a frozen sandbox to stop its exec", "container", short(cid), "err", err)
	}
}

// pauseEventsWait bounds awaitPauseEvents: the engine's queue of a
// container's events can stand still for 2 s per exec whose output a
// stopped process holds (see awaitPauseEvents), and longer on a loaded
// machine.
const pauseEventsWait = time.Minute

// awaitPauseEvents runs script as root in container cid and returns once
// the engine has handled its exit, and with it every event of the
// container it had queued before: after an unpause, the engine no longer
// reports the container paused. An exec refused as paused meanwhile is
// asked for again. The error is the engine's, the bound's
// (pauseEventsWait) or the script's exit code.
//
// The engine (20.10, as today's) applies a container's runtime events in
// order, one at a time, on its own time: a "paused" event it handles
// after the unpause marks the running container paused again until the
// "resumed" event behind it, and refuses an exec meanwhile ("container
// ... is paused"). The queue stands still while the engine waits (2 s
// each) for the output of an exec that a stopped process still holds —
// what a verifier's exit hook leaves — so a step's "paused" event could
// be handled seconds after Thaw, in the middle of the next step. An
// exec's exit queues behind both events.
func (d *Driver) awaitPauseEvents(ctx context.Context, cid, script string) error {
	end := time.Now().Add(pauseEventsWait)
	var last error
	for {
		code, started, err := d.runStarted(ctx, cid, "0", script, time.Until(end))
		switch {
		case err == nil && started && code != 0:
			return fmt.Errorf("exit %d", code)
		case err == nil && started:
			return nil
		case err == nil && code == -1:
			return fmt.Errorf("the engine did not report the exec's end within %s", pauseEventsWait)
		case err != nil && !isPausedRefusal(err):
			return err
		case err != nil:
			last = err
		default:
			last = errors.New("the engine did not start the exec")
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("the engine still refuses execs after %s: %w", pauseEventsWait, last)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// isPausedRefusal reports whether err is the engine refusing an exec
// because it holds the container paused.
func isPausedRefusal(err error) bool {
	return cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "is paused")
}

// countAlive counts the rows of a `ps -o pid,stat` listing that are not
// pid1 and not zombies (STAT starting with Z).
func countAlive(titles []string, rows [][]string, pid1 int) (int, error) {
	pidCol, statCol := -1, -1
	for i, t := range titles {
		switch t {
		case "PID":
			pidCol = i
		case "STAT", "S":
			statCol = i
		}
	}
	if pidCol < 0 || statCol < 0 {
		return 0, fmt.Errorf("sandbox: docker: top has no PID or STAT column: %v", titles)
	}
	n := 0
	for _, r := range rows {
		if len(r) <= max(pidCol, statCol) {
			continue
		}
		if pid, err := strconv.Atoi(r[pidCol]); err == nil && pid == pid1 {
			continue
		}
		if strings.HasPrefix(r[statCol], "Z") {
			continue
		}
		n++
	}
	return n, nil
}

// hostAlive counts the processes of container cid, other than pid1 (the
// host pid of its PID 1) and zombies, from the cgroup.procs of its cgroup
// under root (see hostCgroupDirs) and /proc/<pid>/stat. ok is false, and
// the caller asks the engine instead, when there is no such cgroup here
// (the engine runs elsewhere) or pid1 is not among the listed processes
// (this process sees another pid namespace than the engine's), or the
// cgroup has child cgroups (whose processes it does not list). A process
// whose /proc entry is gone has exited and is not counted.
func hostAlive(root, cid string, pid1 int) (n int, ok bool) {
	pids, ok := hostProcs(root, cid, pid1)
	if !ok {
		return 0, false
	}
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // exited since the listing
		}
		// The state is the field after the command, which is in
		// parentheses and may itself hold spaces or parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) {
			return 0, false
		}
		if stat[i+2] == 'Z' {
			continue
		}
		n++
	}
	return n, true
}

package docker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Signals to a container's processes, sent from this machine.
//
// `kill -SIG -1` run in an exec is how a signal reaches every process of a
// container from the engine's API, but the exec has to start first: its
// `runc init` joins the container's pid namespace before it runs the
// command, and a process there that stops every process it may signal
// (the verifier's exit hook, `kill -STOP -1`, when the test script ends
// while the exec starts) stops that runc init too. The engine then waits
// on it for good, and every later call for the container (the SIGKILL's
// exec, inspect, remove) waits behind it: an interrupted run hung with its
// containers left running. When the engine runs on this machine and this
// process may signal its containers' processes (root, the engine's pid
// namespace), hostSignal sends the signal itself to the processes listed
// in the container's cgroup, so no process of the container can hold it.

// killPasses bounds how often hostSignal lists the container's processes
// again after a SIGKILL, for the children forked while it signalled
// (`kill -KILL -1` in the kernel reaches them all at once; one pass over a
// listing does not).
const killPasses = 50

// hostSignal sends sig to every process of container cid that user (a
// numeric uid; "0" is root: every process) may signal, except its PID 1,
// as `kill -SIG -1` run as user in the container does. ok is false, and
// nothing was sent, when it cannot be done from here: the engine runs
// elsewhere, this process is not root or sees another pid namespace, the
// container's cgroup has child cgroups, user is a name, the container maps
// uids and user is not root, or pidfds are not supported. Each process is
// signalled through a pidfd opened before its cgroup and uids are checked,
// so a pid reused by a process outside the container is never signalled.
// After SIGKILL the processes are listed again, up to killPasses times,
// until none of them is left alive.
func (d *Driver) hostSignal(ctx context.Context, cid, user string, sig unix.Signal) (ok bool, err error) {
	if os.Geteuid() != 0 || sig == 0 {
		return false, nil
	}
	uid, err := strconv.Atoi(user)
	if err != nil || uid < 0 {
		return false, nil
	}
	hc, err := d.hostContainerOf(ctx, cid)
	if err != nil || (uid != 0 && !hc.identity) {
		return false, nil
	}
	pids, ok := hostProcs(d.cgroupRoot, cid, hc.pid)
	if !ok {
		return false, nil
	}
	for pass := 0; ; pass++ {
		live := 0
		for _, pid := range pids {
			signalled, err := signalIn(pid, cid, uid, sig)
			if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
				if pass == 0 && live == 0 {
					return false, nil // no pidfds here: the exec does it
				}
				return true, err
			}
			if signalled {
				live++
			}
		}
		if sig != unix.SIGKILL || live == 0 || pass+1 >= killPasses {
			return true, nil
		}
		if pass > 0 {
			// What is left was signalled already: give the kernel a
			// moment to end it before listing again.
			time.Sleep(time.Millisecond)
		}
		if pids, ok = hostProcs(d.cgroupRoot, cid, hc.pid); !ok {
			return true, nil
		}
	}
}

// signalIn sends sig to pid when it is a live (not zombie) process of
// container cid that uid may signal (uid 0: any), and reports whether it
// did. The pidfd is opened first, so the checks and the signal are about
// one process: a pid reused after the listing is checked as the new
// process, and a process that exits after the checks is not replaced by
// another under the pidfd.
func signalIn(pid int, cid string, uid int, sig unix.Signal) (bool, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, err
	}
	defer unix.Close(fd)
	proc := "/proc/" + strconv.Itoa(pid)
	cg, err := os.ReadFile(proc + "/cgroup")
	if err != nil || !strings.Contains(string(cg), cid) {
		return false, nil // exited, or the pid is another process's now
	}
	status, err := os.ReadFile(proc + "/status")
	if err != nil {
		return false, nil
	}
	state, real, saved := procStatus(string(status))
	if state == 'Z' || state == 'X' {
		return false, nil
	}
	// kill(2): an unprivileged sender may signal a process whose real or
	// saved set-user-ID is the sender's real or effective uid.
	if uid != 0 && real != uid && saved != uid {
		return false, nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// procStatus returns the state letter and the real and saved uids of a
// /proc/<pid>/status text (-1 for a uid it does not carry).
func procStatus(text string) (state byte, real, saved int) {
	real, saved = -1, -1
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			if v = strings.TrimSpace(v); v != "" {
				state = v[0]
			}
		} else if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(v)
			if len(f) >= 3 {
				real, _ = strconv.Atoi(f[0])
				saved, _ = strconv.Atoi(f[2])
			}
		}
	}
	return state, real, saved
}

// hostProcs lists the processes of container cid other than pid1 (the
// host pid of its PID 1) from the cgroup.procs of its cgroup under root
// (see hostCgroupDirs). ok is false when there is no such cgroup here (the
// engine runs elsewhere), pid1 is not among the listed processes (this
// process sees another pid namespace than the engine's) or the cgroup has
// child cgroups (whose processes cgroup.procs does not list).
func hostProcs(root, cid string, pid1 int) (pids []int, ok bool) {
	var procs []byte
	for _, dir := range hostCgroupDirs(root, cid) {
		if b, err := os.ReadFile(filepath.Join(dir.path, "cgroup.procs")); err == nil {
			ents, err := os.ReadDir(dir.path)
			if err != nil || slices.ContainsFunc(ents, fs.DirEntry.IsDir) {
				return nil, false
			}
			procs = b
			break
		}
	}
	if procs == nil || pid1 <= 0 {
		return nil, false
	}
	for f := range strings.FieldsSeq(string(procs)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, false
		}
		if pid == pid1 {
			ok = true
			continue
		}
		pids = append(pids, pid)
	}
	return pids, ok
}

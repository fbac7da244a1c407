package process

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// killWait bounds how long KillAll waits for the killed processes to be
// gone.
const killWait = 10 * time.Second

// credential parses ExecSpec.User for the host: "" is proctor's own user
// (nil), else a numeric "uid" or "uid:gid" (gid defaults to uid), which
// needs proctor to run as root unless it is proctor's own uid. A name is
// refused: the host's user database is not the sandbox's to read.
func credential(user string) (*syscall.Credential, error) {
	if user == "" {
		return nil, nil
	}
	us, gs, hasGID := strings.Cut(user, ":")
	uid, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%w: the process driver runs as a numeric uid[:gid], not %q", sandbox.ErrInvalidSpec, user)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return nil, fmt.Errorf("%w: the process driver runs as a numeric uid[:gid], not %q", sandbox.ErrInvalidSpec, user)
		}
	}
	if os.Geteuid() != 0 && int(uid) != os.Geteuid() {
		return nil, fmt.Errorf("%w: running as uid %d needs root (proctor runs as uid %d)", sandbox.ErrInvalidSpec, uid, os.Geteuid())
	}
	if int(uid) == os.Geteuid() && int(gid) == os.Getegid() {
		return nil, nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// cgroupRoot returns the directory of proctor's own cgroup in the cgroup
// v2 (unified) hierarchy: its mount point (/proc/self/mountinfo) joined
// with the path of /proc/self/cgroup's "0::" line.
func cgroupRoot() (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	mount := ""
	sc := bufio.NewScanner(bytes.NewReader(mi))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup2" && f[3] == "/" {
			mount = f[4]
			break
		}
	}
	if mount == "" {
		return "", errors.New("no cgroup v2 hierarchy mounted")
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(cg), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(mount, filepath.Clean("/"+p)), nil
		}
	}
	return "", errors.New("proctor is in no cgroup v2")
}

// makeCgroup makes the cgroup name under proctor's own and returns its
// path; an error means the host gives proctor none (no unified
// hierarchy, or not writable).
func makeCgroup(name string) (string, error) {
	root, err := cgroupRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err != nil {
		_ = os.Remove(p)
		return "", err
	}
	return p, nil
}

// cgroupProcs lists the pids in the cgroup at cg.
func cgroupProcs(cg string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// killCgroup kills every process of the cgroup at cg (cgroup.kill, or
// on a kernel without it the cgroup frozen and each of its processes
// sent SIGKILL) and waits, up to killWait, until none is left.
func killCgroup(ctx context.Context, cg string) error {
	if err := os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(cg); serr != nil {
				return serr
			}
		}
		// Before Linux 5.14: freeze so nothing forks, kill each, thaw.
		_ = os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("1"), 0)
		pids, err := cgroupProcs(cg)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("0"), 0)
	}
	return waitGone(ctx, func() (int, error) {
		pids, err := cgroupProcs(cg)
		return len(pids), err
	})
}

// waitGone polls left until it reports no process, ctx ends or killWait
// passed (an error naming how many are left).
func waitGone(ctx context.Context, left func() (int, error)) error {
	deadline := time.Now().Add(killWait)
	wait := time.Millisecond
	for {
		n, err := left()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d process(es) left after SIGKILL", n)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(wait*2, 50*time.Millisecond)
	}
}

// uidProcs lists the pids of /proc whose real uid is uid.
func uidProcs(uid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[0] == strconv.Itoa(uid) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// KillSandbox kills every process the sandbox's
// commands started is killed, and KillAll returns once none is left (or
// with an error after 10 s). With a cgroup (Driver.Cgroup, when the host
// gave one) that is the cgroup's every process, whatever its user or
// process group. Without one it is every process of user, which must
// then be a numeric uid other than root and proctor's own (a user
// dedicated to the sandbox; "" and those are refused, as they would
// reach processes that are not the sandbox's); a process of another
// user that left its process group is not reached.
//
// It is not sandbox.ProcessKiller: it gives no pids limit and no
// container's closed world, so the in-container arms never count on it.
func (p *Driver) KillSandbox(ctx context.Context, h *sandbox.Handle, user string) error {
	if _, err := p.root(h); err != nil {
		return err
	}
	if cg := state(h, "cgroup"); cg != "" {
		return killCgroup(ctx, cg)
	}
	us, _, _ := strings.Cut(user, ":")
	uid, err := strconv.Atoi(us)
	if err != nil || uid == 0 || uid == os.Geteuid() {
		return fmt.Errorf("%w: without a cgroup the process driver kills only a dedicated user's processes, not %q", sandbox.ErrInvalidSpec, user)
	}
	// The uid's every process, as a process of that user signalling -1
	// would reach them; repeated until none is left (one may fork
	// between the read and the kill).
	return waitGone(ctx, func() (int, error) {
		pids := uidProcs(uid)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids), nil
	})
}

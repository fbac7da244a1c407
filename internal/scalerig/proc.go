package scalerig

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times (100 on every Linux architecture Go runs on).
const clockTick = 10 * time.Millisecond

// proc is one process of the rig: a NATS server, a service, a worker
// node or a run's driver.
type proc struct {
	role, name string
	argv, env  []string
	log        string
	cmd        *exec.Cmd
	done       chan struct{} // closed when the process was waited for
	err        error
	started    time.Time
}

// procs tracks every process the rig started and the CPU time of those
// that ended, by role.
type procs struct {
	mu      sync.Mutex
	all     []*proc
	deadCPU map[string]time.Duration
}

// start runs argv (its output appended to logPath) as role/name, in the
// working directory dir ("": the rig's).
func (ps *procs) start(role, name string, argv, env []string, dir, logPath string) (*proc, error) {
	return ps.startIn(role, name, argv, env, dir, logPath, false)
}

// startIn is start, the process in a mount namespace of its own when
// ownNS (ownMountNamespace; needs CAP_SYS_ADMIN).
func (ps *procs) startIn(role, name string, argv, env []string, dir, logPath string, ownNS bool) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if ownNS {
		ownMountNamespace(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("scalerig: start %s %s: %w", role, name, err)
	}
	p := &proc{role: role, name: name, argv: argv, env: env, log: logPath, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		err := cmd.Wait()
		f.Close()
		// The CPU of the whole process (every thread) from its rusage,
		// counted as the process is marked gone, under ps.mu.
		var c time.Duration
		if st := cmd.ProcessState; st != nil {
			c = st.UserTime() + st.SystemTime()
		}
		ps.mu.Lock()
		p.err = err
		if ps.deadCPU == nil {
			ps.deadCPU = map[string]time.Duration{}
		}
		ps.deadCPU[role] += c
		close(p.done)
		ps.mu.Unlock()
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

// alive reports whether p has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// cpu is p's user + system CPU time so far from /proc/<pid>/stat; 0 once
// it is gone.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	return statCPU(b)
}

// statCPU reads utime + stime (fields 14 and 15) of a /proc/<pid>/stat
// line; the command name (field 2) may hold spaces and parentheses, so
// the fields are counted after its last ')'.
func statCPU(b []byte) time.Duration {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * clockTick
}

// kill9 sends SIGKILL to p's process group and waits for it.
func (ps *procs) kill9(p *proc) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM, then SIGKILL after grace, and waits.
func (ps *procs) stop(p *proc, grace time.Duration) {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// roleCPU returns the CPU time of every process of each role so far: the
// live ones' from /proc/<pid>/stat, the ended ones' from their rusage.
func (ps *procs) roleCPU() map[string]time.Duration {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := map[string]time.Duration{}
	for r, c := range ps.deadCPU {
		out[r] = c
	}
	for _, p := range ps.all {
		if p.alive() {
			out[p.role] += p.cpu()
		}
	}
	return out
}

// machineCPU returns the machine's busy and total CPU time from
// /proc/stat (all CPUs; idle and iowait are not busy).
func machineCPU() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	var sum, idle int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i >= 7 { // guest time is already in user
			break
		}
		sum += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return time.Duration(sum-idle) * clockTick, time.Duration(sum) * clockTick
}

// freePort returns a loopback TCP port no one listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// withDefaults fills the zero fields of l from sandbox.DefaultLimits; a
// negative field means "no limit" and becomes 0.
func withDefaults(l sandbox.Limits) sandbox.Limits {
	pick := func(v, def int64) int64 {
		switch {
		case v < 0:
			return 0
		case v == 0:
			return def
		}
		return v
	}
	l.MemoryMB = pick(l.MemoryMB, sandbox.DefaultLimits.MemoryMB)
	l.PidsLimit = pick(l.PidsLimit, sandbox.DefaultLimits.PidsLimit)
	if l.CPUs < 0 {
		l.CPUs = 0
	}
	return l
}

// Limits returns the limits a sandbox started from spec gets: the spec's
// CPUs and MemoryMB when set (the task's declaration), else the driver's
// defaults; the driver's pids limit; no-new-privileges.
func (d *Driver) Limits(spec sandbox.Spec) sandbox.Limits {
	l := sandbox.Limits{PidsLimit: d.defaults.PidsLimit, NoNewPrivileges: true}
	l.MemoryMB, l.MemorySource = d.defaults.MemoryMB, "default"
	if spec.MemoryMB > 0 {
		l.MemoryMB, l.MemorySource = spec.MemoryMB, "task"
	}
	if l.MemoryMB == 0 {
		l.MemorySource = ""
	}
	l.CPUs, l.CPUsSource = d.defaults.CPUs, "default"
	if spec.CPUs > 0 {
		l.CPUs, l.CPUsSource = spec.CPUs, "task"
	}
	if l.CPUs == 0 {
		l.CPUsSource = ""
	}
	return l
}

// ipv6Off are the sysctls that disable IPv6 in a sandbox's network
// namespace when it is created: on every interface it has then
// (all) and on every one it gets later (default). proctor does not rely
// on the engine's defaults: an engine with `ipv6: true` (or a network
// with IPv6 enabled) would otherwise give an agent an IPv6 address, a way
// past the internal network's IPv4 rules and the host firewall (even a
// link-local one reaches the host's side of the bridge). On an
// IPv4-only network this is what the engine does anyway (loopback
// included). A network joined after the start (ConnectBridge, for a
// public verifier once the agent is gone) is configured by the engine
// and may have IPv6.
var ipv6Off = map[string]string{
	"net.ipv6.conf.all.disable_ipv6":     "1",
	"net.ipv6.conf.default.disable_ipv6": "1",
}

// kernelIPv6 reports whether this machine's kernel has IPv6, without
// which the sysctls do not exist (and the engine would refuse them): the
// engine's kernel, when it runs here.
var kernelIPv6 = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/sys/net/ipv6/conf/default/disable_ipv6")
	return err == nil
})

// hostConfig is the HostConfig of every sandbox container: its network,
// its resource limits (see Limits), its security options and IPv6
// disabled (ipv6Off). Every sandbox and compose service container
// proctor creates is made through it.
func hostConfig(netMode string, l sandbox.Limits) *container.HostConfig {
	r := container.Resources{NanoCPUs: int64(l.CPUs * 1e9)}
	if l.MemoryMB > 0 {
		r.Memory = l.MemoryMB << 20
		r.MemorySwap = r.Memory // no swap beyond the limit
	}
	if l.PidsLimit > 0 {
		pids := l.PidsLimit
		r.PidsLimit = &pids
	}
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(netMode),
		Resources:   r,
		// No setuid/setcap binary can raise a process's privileges: an
		// agent running as uid 10001 stays uid 10001.
		SecurityOpt: []string{"no-new-privileges"},
	}
	if netMode != "host" && kernelIPv6() {
		hc.Sysctls = maps.Clone(ipv6Off)
	}
	return hc
}

// OOMKills returns how many processes of the sandbox's container the
// kernel's OOM killer has killed at its memory limit since the container
// started: the oom_kill counter of the container's memory cgroup
// (memory.events under cgroup v2, memory.oom_control under v1). When the
// engine runs on this machine the counter is read from the host's cgroup
// filesystem (see hostOOMFile: no exec, and it works on a paused
// container); otherwise by a root exec in the container (which a paused
// container refuses). The container cannot write either file (cgroup
// files are the kernel's; the container's /sys/fs/cgroup is read-only).
// The engine's own State.OOMKilled is not used: Docker 20.10 sets it only
// when PID 1 is killed, never for a process of an exec. Callers compare
// the count before and after a phase. It returns an error when the
// counter cannot be read (no cgroup mount, the exec cannot start).
func (d *Driver) OOMKills(ctx context.Context, h *sandbox.Handle) (int64, error) {
	cid, err := d.container(h)
	if err != nil {
		return 0, err
	}
	if f := hostOOMFile(d.cgroupRoot, cid); f != "" {
		if b, err := os.ReadFile(f); err == nil {
			return parseOOMKill(string(b))
		}
	}
	var out limitedBuffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd:    []string{"sh", "-c", "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"},
		Stdout: &out, Timeout: time.Minute,
	})
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("sandbox: docker: read the OOM kill counter: exit %d", res.ExitCode)
	}
	return parseOOMKill(out.String())
}

// parseOOMKill returns the value of the "oom_kill N" line of a
// memory.events or memory.oom_control file.
func parseOOMKill(text string) (int64, error) {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("sandbox: docker: no oom_kill counter in the memory cgroup")
}

// hostOOMFile returns the path of the OOM counter file of container cid
// on the cgroup filesystem under root (see hostCgroupDirs), or "" when
// there is none.
func hostOOMFile(root, cid string) string {
	for _, dir := range hostCgroupDirs(root, cid) {
		f := filepath.Join(dir.path, dir.oomFile)
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			return f
		}
	}
	return ""
}

// cgroupDir is a candidate cgroup directory of a container and the name
// of its memory OOM counter file.
type cgroupDir struct{ path, oomFile string }

// hostCgroupDirs returns where the engine puts the cgroup of container
// cid under the cgroup filesystem mounted at root: under cgroup v2,
// system.slice/docker-<id>.scope (systemd driver) or docker/<id>
// (cgroupfs driver); under v1, the same two below memory/. None exists
// when the engine runs elsewhere (a remote DOCKER_HOST, a VM) or proctor
// runs in a container with its own cgroup namespace. It returns nothing
// when root is "" or cid is not a full 64-hex container id (so no id read
// from the event log can name another path).
func hostCgroupDirs(root, cid string) []cgroupDir {
	if root == "" || len(cid) != 64 || strings.Trim(cid, "0123456789abcdef") != "" {
		return nil
	}
	return []cgroupDir{
		{filepath.Join(root, "system.slice", "docker-"+cid+".scope"), "memory.events"},
		{filepath.Join(root, "docker", cid), "memory.events"},
		{filepath.Join(root, "memory", "system.slice", "docker-"+cid+".scope"), "memory.oom_control"},
		{filepath.Join(root, "memory", "docker", cid), "memory.oom_control"},
	}
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// labelPidsLimit records a container's own pids limit, so that a limit
// raised to stop a fork bomb can be given back (see KillAll) by any
// process holding the container id.
const labelPidsLimit = "proctor.pids_limit"

// limitLabels returns lbl plus the pids limit label.
func limitLabels(lbl map[string]string, l sandbox.Limits) map[string]string {
	out := maps.Clone(lbl)
	out[labelPidsLimit] = strconv.FormatInt(l.PidsLimit, 10)
	return out
}

// pidsHeadroom is how many processes above its current count a container
// at its pids limit is allowed while proctor signals it.
const pidsHeadroom = 8

// KillAll sends SIGKILL to every process user may signal in the sandbox
// (user "" is root: every process but PID 1; "10001": the agent's) and
// waits for the signal's exec to end.
//
// A container at its pids limit (a fork bomb) cannot start the exec that
// sends the signal: then the limit is raised to the current count plus
// pidsHeadroom for that exec. After the kill the limit is set to the
// processes still counted (killed orphans stay as zombies, which the pids
// cgroup counts, because PID 1 does not reap) plus the container's own
// limit, so the next phase (the verifier) gets its whole budget. It
// returns an error when the engine fails or the exec still cannot start.
func (d *Driver) KillAll(ctx context.Context, h *sandbox.Handle, user string) error {
	cid, err := d.container(h)
	if err != nil {
		return err
	}
	if user == "" {
		user = "0"
	}
	return d.signalAs(ctx, cid, user, "KILL")
}

// signalAs sends SIGsig as user to every process it may signal but PID 1
// (kill -1): from this machine when it can (see hostSignal), else from a
// new exec, lifting a reached pids limit as KillAll says. It waits for
// that exec up to killWait for SIGKILL, and up to termWait for any other
// signal: a process that answers SIGTERM by stopping every process (the
// verifier's exit hook does) may stop the signal's exec too, and the
// SIGKILL that follows ends it with the rest.
func (d *Driver) signalAs(ctx context.Context, cid, user, sig string) error {
	if ok, err := d.hostSignal(ctx, cid, user, unix.SignalNum("SIG"+sig)); ok {
		if err != nil {
			return fmt.Errorf("sandbox: docker: SIG%s to the processes of %s: %w", sig, short(cid), err)
		}
		if sig != "KILL" {
			return nil
		}
		return d.restorePids(ctx, cid)
	}
	script := "kill -" + sig + " -1 2>/dev/null; true"
	bound := killWait
	if sig != "KILL" {
		bound = termWait
	}
	code, err := d.runQuiet(ctx, cid, user, script, bound)
	if err != nil {
		return err
	}
	if code == 126 {
		if err := d.setPids(ctx, cid, pidsHeadroom); err != nil {
			return err
		}
		if code, err = d.runQuiet(ctx, cid, user, script, bound); err != nil {
			return err
		}
		if code == 126 {
			return fmt.Errorf("sandbox: docker: %s: cannot start a process to send SIG%s", short(cid), sig)
		}
	}
	if sig != "KILL" {
		return nil
	}
	return d.restorePids(ctx, cid)
}

// restorePids sets the pids limit of cid, after a SIGKILL to its
// processes, to the processes still counted (zombies: PID 1 does not reap)
// plus the container's own limit, when it is not that already.
func (d *Driver) restorePids(ctx context.Context, cid string) error {
	ins, err := d.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return d.execErr(err)
	}
	own, _ := strconv.ParseInt(ins.Config.Labels[labelPidsLimit], 10, 64)
	if own <= 0 || ins.HostConfig == nil || ins.HostConfig.PidsLimit == nil {
		return nil
	}
	cur, err := d.pidsCurrent(ctx, cid)
	if err != nil {
		return err
	}
	if cur <= 1 && *ins.HostConfig.PidsLimit == own {
		return nil // only PID 1: the limit is the container's own
	}
	return d.setPids(ctx, cid, own)
}

// setPids sets the container's pids limit to its current count plus extra.
func (d *Driver) setPids(ctx context.Context, cid string, extra int64) error {
	cur, err := d.pidsCurrent(ctx, cid)
	if err != nil {
		return err
	}
	n := cur + extra
	_, err = d.cli.ContainerUpdate(ctx, cid, container.UpdateConfig{Resources: container.Resources{PidsLimit: &n}})
	if err != nil {
		return fmt.Errorf("sandbox: docker: set the pids limit of %s: %w", short(cid), err)
	}
	d.log.Debug("pids limit set", "container", short(cid), "limit", n)
	return nil
}

// pidsCurrent returns the number of processes and threads the container's
// pids cgroup counts (zombies included), from a one-shot stats read.
func (d *Driver) pidsCurrent(ctx context.Context, cid string) (int64, error) {
	resp, err := d.cli.ContainerStatsOneShot(ctx, cid)
	if err != nil {
		return 0, fmt.Errorf("sandbox: docker: stats of %s: %w", short(cid), err)
	}
	defer resp.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("sandbox: docker: stats of %s: %w", short(cid), err)
	}
	return int64(st.PidsStats.Current), nil
}

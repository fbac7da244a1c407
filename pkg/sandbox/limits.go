package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
)

// Default limits of a Docker sandbox, applied when the task declares none
// (DockerOptions.Defaults changes them). They are sized for a 2-core,
// 24 GiB machine running 2 × CPUs = 4 cells at once: 4 × 4 GiB leaves
// 8 GiB to the host, and 4 × 1024 processes stay far below the kernel's
// default pid_max of 32,768 that every container shares.
const (
	// DefaultMemoryMB is the memory limit in MiB of a sandbox whose task
	// declares no memory (4 GiB).
	DefaultMemoryMB = 4096
	// DefaultPidsLimit is the number of processes (threads included, as
	// the pids cgroup counts them) a sandbox may hold at once.
	DefaultPidsLimit = 1024
)

// Limits are the resource limits of one sandbox, as applied to its
// container. A zero or negative field means no limit.
type Limits struct {
	// CPUs is the number of CPUs (fractions allowed, CFS quota).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB is the memory limit in MiB; swap is limited to the same
	// amount (no swap beyond it), so a sandbox that exceeds it is
	// OOM-killed instead of swapping.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// PidsLimit is the most processes and threads at once.
	PidsLimit int64 `json:"pids_limit,omitempty"`
	// NoNewPrivileges is always true for a Docker sandbox: no process can
	// gain privileges through a setuid or setcap binary (SecurityOpt
	// no-new-privileges).
	NoNewPrivileges bool `json:"no_new_privileges"`
	// MemorySource says where MemoryMB came from: "task" (the task's
	// memory_mb / memory) or "default".
	MemorySource string `json:"memory_source,omitempty"`
	// CPUsSource is "task", "default", or "" when CPUs is unlimited.
	CPUsSource string `json:"cpus_source,omitempty"`
}

// DefaultLimits are the defaults of a Docker driver whose options leave
// them unset: no CPU limit, DefaultMemoryMB, DefaultPidsLimit.
var DefaultLimits = Limits{MemoryMB: DefaultMemoryMB, PidsLimit: DefaultPidsLimit}

// withDefaults fills the zero fields of l from DefaultLimits; a negative
// field means "no limit" and becomes 0.
func (l Limits) withDefaults() Limits {
	pick := func(v, def int64) int64 {
		switch {
		case v < 0:
			return 0
		case v == 0:
			return def
		}
		return v
	}
	l.MemoryMB = pick(l.MemoryMB, DefaultLimits.MemoryMB)
	l.PidsLimit = pick(l.PidsLimit, DefaultLimits.PidsLimit)
	if l.CPUs < 0 {
		l.CPUs = 0
	}
	return l
}

// Limits returns the limits a sandbox started from spec gets: the spec's
// CPUs and MemoryMB when set (the task's declaration), else the driver's
// defaults; the driver's pids limit; no-new-privileges.
func (d *Docker) Limits(spec Spec) Limits {
	l := Limits{PidsLimit: d.defaults.PidsLimit, NoNewPrivileges: true}
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

// hostConfig is the HostConfig of every sandbox container: its network,
// its resource limits (see Limits) and its security options. Every
// container proctor creates is made through it.
func hostConfig(netMode string, l Limits) *container.HostConfig {
	r := container.Resources{NanoCPUs: int64(l.CPUs * 1e9)}
	if l.MemoryMB > 0 {
		r.Memory = l.MemoryMB << 20
		r.MemorySwap = r.Memory // no swap beyond the limit
	}
	if l.PidsLimit > 0 {
		pids := l.PidsLimit
		r.PidsLimit = &pids
	}
	return &container.HostConfig{
		NetworkMode: container.NetworkMode(netMode),
		Resources:   r,
		// No setuid/setcap binary can raise a process's privileges: an
		// agent running as uid 10001 stays uid 10001.
		SecurityOpt: []string{"no-new-privileges"},
	}
}

// OOMKills returns how many processes of the sandbox's container the
// kernel's OOM killer has killed at its memory limit since the container
// started: the oom_kill counter of the container's memory cgroup
// (memory.events under cgroup v2, memory.oom_control under v1), read by a
// root exec. The engine's own State.OOMKilled is not used: Docker 20.10
// sets it only when PID 1 is killed, never for a process of an exec.
// Callers compare the count before and after a phase. It returns an error
// when the counter cannot be read (no cgroup mount, the exec cannot start).
func (d *Docker) OOMKills(ctx context.Context, h *Handle) (int64, error) {
	var out limitedBuffer
	res, err := d.Exec(ctx, h, ExecSpec{
		Cmd:    []string{"sh", "-c", "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control"},
		Stdout: &out, Timeout: time.Minute,
	})
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("sandbox: docker: read the OOM kill counter: exit %d", res.ExitCode)
	}
	for line := range strings.Lines(out.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("sandbox: docker: no oom_kill counter in the memory cgroup")
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
func limitLabels(lbl map[string]string, l Limits) map[string]string {
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
func (d *Docker) KillAll(ctx context.Context, h *Handle, user string) error {
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
// (kill -1), from a new exec, lifting a reached pids limit as KillAll says.
func (d *Docker) signalAs(ctx context.Context, cid, user, sig string) error {
	script := "kill -" + sig + " -1 2>/dev/null; true"
	code, err := d.runQuiet(ctx, cid, user, script)
	if err != nil {
		return err
	}
	if code == 126 {
		if err := d.setPids(ctx, cid, pidsHeadroom); err != nil {
			return err
		}
		if code, err = d.runQuiet(ctx, cid, user, script); err != nil {
			return err
		}
		if code == 126 {
			return fmt.Errorf("sandbox: docker: %s: cannot start a process to send SIG%s", short(cid), sig)
		}
	}
	if sig != "KILL" {
		return nil
	}
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
func (d *Docker) setPids(ctx context.Context, cid string, extra int64) error {
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
func (d *Docker) pidsCurrent(ctx context.Context, cid string) (int64, error) {
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

// Package docker is the sandbox driver that runs each sandbox as one
// Docker container (DESIGN §4), the default. Beside the sandbox.Driver
// contract it has the abilities only a container engine gives: building
// and caching task images (EnsureImage), derived images (EnsureDerived,
// Commit), joining the bridge network (ConnectBridge), Freeze, OOMKills,
// KillAll, reading files straight from the copy API (ReadFile,
// CopyOutFiles), and GC of what a run left behind. Per-cell internal
// networks are allocated from InternalPool, which `proctor firewall`
// covers with one rule. Its conformance run is TestConformance
// (package sandbox/sandboxtest).
package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Driver is the sandbox.Driver that runs each sandbox as one Docker
// container (DESIGN §4), through the engine API
// (github.com/docker/docker/client with API version negotiation; the
// engine here is 20.10, API 1.41). Nothing is bind-mounted: files move
// through the copy API. Every container and network it creates carries
// the labels proctor.run, proctor.cell and proctor.managed, so GC can
// find them.
//
// The container's main process is `sleep <Lifetime>` (the image's
// entrypoint and command are replaced), so a container whose proctor died
// stops by itself; commands run as execs beside it.
//
// A *Driver is safe for concurrent use.
type Driver struct {
	cli       *engine
	log       *slog.Logger
	imageMap  *sandbox.ImageMap
	defaults  sandbox.Limits
	builds    keyedMutex
	proxyBin  string
	egressNet string
	proxyImg  proxyImageCache
	// upstream, upstreamCA and buildProxy are Options'.
	upstream   sandbox.UpstreamProxy
	upstreamCA []byte
	buildProxy map[string]string
	// cgroupRoot is where this machine's cgroup filesystem is mounted
	// (see hostOOMFile); "" reads the OOM counter by exec only.
	cgroupRoot string
	// The host path to containers' files (hostfs.go): off when
	// copyAPIOnly, or once this process was refused a look into one;
	// hostConts caches what it needs per container id; hostOps counts
	// the copies and reads it did.
	copyAPIOnly bool
	noHostFS    atomic.Bool
	hostConts   sync.Map
	hostOps     atomic.Int64
	// drainMax and drainBehindMax are sandbox.DrainMax and
	// sandbox.DrainBehindMax unless a test shortens them.
	drainMax, drainBehindMax time.Duration
}

// The contract and every optional ability the services look for
// (pkg/sandbox/abilities.go).
var (
	_ sandbox.Driver        = (*Driver)(nil)
	_ sandbox.ImageBuilder  = (*Driver)(nil)
	_ sandbox.DerivedImager = (*Driver)(nil)
	_ sandbox.BridgeJoiner  = (*Driver)(nil)
	_ sandbox.NetworkMover  = (*Driver)(nil)
	_ sandbox.Freezer       = (*Driver)(nil)
	_ sandbox.Thawer        = (*Driver)(nil)
	_ sandbox.ProcessKiller = (*Driver)(nil)
	_ sandbox.OOMCounter    = (*Driver)(nil)
	_ sandbox.FileCopier    = (*Driver)(nil)
	_ sandbox.FileReader    = (*Driver)(nil)
	_ sandbox.LimitReporter = (*Driver)(nil)
	_ sandbox.EgressLogger  = (*Driver)(nil)
	_ sandbox.CallLogger    = (*Driver)(nil)
	_ sandbox.ImageEnver    = (*Driver)(nil)
	_ sandbox.Collector     = (*Driver)(nil)
	_ sandbox.ExecPreparer  = (*Driver)(nil)
	_ sandbox.Capable       = (*Driver)(nil)
)

// Abilities declares every optional ability of pkg/sandbox/abilities.go:
// a container engine gives them all (the conformance suite checks each
// against the engine).
func (d *Driver) Abilities() []sandbox.Ability {
	return []sandbox.Ability{
		sandbox.AbilityImageBuilder, sandbox.AbilityDerivedImager, sandbox.AbilityBridgeJoiner, sandbox.AbilityNetworkMover,
		sandbox.AbilityEgressLogger, sandbox.AbilityCallLogger, sandbox.AbilityFreezer, sandbox.AbilityThawer,
		sandbox.AbilityProcessKiller, sandbox.AbilityOOMCounter, sandbox.AbilityFileCopier,
		sandbox.AbilityFileReader, sandbox.AbilityLimitReporter, sandbox.AbilityImageEnver,
		sandbox.AbilityCollector, sandbox.AbilityTreeCopier, sandbox.AbilityExecPreparer,
	}
}

// Options configures New. The zero value means defaults.
type Options struct {
	// Client is the engine client to use; nil creates one from the
	// environment (DOCKER_HOST, ...) with API version negotiation.
	Client *client.Client
	// Logger receives debug logs; nil discards.
	Logger *slog.Logger
	// ImageMap rewrites image references before a build or a run (FROM
	// lines and docker_image, see EnsureImage); nil maps nothing.
	ImageMap *sandbox.ImageMap
	// Defaults are the limits of a sandbox whose Spec sets none: CPUs and
	// MemoryMB apply when the task declares no cpus / memory_mb, PidsLimit
	// always. A zero field means the sandbox.DefaultLimits value, a
	// negative one no limit. NoNewPrivileges and the sources are ignored.
	Defaults sandbox.Limits
	// ProxyBinary is the proctor binary the egress proxy's sidecar image
	// is built from (see startProxy): a Linux build of ./cmd/proctor,
	// best static (CGO_ENABLED=0). "" means the running executable.
	ProxyBinary string
	// EgressNetwork is the network the egress proxy joins for its way out
	// when Spec.Egress.Upstream is ""; "" means the bridge.
	EgressNetwork string
	// UpstreamProxy is the operator's proxy the egress proxy chains its
	// upstream connections through (credentials included: it reaches the
	// sidecar in its config file, never a command line, an environment or
	// a sandbox). Zero: the sidecar connects directly.
	UpstreamProxy sandbox.UpstreamProxy
	// UpstreamCA is PEM the egress proxy trusts beside the system roots
	// when it verifies an upstream (a private gateway, a test endpoint).
	UpstreamCA []byte
	// BuildProxy are the proxy variables every image build gets as build
	// arguments (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, both cases, as the
	// Docker CLI's proxies.default passes them; the builder keeps them out
	// of the image's history). nil: none.
	BuildProxy map[string]string
	// CgroupRoot is where the engine host's cgroup filesystem is mounted
	// in this process's view, read for OOM counts and the freeze's process
	// count (see hostOOMFile, hostAlive); "" means /sys/fs/cgroup. A
	// proctor running in a container (deploy/) mounts the host's
	// /sys/fs/cgroup read-only elsewhere and names it here, and shares the
	// host's pid namespace; without both it falls back to execs in the
	// sandbox, which a paused container refuses.
	CgroupRoot string
	// CopyAPIOnly moves files in and out of containers only through the
	// engine's copy API, as for an engine on another machine. By default,
	// when the engine runs on this machine and this process may look into
	// its containers (root), CopyIn, CopyOutFiles and ReadFile go through
	// the container's root directory (/proc/<pid>/root of its PID 1,
	// every path resolved inside it), with the copy API's results and
	// without its cost (a re-exec of the engine binary per call on 20.10).
	CopyAPIOnly bool
	// EngineSlack is the time the engine gets to answer a request beyond
	// the budget the request serves (see engine): a create, a start, an
	// inspect or the start of an exec that it does not answer within it
	// fails with a *sandbox.EngineTimeoutError naming the request. 0
	// means sandbox.DefaultEngineSlack.
	EngineSlack time.Duration
}

// New returns a Docker driver. It does not contact the engine; the
// first call that needs it does (and negotiates the API version).
func New(opts Options) (*Driver, error) {
	cli := opts.Client
	if cli == nil {
		c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("sandbox: docker client: %w", err)
		}
		cli = c
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eng := &engine{Client: cli, slack: cmp.Or(opts.EngineSlack, sandbox.DefaultEngineSlack), log: log}
	return &Driver{cli: eng, log: log, imageMap: opts.ImageMap, defaults: withDefaults(opts.Defaults), proxyBin: opts.ProxyBinary, egressNet: opts.EgressNetwork,
		upstream: opts.UpstreamProxy, upstreamCA: opts.UpstreamCA, buildProxy: maps.Clone(opts.BuildProxy),
		cgroupRoot: cmp.Or(opts.CgroupRoot, "/sys/fs/cgroup"), copyAPIOnly: opts.CopyAPIOnly}, nil
}

// Client returns the engine client the driver uses (without the
// driver's bounds on its requests).
func (d *Driver) Client() *client.Client { return d.cli.Client }

// Settle waits until every container or network create the engine
// answered only after its bound (see engine) has been answered and what
// it made removed, or until ctx ends, and returns how many creates are
// still unanswered (0 when settled). A process that ends a run calls it
// before it exits, so nothing the engine makes late outlives it
// unnoticed; what is still unanswered carries the run's labels for
// GC.
func (d *Driver) Settle(ctx context.Context) int { return d.cli.settle(ctx) }

// ImageMap returns the image map in force (nil when none).
func (d *Driver) ImageMap() *sandbox.ImageMap { return d.imageMap }

// killWait bounds the wait for an exec to stop after SIGKILL (the Docker
// driver's own housekeeping, applied whatever the caller's context says).
const killWait = 10 * time.Second

// termWait bounds the wait for the exec that sends SIGTERM (see signalAs).
const termWait = time.Second

// labels returns the labels of everything created for spec. The run and
// cell labels are always set (possibly empty) so that a container never
// inherits them from an image committed from another run's container.
func labels(spec sandbox.Spec) map[string]string {
	return map[string]string{sandbox.LabelManaged: "1", sandbox.LabelRun: spec.RunID, sandbox.LabelCell: spec.CellID}
}

// Start implements Driver. It creates the per-cell internal network when
// spec.Network is NetworkInternal, then creates and starts the container
// from spec.Image (which must exist locally: Start never pulls) with
// `sleep <Lifetime seconds>` as its main process, spec.Env as its
// environment, spec.Workdir as its WORKDIR (created by the engine when
// missing), the limits d.Limits(spec) returns (recorded in Handle.Limits)
// and no-new-privileges. With spec.Egress it first starts the egress proxy
// on the internal network (see startProxy). Handle.ID is the container id;
// Handle.State holds "container", "network" (when one was created), "run",
// "cell", "image", and with a proxy "proxy" (its "ip:port") and
// "proxy_container". With spec.Services (a compose environment) the
// services are started first on the per-cell network (see startServices;
// a per-cell network with a way out is made when spec.Network is
// NetworkBridge), their ids in "services", main waits for spec.DependsOn
// and joins the network with the alias "main".
// On error everything created is removed.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	if spec.Image == "" {
		return nil, fmt.Errorf("%w: empty image", sandbox.ErrInvalidSpec)
	}
	mode := spec.Network
	if mode == "" {
		mode = sandbox.NetworkNone
	}
	switch mode {
	case sandbox.NetworkNone, sandbox.NetworkBridge, sandbox.NetworkInternal:
	default:
		return nil, fmt.Errorf("%w: network %q (want %q, %q or %q)", sandbox.ErrInvalidSpec, spec.Network, sandbox.NetworkNone, sandbox.NetworkBridge, sandbox.NetworkInternal)
	}
	if spec.CPUs < 0 || spec.MemoryMB < 0 || spec.Lifetime < 0 {
		return nil, fmt.Errorf("%w: negative CPUs, MemoryMB or Lifetime", sandbox.ErrInvalidSpec)
	}
	life := spec.Lifetime
	if life == 0 {
		life = sandbox.DefaultLifetime
	}
	lbl := labels(spec)
	h := &sandbox.Handle{
		Driver: sandbox.DriverDocker,
		State:  map[string]string{"image": spec.Image},
		Env:    maps.Clone(spec.Env),
	}
	if spec.RunID != "" {
		h.State["run"] = spec.RunID
	}
	if spec.CellID != "" {
		h.State["cell"] = spec.CellID
	}
	fail := func(err error) (*sandbox.Handle, error) {
		_ = d.Destroy(ctx, h)
		return nil, err
	}

	if spec.Egress != nil && mode != sandbox.NetworkInternal {
		return nil, fmt.Errorf("%w: an egress proxy needs network %q, not %q", sandbox.ErrInvalidSpec, sandbox.NetworkInternal, mode)
	}
	if err := checkServices(spec, mode); err != nil {
		return nil, err
	}
	netMode := mode
	if mode == sandbox.NetworkBridge && len(spec.Services) > 0 {
		name := "proctor-" + randomHex(6)
		id, err := d.createCellNetwork(ctx, name, lbl)
		if err != nil {
			return nil, err
		}
		h.State["network"] = id
		netMode = name
	}
	// With an egress proxy and no compose services, the sidecar starts
	// while the main container does: nothing but its keep-alive runs in
	// main until the arm's first exec, which comes after Start returns
	// with the proxy listening.
	proxyDone := func() error { return nil }
	if mode == sandbox.NetworkInternal {
		name := "proctor-" + randomHex(6)
		id, subnet, err := d.createInternal(ctx, name, lbl)
		if err != nil {
			return nil, err
		}
		h.State["network"] = id
		netMode = name
		if spec.Egress != nil {
			var id, listen string
			ch := make(chan error, 1)
			go func() {
				var err error
				id, listen, err = d.startProxy(ctx, spec, name, subnet, lbl)
				ch <- err
			}()
			proxyDone = sync.OnceValue(func() error {
				err := <-ch
				if id != "" {
					h.State["proxy_container"] = id
				}
				if err == nil {
					h.State["proxy"] = listen
				}
				return err
			})
			if len(spec.Services) > 0 {
				if err := proxyDone(); err != nil {
					return fail(err)
				}
			}
		}
	}
	fail = func(err error) (*sandbox.Handle, error) {
		_ = proxyDone() // its container is known before anything is removed
		_ = d.Destroy(ctx, h)
		return nil, err
	}

	var nc *network.NetworkingConfig
	if len(spec.Services) > 0 {
		if err := d.startServices(ctx, h, spec, netMode, lbl); err != nil {
			return fail(err)
		}
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netMode: {Aliases: []string{"main"}}}}
	}

	h.Limits = d.Limits(spec)
	cfg := &container.Config{
		Image:      spec.Image,
		Entrypoint: []string{"sleep", strconv.FormatInt(int64(math.Ceil(life.Seconds())), 10)},
		Cmd:        []string{},
		// The keep-alive runs as root whatever the image's USER: under
		// no-new-privileges a container whose PID 1 is another user gives
		// even a root exec no capabilities (proctor's chown of the agent's
		// directories failed), and every exec names its own user.
		User:       "0",
		Env:        envList(spec.Env),
		WorkingDir: spec.Workdir,
		Labels:     limitLabels(lbl, h.Limits),
	}
	hc := hostConfig(netMode, h.Limits)
	hc.Tmpfs = maps.Clone(spec.Tmpfs)
	created, err := d.cli.ContainerCreate(ctx, cfg, hc, nc, nil, "")
	if err != nil {
		return fail(fmt.Errorf("sandbox: docker: create container from %s: %w", spec.Image, err))
	}
	h.ID = created.ID
	h.State["container"] = created.ID
	if spec.Egress != nil && spec.Egress.Gateway != nil {
		if err := d.installGatewayCA(ctx, created.ID, spec.Egress.Gateway); err != nil {
			return fail(err)
		}
		h.State["gateway_ca"] = sandbox.GatewayCAPath
	}
	if err := d.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return fail(fmt.Errorf("sandbox: docker: start container: %w", err))
	}
	if err := proxyDone(); err != nil {
		return fail(err)
	}
	d.log.Debug("sandbox started", "container", created.ID[:12], "image", spec.Image, "network", mode)
	return h, nil
}

// envList turns a map into sorted KEY=VALUE pairs.
func envList(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *Driver) container(h *sandbox.Handle) (string, error) {
	if h == nil || h.Driver != sandbox.DriverDocker {
		return "", fmt.Errorf("%w: not a docker handle", sandbox.ErrInvalidSpec)
	}
	id := state(h, "container")
	if id == "" {
		return "", sandbox.ErrDestroyed
	}
	return id, nil
}

// Exec implements Driver. The command runs as an exec in the container,
// as root when spec.User is "" (the image's USER is not used), with stdin
// closed, the container's environment plus spec.Env, in spec.Workdir (else
// the container's working dir).
//
// Exec returns when the command's main process has exited and its output
// is delivered: the exec's output stream is read until it closes; while it
// is still open, the exec is inspected at a growing interval (100 ms
// doubling to 500 ms: the stream's end is what normally reports the exit,
// so an exec that ends within 100 ms costs the engine one inspect), and
// once the main process has exited, what is still
// buffered is drained until none arrives for DrainTimeout (at most
// DrainMax) and the stream is closed.
// So a background process that inherited stdout (`sleep 100000 &` in
// solve.sh) does not keep Exec waiting; it is not killed either (a
// solution may start a server the verifier uses). The engine itself (20.10)
// spends about 4 s after such an exec ends waiting for the held output
// streams, during which it reports no other exit of the same container, so
// the next Exec in that container may take up to that much longer.
//
// At the timeout, or when ctx ends, every process in the container except
// its PID 1 (the keep-alive sleep) gets SIGTERM, and SIGKILL when the main
// process has not exited after spec.Grace (at once when Grace is 0): the
// signals are sent by `sh -c 'kill -TERM -1'` in a new root exec. kill(2)
// with pid -1 reaches every process the caller may signal except PID 1
// and the caller itself, whatever session or process group a process
// moved to and whichever user it runs as, which a process-group kill
// would miss (a daemonising child calls setsid), and Docker's own kill
// reaches only PID 1. This is sound because each cell has its own
// container and its phases run one at a time, so every other process in
// it belongs to this command or an earlier phase of the same cell. The
// image needs a `sh` with a kill builtin (every image that runs task
// scripts has one).
func (d *Driver) Exec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
	cid, err := d.container(h)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	if len(spec.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return sandbox.ExecResult{TimedOut: true, ExitCode: sandbox.TimeoutExitCode}, nil
	}
	user := spec.User
	if user == "" {
		user = "0"
	}
	hold := sandbox.HoldOf(ctx)
	var created container.ExecCreateResponse
	var resp types.HijackedResponse
	for {
		// A frozen sandbox (sandbox.Hold) runs no new command until its
		// thaw; one frozen between this check and the start refuses it,
		// and it is asked for again after the thaw.
		if hold != nil {
			if err := hold.WaitThawed(ctx); err != nil {
				return sandbox.ExecResult{TimedOut: true, ExitCode: sandbox.TimeoutExitCode}, nil
			}
		}
		created, err = d.cli.ContainerExecCreate(ctx, cid, container.ExecOptions{
			User:         user,
			AttachStdout: true,
			AttachStderr: true,
			Env:          envList(spec.Env),
			WorkingDir:   spec.Workdir,
			Cmd:          spec.Cmd,
		})
		if err == nil {
			resp, err = d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
		}
		if err != nil && hold != nil && isPausedRefusal(err) {
			if frozen, _, ch := hold.State(); frozen || d.paused(ctx, cid) {
				if !frozen {
					// Thawed, and the engine not yet caught up (see
					// awaitPauseEvents): ask again at its next change or
					// shortly.
					select {
					case <-ch:
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
				continue
			}
		}
		if err != nil {
			return sandbox.ExecResult{}, d.execErr(err)
		}
		break
	}
	return d.follow(ctx, cid, created.ID, resp, spec, hold)
}

// follow waits for the started exec execID, whose stream is resp, as
// Exec describes: its output, its exit, its timeout (counted from now)
// and the kill at the timeout or at ctx's end. It closes resp.
func (d *Driver) follow(ctx context.Context, cid, execID string, resp types.HijackedResponse, spec sandbox.ExecSpec, hold *sandbox.Hold) (sandbox.ExecResult, error) {
	defer resp.Close()
	start := time.Now()
	var frozen0 time.Duration
	if hold != nil {
		frozen0 = hold.Frozen()
	}
	// ran is the exec's time so far, less the time its sandbox was frozen.
	ran := func() time.Duration {
		if hold == nil {
			return time.Since(start)
		}
		return time.Since(start) - (hold.Frozen() - frozen0)
	}

	copyDone := make(chan struct{})
	var progress atomic.Int64 // twice the writes begun or ended (safeWriter)
	go func() {
		defer close(copyDone)
		_, _ = stdcopy.StdCopy(safeWriter{spec.Stdout, &progress}, safeWriter{spec.Stderr, &progress}, resp.Reader)
	}()
	// drain waits for the stream to end while output keeps arriving (the
	// engine still holds what a fast writer printed before it exited),
	// closing it once none came for DrainTimeout, or after DrainMax of
	// arriving output. Time a write of the caller's is in progress (odd
	// count: proctor's own reader is behind, not the stream) does not
	// count against DrainMax, so nothing the command printed is cut for
	// a slow reader; DrainBehindMax bounds the drain whole, so a
	// background writer that outpaces the reader cannot hold Exec
	// forever.
	drain := func() {
		t := time.NewTimer(sandbox.DrainTimeout)
		defer t.Stop()
		drainMax := d.drainMax
		if drainMax == 0 {
			drainMax = sandbox.DrainMax
		}
		behindMax := d.drainBehindMax
		if behindMax == 0 {
			behindMax = sandbox.DrainBehindMax
		}
		hard := time.Now().Add(behindMax)
		left := drainMax
		last := progress.Load()
		for {
			select {
			case <-copyDone:
				return
			case <-t.C:
			}
			n := progress.Load()
			behind := n%2 == 1
			if !behind {
				left -= sandbox.DrainTimeout
			}
			if (behind || n != last && left > 0) && time.Now().Before(hard) {
				last = n
				t.Reset(sandbox.DrainTimeout)
				continue
			}
			resp.Close()
			<-copyDone
			return
		}
	}

	var deadline <-chan time.Time
	if spec.Timeout > 0 {
		// The budget's clock stops while the sandbox is frozen.
		c, stop := hold.After(spec.Timeout)
		defer stop()
		deadline = c
	}
	interval := execPollStart
	poll := time.NewTimer(interval)
	defer poll.Stop()
	stream := (<-chan struct{})(copyDone)
	streamClosed := false
	failures := 0
	for {
		select {
		case <-stream:
			// The stream closed: the process has exited or is about to;
			// ask at once, then at a short interval until the engine
			// reports the exit.
			stream, streamClosed = nil, true
			interval = 2 * time.Millisecond
			poll.Reset(0)
		case <-poll.C:
			ins, err := d.cli.ContainerExecInspect(ctx, execID)
			switch {
			case err == nil && !ins.Running:
				if !streamClosed {
					drain()
				}
				if ins.Pid == 0 && ins.ExitCode == 0 {
					// No pid and no exit code (the API's 0 for none): the
					// engine refused the start after the create (see
					// runStarted), and nothing ran.
					return sandbox.ExecResult{}, errors.New("sandbox: docker: exec: the engine did not start the process")
				}
				return sandbox.ExecResult{ExitCode: ins.ExitCode, Duration: ran()}, nil
			case err != nil && cerrdefs.IsNotFound(err):
				drain()
				return sandbox.ExecResult{}, fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
			case errors.Is(err, sandbox.ErrEngineTimeout):
				// The engine hangs: the caller destroys the sandbox.
				return sandbox.ExecResult{}, err
			case err != nil && ctx.Err() == nil:
				if failures++; failures >= 20 {
					drain()
					return sandbox.ExecResult{}, fmt.Errorf("sandbox: docker: exec inspect: %w", err)
				}
			case err == nil:
				failures = 0
			}
			if streamClosed {
				interval = min(interval*2, 100*time.Millisecond)
			} else {
				interval = min(interval*2, 500*time.Millisecond)
			}
			poll.Reset(interval)
		case <-deadline:
			return d.stopExec(ctx, cid, execID, spec.Grace, ran, drain), nil
		case <-ctx.Done():
			if hold != nil {
				// A frozen sandbox's processes take no signal: thaw it
				// (the owner's freeze ends with the phase).
				d.unpause(ctx, cid)
			}
			return d.stopExec(ctx, cid, execID, spec.Grace, ran, drain), nil
		}
	}
}

// execPollStart is the first interval at which Exec inspects an exec whose
// output stream is still open. The stream's end reports a normal exit at
// once; the polls only find an exit whose stream a background process
// still holds, so they start slow (each is an engine call beside the
// exec; 10 ms doubling cost a 1 s exec seven of them).
const execPollStart = 100 * time.Millisecond

// stopExec kills every process in the container but PID 1 (see Exec) and
// returns the timeout result once the exec has stopped and its output is
// drained.
func (d *Driver) stopExec(ctx context.Context, cid, execID string, grace time.Duration, ran func() time.Duration, drain func()) sandbox.ExecResult {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout+grace)
	defer cancel()
	if grace > 0 {
		if err := d.signalAs(cctx, cid, "0", "TERM"); err != nil {
			d.log.Warn("sandbox: SIGTERM to the exec's processes failed", "container", cid, "err", err)
		}
		_, _ = d.waitExec(cctx, execID, grace)
	}
	if err := d.signalAs(cctx, cid, "0", "KILL"); err != nil {
		d.log.Warn("sandbox: SIGKILL to the exec's processes failed", "container", cid, "err", err)
	}
	_, _ = d.waitExec(cctx, execID, killWait)
	drain()
	return sandbox.ExecResult{ExitCode: sandbox.TimeoutExitCode, TimedOut: true, Duration: ran()}
}

// runQuiet runs `sh -c script` as user in the container, discards its
// output and returns its exit code (126 when the runtime could not start
// it, e.g. at the pids limit; -1 when it had not ended after bound or
// when ctx ended).
//
// The wait is bounded because the exec can be stopped: a process of the
// container that sends SIGSTOP to every process (`kill -STOP -1`, as the
// verifier's exit hook does when the test script exits on the SIGTERM this
// exec sends) stops this exec too when it has not exited yet, and its
// output stream then never closes. The caller goes on (a SIGKILL ends
// stopped processes as well).
func (d *Driver) runQuiet(ctx context.Context, cid, user, script string, bound time.Duration) (int, error) {
	code, _, err := d.runStarted(ctx, cid, user, script, bound)
	if code == -1 && err == nil {
		log := d.log.Warn
		if bound < killWait {
			log = d.log.Debug // expected: the SIGKILL that follows ends it (signalAs)
		}
		log("sandbox: a signal exec did not end (stopped by a process in the container?)", "container", short(cid), "script", script)
	}
	return code, err
}

// runStarted is runQuiet that also says whether the engine started the
// process: an exec the engine created but then refused to start (it held
// the container paused at that moment, see awaitPauseEvents) ends with
// no exit code and no pid, which the API reports as exit 0. An exec the
// engine refuses as paused is an error isPausedRefusal recognises.
func (d *Driver) runStarted(ctx context.Context, cid, user, script string, bound time.Duration) (code int, started bool, err error) {
	created, err := d.cli.ContainerExecCreate(ctx, cid, container.ExecOptions{
		User: user, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"sh", "-c", script},
	})
	if err != nil {
		return -1, false, d.execErr(err)
	}
	resp, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, false, d.execErr(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, resp.Reader)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	wait := bound
	select {
	case <-done:
	case <-t.C:
		wait = 0 // the stream is still open after bound: one last look
	case <-ctx.Done():
		wait = 0
	}
	resp.Close()
	<-done
	ins, err := d.inspectExec(ctx, created.ID, wait)
	if err != nil || ins.Running {
		return -1, false, err
	}
	return ins.ExitCode, ins.Pid > 0 || ins.ExitCode != 0, nil
}

// waitExec polls the exec until it is no longer running, for at most max,
// and returns its exit code (-1 when it was still running).
func (d *Driver) waitExec(ctx context.Context, execID string, max time.Duration) (int, error) {
	ins, err := d.inspectExec(ctx, execID, max)
	if err != nil || ins.Running {
		return -1, err
	}
	return ins.ExitCode, nil
}

// inspectExec polls the exec until it is no longer running, for at most
// max, and returns its last inspection (Running when it was still
// running). A missing exec is ErrDestroyed; ctx's end is its error.
func (d *Driver) inspectExec(ctx context.Context, execID string, max time.Duration) (container.ExecInspect, error) {
	end := time.Now().Add(max)
	interval := 2 * time.Millisecond
	for {
		ins, err := d.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				return ins, fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
			}
			return ins, fmt.Errorf("sandbox: docker: exec inspect: %w", err)
		}
		if !ins.Running || time.Now().After(end) {
			return ins, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ins, ctx.Err()
		}
		interval = min(interval*2, 100*time.Millisecond)
	}
}

func (d *Driver) execErr(err error) error {
	if errors.Is(err, sandbox.ErrEngineTimeout) {
		return err // it names the request
	}
	if isPausedRefusal(err) {
		// Running, but paused in the engine's view (see awaitPauseEvents): not
		// destroyed.
		return fmt.Errorf("sandbox: docker: exec: %w", err)
	}
	if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		// No such container, or it is not running.
		return fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
	}
	return fmt.Errorf("sandbox: docker: exec: %w", err)
}

// safeWriter forwards to w (discarding when nil) and never fails, so a
// failing caller's writer cannot stop the draining of the exec's stream.
type safeWriter struct {
	w        io.Writer
	progress *atomic.Int64 // counts each write's start and end, for Exec's drain
}

func (s safeWriter) Write(p []byte) (int, error) {
	if s.progress != nil {
		s.progress.Add(1) // odd while a write is in progress
		defer s.progress.Add(1)
	}
	if s.w != nil {
		_, _ = s.w.Write(p)
	}
	return len(p), nil
}

// Destroy implements Driver: it force-removes the container (SIGKILL to
// everything in it) with its anonymous volumes, then the compose services'
// containers, then the egress proxy's container, then the per-cell network.
// It ignores ctx's cancellation (not its values), so cleanup still happens
// after Ctrl-C, and is bounded by DestroyTimeout. Missing objects are not
// errors: Destroy is idempotent and accepts a Handle rebuilt from a
// recorded State.
func (d *Driver) Destroy(ctx context.Context, h *sandbox.Handle) error {
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
	defer cancel()
	var errs []error
	var cids []string
	if cid := state(h, "container"); cid != "" {
		cids = append(cids, cid)
	}
	if svcs := state(h, "services"); svcs != "" {
		cids = append(cids, strings.Split(svcs, ",")...)
	}
	if cid := state(h, "proxy_container"); cid != "" {
		cids = append(cids, cid)
	}
	// The containers go at once (the sandbox, its sidecar, its services),
	// then their network.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, cid := range cids {
		d.hostConts.Delete(cid)
		wg.Go(func() {
			if err := d.removeContainer(ctx, cid); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if nid := state(h, "network"); nid != "" {
		if err := d.removeNetwork(ctx, nid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) removeContainer(ctx context.Context, cid string) error {
	err := d.cli.ContainerRemove(ctx, cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err):
		// "removal already in progress": wait for it to finish.
		for ctx.Err() == nil {
			if _, err := d.cli.ContainerInspect(ctx, cid); cerrdefs.IsNotFound(err) {
				return nil
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		return fmt.Errorf("sandbox: docker: remove container %s: %w", short(cid), err)
	default:
		return fmt.Errorf("sandbox: docker: remove container %s: %w", short(cid), err)
	}
}

func (d *Driver) removeNetwork(ctx context.Context, nid string) error {
	var err error
	for {
		err = d.cli.NetworkRemove(ctx, nid)
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		// A network still has an endpoint for a moment after its
		// container is removed: retry until DestroyTimeout.
		if ctx.Err() != nil {
			return fmt.Errorf("sandbox: docker: remove network %s: %w", short(nid), err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// sleepCtx waits d or until ctx ends (a retry back-off, not
// synchronisation).
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ConnectBridge joins the sandbox's container to the engine's default
// bridge network and disconnects it from its per-cell internal network
// (which Destroy still removes), for a verifier whose policy is public
// after an agent phase (DESIGN §4). A sandbox with compose services stays
// on its cell network as well, so the verifier still reaches them; the
// services keep no way out. A container started with NetworkNone
// cannot be connected (the engine refuses); one already on the bridge is
// left as it is.
func (d *Driver) ConnectBridge(ctx context.Context, h *sandbox.Handle) error {
	cid, err := d.container(h)
	if err != nil {
		return err
	}
	ins, err := d.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return d.execErr(err)
	}
	if ins.NetworkSettings != nil {
		if _, ok := ins.NetworkSettings.Networks[sandbox.NetworkBridge]; ok {
			return nil
		}
	}
	// Leaving the internal network and joining the bridge are two engine
	// calls, made at once.
	var leave error
	var wg sync.WaitGroup
	if nid := state(h, "network"); nid != "" && state(h, "services") == "" {
		// With compose services main stays on the cell's network too,
		// since the verifier may need them (they keep no way out).
		wg.Go(func() {
			if err := d.cli.NetworkDisconnect(ctx, nid, cid, true); err != nil && !cerrdefs.IsNotFound(err) {
				leave = fmt.Errorf("sandbox: docker: disconnect %s from its internal network: %w", short(cid), err)
			}
		})
	}
	join := d.cli.NetworkConnect(ctx, sandbox.NetworkBridge, cid, nil)
	wg.Wait()
	if join != nil {
		return fmt.Errorf("sandbox: docker: connect %s to bridge: %w", short(cid), join)
	}
	return leave
}

// GC removes every container and network labelled proctor.run=runID (a
// run's leftovers, e.g. after a crash) and returns the number of containers
// and networks removed.
func (d *Driver) GC(ctx context.Context, runID string) (containers, networks int, err error) {
	if runID == "" {
		return 0, 0, fmt.Errorf("%w: empty run id", sandbox.ErrInvalidSpec)
	}
	return d.gc(ctx, filters.NewArgs(filters.Arg("label", sandbox.LabelRun+"="+runID)), nil)
}

// GCDead removes the containers and networks of every run (found by the
// proctor.managed label) for which isAlive(runID) is false, and returns
// the numbers removed. Objects without a proctor.run label are left alone.
func (d *Driver) GCDead(ctx context.Context, isAlive func(runID string) bool) (containers, networks int, err error) {
	return d.gc(ctx, filters.NewArgs(filters.Arg("label", sandbox.LabelManaged)), func(l map[string]string) bool {
		run := l[sandbox.LabelRun]
		return run != "" && !isAlive(run)
	})
}

func (d *Driver) gc(ctx context.Context, f filters.Args, pick func(map[string]string) bool) (nc, nn int, err error) {
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox: docker: list containers: %w", err)
	}
	var errs []error
	for _, c := range cs {
		if pick != nil && !pick(c.Labels) {
			continue
		}
		if err := d.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		nc++
	}
	ns, err := d.cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nc, 0, errors.Join(append(errs, fmt.Errorf("sandbox: docker: list networks: %w", err))...)
	}
	for _, n := range ns {
		if pick != nil && !pick(n.Labels) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.removeNetwork(rctx, n.ID)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nn++
	}
	return nc, nn, errors.Join(errs...)
}

// state returns h.State[key], "" for a nil Handle or State.
func state(h *sandbox.Handle, key string) string {
	if h == nil {
		return ""
	}
	return h.State[key]
}

// Cells lists the (run, cell) pairs of the containers this engine holds
// for cells (labels proctor.run and proctor.cell set), each once, in the
// engine's order. Its error is the engine's.
func (d *Driver) Cells(ctx context.Context) ([][2]string, error) {
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelManaged))})
	if err != nil {
		return nil, fmt.Errorf("sandbox: docker: list containers: %w", err)
	}
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, c := range cs {
		k := [2]string{c.Labels[sandbox.LabelRun], c.Labels[sandbox.LabelCell]}
		if k[0] == "" || k[1] == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	return out, nil
}

// ReapCell removes every container and network labelled with the run and
// the cell (all its attempts, egress proxies included). Its error is the
// engine's.
func (d *Driver) ReapCell(ctx context.Context, runID, cellID string) error {
	if runID == "" || cellID == "" {
		return fmt.Errorf("%w: empty run or cell id", sandbox.ErrInvalidSpec)
	}
	_, _, err := d.gc(ctx, filters.NewArgs(filters.Arg("label", sandbox.LabelRun+"="+runID), filters.Arg("label", sandbox.LabelCell+"="+cellID)), nil)
	return err
}

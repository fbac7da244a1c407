// Package sandbox is the contract of the places a cell's commands run in
// (DESIGN §4): Driver, Spec, ExecSpec, ExecResult, Handle, the errors, the
// labels and network modes. A Driver is safe for concurrent use by several
// goroutines on different Handles; the calls on one Handle are made one at
// a time by its owner (phases of a cell run one after another). What only
// some drivers can do are the small interfaces of abilities.go, found by
// type assertion and declared by each driver (Capable, AbilitiesOf), so a
// run whose harnesses need an ability the driver lacks is refused before
// it starts.
//
// Beside the contract are the driver-neutral helpers every driver and
// caller shares: output capture (Tail, Lines), the image map, image keys
// and tags, resource limit types. The drivers live in packages of their
// own: a Docker container per cell in sandbox/docker (the default) and a
// host process tree in sandbox/process. Both pass one conformance suite,
// sandbox/sandboxtest (exit codes, timeouts that kill the whole tree, a
// grandchild that keeps the output pipe open, output without a final
// newline, long lines, invalid UTF-8, a process that ignores SIGTERM;
// for the abilities a driver declares, kill-all through a fork bomb,
// freeze before the reward is read, reads that never follow a link),
// which a new driver runs with one call to sandboxtest.Run.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// Labels put on every container, network and image the Docker driver
// creates, so `proctor gc` can find what a run left behind.
const (
	LabelRun  = "proctor.run"
	LabelCell = "proctor.cell"
	// LabelManaged marks every object proctor created ("1").
	LabelManaged = "proctor.managed"
	// LabelTask, LabelRevision and LabelImageKey are put on built task
	// images (LabelImageKey: the image key, see ImageKey).
	LabelTask     = "proctor.task"
	LabelRevision = "proctor.revision"
	LabelImageKey = "proctor.image_key"
)

// Network modes for Spec.Network.
const (
	// NetworkNone is `--network none`: loopback only. A container started
	// this way can never be connected to a network later.
	NetworkNone = "none"
	// NetworkBridge is the engine's default bridge: the open network.
	NetworkBridge = "bridge"
	// NetworkInternal is a per-cell `--internal` bridge network created by
	// Start and removed by Destroy: no way out of the host, but the
	// container can later be joined to the bridge (docker.Driver.ConnectBridge).
	NetworkInternal = "internal"
)

// Driver names, as recorded in Handle.Driver.
const (
	DriverDocker  = "docker"
	DriverProcess = "process"
)

// TimeoutExitCode is the exit code reported for a command killed at its
// timeout or by context cancellation, as timeout(1) reports it.
const TimeoutExitCode = 124

// Errors returned by drivers. Test with errors.Is.
var (
	// ErrNotFound is returned by CopyOut when the sandbox path does not
	// exist, and by CopyIn when the host path does not exist.
	ErrNotFound = errors.New("sandbox: path not found")
	// ErrDestroyed is returned by Exec, CopyIn and CopyOut on a Handle that
	// was destroyed.
	ErrDestroyed = errors.New("sandbox: sandbox destroyed")
	// ErrInvalidSpec is wrapped by Start and Exec when a Spec or ExecSpec is
	// unusable (empty image, empty command, unknown network mode, ...).
	ErrInvalidSpec = errors.New("sandbox: invalid spec")
)

// ErrPreparedUsed is returned by PreparedExec.Run after Run or Discard:
// a prepared command runs at most once.
var ErrPreparedUsed = errors.New("sandbox: prepared exec already run or discarded")

// ErrNotRegular is wrapped by a driver's ReadFile (and in a FileResult of
// CopyOutFiles) when the path is a symlink, a directory, a device, a fifo
// or anything else but a regular file.
var ErrNotRegular = errors.New("sandbox: not a regular file")

// ErrTooLarge is wrapped by a driver's ReadFile (and in a FileResult of
// CopyOutFiles) when the file is over its size cap.
var ErrTooLarge = errors.New("sandbox: file over its size cap")

// ErrEngineTimeout is matched (errors.Is) by the error of a driver call
// whose container engine did not answer one of its requests within that
// request's bound: the budget the request serves (an exec's timeout, a
// container stop's grace) plus a fixed slack (DefaultEngineSlack). The
// error is an *EngineTimeoutError naming the request. A cell that meets
// it is errored, class infra: it is never waited on for longer, and
// nothing about its sandbox is assumed.
var ErrEngineTimeout = errors.New("sandbox: the container engine did not answer")

// EngineTimeoutError is the error of a request the engine did not answer
// within its bound (see ErrEngineTimeout).
type EngineTimeoutError struct {
	// Call is the request as the engine's API names it, with the ids it
	// carries ("POST /exec/0123456789ab/start", "POST /containers/create").
	Call string
	// Bound is how long the driver waited for the answer.
	Bound time.Duration
}

func (e *EngineTimeoutError) Error() string {
	return fmt.Sprintf("sandbox: the container engine did not answer %s within %s", e.Call, e.Bound)
}

// Is makes errors.Is(err, ErrEngineTimeout) hold.
func (e *EngineTimeoutError) Is(target error) bool { return target == ErrEngineTimeout }

// DefaultEngineSlack is the slack every engine request gets beyond the
// budget it serves, when the driver is given none: a request that serves
// no budget (create, start, inspect, the start of an exec) is answered
// within it or fails with ErrEngineTimeout.
const DefaultEngineSlack = 60 * time.Second

// FileResult is one file CopyOutFiles was asked to read: its contents, or
// why it was not read (an error wrapping ErrNotRegular or ErrTooLarge).
type FileResult struct {
	Data []byte
	Err  error
}

// TreeLimits bound a TreeCopier's copy: MaxBytes the contents of the
// regular files copied, in total (bytes, > 0); MaxEntries the entries
// copied (files, directories, symlinks, the top directory included; > 0).
type TreeLimits struct {
	MaxBytes   int64
	MaxEntries int
}

// TreeCopy is what a TreeCopier copied out and what it left out.
type TreeCopy struct {
	// Files, Dirs and Links count the regular files (a second name of a
	// hard-linked file included), directories and symlinks copied; Bytes
	// is the regular files' size in total.
	Files int   `json:"files"`
	Dirs  int   `json:"dirs"`
	Links int   `json:"symlinks"`
	Bytes int64 `json:"bytes"`
	// Truncated is true when anything was left out: SkippedEntries
	// entries (a directory left out counts once, whatever it holds), of
	// which regular files of SkippedBytes bytes in total; Skipped names
	// the first MaxSkippedNames of them, "PATH (N bytes)" or "PATH (over
	// the entry cap)", PATH the sandbox's absolute path.
	Truncated      bool     `json:"truncated,omitempty"`
	SkippedEntries int      `json:"skipped_entries,omitempty"`
	SkippedBytes   int64    `json:"skipped_bytes,omitempty"`
	Skipped        []string `json:"skipped,omitempty"`
}

// MaxSkippedNames is how many left-out entries a TreeCopy names.
const MaxSkippedNames = 20

// TreeBudget keeps a TreeCopy within its TreeLimits while a driver copies
// a tree entry by entry (drivers share it). Not safe for concurrent use.
type TreeBudget struct {
	Lim  TreeLimits
	Copy TreeCopy
}

// Entry kinds Admit takes.
const (
	TreeDir  = 'd'
	TreeFile = 'f'
	TreeLink = 'l'
	// TreeHardLink is a second name of a regular file already copied: no
	// bytes of its own.
	TreeHardLink = 'h'
)

// Admit decides whether the entry at the sandbox path abs, of kind
// (TreeDir, TreeFile, TreeLink, TreeHardLink) and size (bytes, regular
// files), is copied, and records it: false, and it is recorded as left
// out, when the entry cap is reached or a regular file is larger than
// what is left of the byte budget.
func (b *TreeBudget) Admit(abs string, kind byte, size int64) bool {
	entries := b.Copy.Files + b.Copy.Dirs + b.Copy.Links
	switch {
	case entries >= b.Lim.MaxEntries:
		b.Skip(abs, -1)
		return false
	case kind == TreeFile && size > b.Lim.MaxBytes-b.Copy.Bytes:
		b.Skip(abs, size)
		return false
	}
	switch kind {
	case TreeDir:
		b.Copy.Dirs++
	case TreeLink:
		b.Copy.Links++
	case TreeFile:
		b.Copy.Files++
		b.Copy.Bytes += size
	default:
		b.Copy.Files++
	}
	return true
}

// Skip records the entry at abs as left out: a regular file of size
// bytes, or (size < 0) an entry past the entry cap.
func (b *TreeBudget) Skip(abs string, size int64) {
	b.Copy.Truncated = true
	b.Copy.SkippedEntries++
	why := "over the entry cap"
	if size >= 0 {
		b.Copy.SkippedBytes += size
		why = fmt.Sprintf("%d bytes", size)
	}
	if len(b.Copy.Skipped) < MaxSkippedNames {
		b.Copy.Skipped = append(b.Copy.Skipped, fmt.Sprintf("%s (%s)", strings.ToValidUTF8(abs, "\uFFFD"), why))
	}
}

// Timeouts every driver applies, whatever the caller's context says.
const (
	// DestroyTimeout bounds Destroy (and the Docker driver's kill steps of
	// a timed-out Exec), so cleanup still happens after Ctrl-C; callers
	// destroying with a context of their own use it as the bound too.
	DestroyTimeout = 60 * time.Second
	// DrainTimeout bounds how long Exec keeps reading output after the
	// command's main process has exited, when something it started still
	// holds the output open (Docker: a lingering background process;
	// process driver: a process that left the process group). The Docker
	// driver counts it from the last output read (the engine may still
	// hold much of a fast writer's output when it exits), up to DrainMax.
	DrainTimeout = 250 * time.Millisecond
	// DrainMax bounds the Docker driver's drain after the main process
	// exited while output keeps arriving; time the caller's writer spends
	// on a write (proctor's reader behind) is not counted.
	DrainMax = 30 * time.Second
	// DrainBehindMax bounds the Docker driver's drain whole, the time
	// the caller's writer was behind included.
	DrainBehindMax = 10 * time.Minute
)

// Spec describes one sandbox for one cell.
type Spec struct {
	// RunID and CellID are put as labels proctor.run and proctor.cell on
	// every container and network created for the sandbox (Docker) and
	// recorded in Handle.State.
	RunID, CellID string
	// Image is the image reference to run, already mapped and built
	// (Docker only; the process driver ignores it). It must exist locally
	// (see docker.Driver.EnsureImage): Start never pulls.
	Image string
	// Workdir is the working directory of every Exec that sets none.
	// "" means the image's WORKDIR (Docker) or the root of the temp work
	// tree (process). For the process driver a relative or absolute path
	// is taken inside the work tree.
	Workdir string
	// Env is set for every Exec (ExecSpec.Env wins on a clash).
	Env map[string]string
	// Network is NetworkNone, NetworkBridge or NetworkInternal; "" means
	// NetworkNone. The process driver ignores it (the host's network).
	Network string
	// CPUs limits the container to this many CPUs (fractions allowed);
	// MemoryMB limits memory in MiB. 0 means the driver's default
	// (docker.Options.Defaults; memory DefaultMemoryMB, CPUs unlimited).
	// Docker only.
	CPUs     float64
	MemoryMB int64
	// Lifetime bounds how long the sandbox may live: the container's
	// keep-alive command is `sleep <Lifetime in seconds>`, so a proctor that
	// dies leaves nothing running forever. 0 means DefaultLifetime.
	// Docker only; a process sandbox lives until Destroy.
	Lifetime time.Duration
	// Egress, when set, puts an egress proxy (the proxy-logger of DESIGN
	// §6) on the sandbox's network: Network must be NetworkInternal. The
	// Docker driver starts it as a sidecar container before the sandbox
	// and records its address in Handle.State["proxy"]; ProxyEnv turns
	// that into the proxy variables of an Exec. nil: no proxy (the
	// internal network has no way out). The process driver refuses it.
	Egress *Egress
	// Tmpfs are tmpfs mounts of the container: mount point -> mount
	// options ("uid=10001,gid=10001,mode=0700,size=256m"). Docker only.
	Tmpfs map[string]string
	// Services are the sidecar containers of a compose environment
	// (task.Compose), started by Start before the sandbox's own container
	// (the compose service `main`) on the sandbox's per-cell network,
	// each reachable by its Name, and removed by Destroy. Network must be
	// NetworkInternal (no way out but Egress, when set) or NetworkBridge
	// (the driver then makes a per-cell network with a way out, since the
	// default bridge resolves no names). Docker only; the process driver
	// refuses it.
	Services []Service
	// DependsOn is main's depends_on: a service name -> its condition
	// (ConditionStarted, ConditionHealthy, ConditionCompleted); Start
	// waits for each before it creates the sandbox's container.
	DependsOn map[string]string
}

// Service is one sidecar container of a compose environment (Spec.Services).
type Service struct {
	// Name is the compose service name: the container's DNS alias on the
	// cell's network.
	Name string
	// Image is the image reference, already built or mapped; it must
	// exist locally.
	Image string
	// Entrypoint and Cmd replace the image's when non-nil.
	Entrypoint, Cmd []string
	// Env is the service's environment (with an egress proxy the proxy
	// variables of ProxyEnv are added).
	Env map[string]string
	// Workdir and User are the container's working directory and user
	// ("" the image's).
	Workdir, User string
	// Healthcheck is the engine healthcheck of the container (nil: the
	// image's, if any).
	Healthcheck *Healthcheck
	// DependsOn maps a service to the condition Start waits for before
	// creating this one.
	DependsOn map[string]string
	// CPUs and MemoryMB limit the container (0: the driver's defaults).
	CPUs     float64
	MemoryMB int64
}

// Healthcheck is an engine healthcheck: Test as compose writes it
// (["CMD", argv...] or ["CMD-SHELL", "script"]); 0 durations and retries
// are the engine's defaults (30 s interval, 30 s timeout, 3 retries).
type Healthcheck struct {
	Test                           []string
	Interval, Timeout, StartPeriod time.Duration
	Retries                        int
}

// depends_on conditions of Spec.DependsOn and Service.DependsOn, as the
// Compose specification names them.
const (
	ConditionStarted   = "service_started"
	ConditionHealthy   = "service_healthy"
	ConditionCompleted = "service_completed_successfully"
)

// ServiceWait bounds Start's wait for one depends_on condition.
const ServiceWait = 5 * time.Minute

// Egress configures the egress proxy of a sandbox (Spec.Egress).
type Egress struct {
	// Allow is the allowlist, entries in the proxy-logger's syntax
	// (host, host:port, IP literal, "private:" prefix; bare host = port
	// 443): the task's `environment.egress` / `sandbox.egress` plus what
	// the arm adds (a model provider's host). Empty allows nothing (every
	// attempt is still logged).
	Allow []string
	// Upstream is the network with a way out that the proxy joins beside
	// the sandbox's internal network; "" means NetworkBridge. Tests name a
	// network they made.
	Upstream string
	// Gateway, when set, makes the proxy the model gateway (see Gateway):
	// the driver puts the run CA's certificate and a bundle at
	// GatewayCAPath and GatewayBundlePath in the sandbox and records
	// Handle.State["gateway_ca"], which CAEnv turns into the variables of
	// an Exec. nil: every allowed CONNECT is a plain tunnel.
	Gateway *Gateway
}

// ProxyPort is the port the egress proxy listens on, on its address of the
// sandbox's internal network only.
const ProxyPort = 3128

// NoProxy is the NO_PROXY value an Exec behind the egress proxy gets:
// loopback is reached directly.
const NoProxy = "localhost,127.0.0.1,::1"

// proxyVars are the proxy variables HostProxyEnv passes on.
var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"}

// HostProxyEnv returns the host's proxy variables (HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY, NO_PROXY, both cases, read through getenv) for a
// phase on the open network (a public verifier), each proxy URL without
// its user name and password: credentials stay on the host. A value that
// is not a URL with a host is left out; empty values are left out.
func HostProxyEnv(getenv func(string) string) map[string]string {
	out := map[string]string{}
	for _, k := range proxyVars {
		v := strings.TrimSpace(getenv(k))
		if v == "" {
			continue
		}
		if strings.EqualFold(k, "NO_PROXY") {
			out[k] = v
			continue
		}
		raw := v
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw // curl's reading of a bare host:port
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			continue
		}
		u.User = nil
		out[k] = u.String()
	}
	return out
}

// ProxyEnv returns the environment that sends a command's traffic through
// the sandbox's egress proxy: HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (both
// cases) set to http://ADDR (Handle.State["proxy"], "ip:port"), and
// NO_PROXY / no_proxy set to NoProxy. It returns nil when the sandbox has
// no proxy.
func ProxyEnv(h *Handle) map[string]string {
	if h == nil || h.State["proxy"] == "" {
		return nil
	}
	u := "http://" + h.State["proxy"]
	env := map[string]string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env[k], env[strings.ToLower(k)] = u, u
	}
	env["NO_PROXY"], env["no_proxy"] = NoProxy, NoProxy
	return env
}

// DefaultLifetime is the Lifetime used when Spec.Lifetime is 0: the default
// solve and verify budgets (600 s each, as Harbor's defaults) plus slack.
const DefaultLifetime = 30 * time.Minute

// ExecSpec describes one command run inside a sandbox.
type ExecSpec struct {
	// Cmd is the argv; Cmd[0] is looked up in PATH. Callers run scripts as
	// []string{"bash", FILE}.
	Cmd []string
	// User is the user (name or uid[:gid]) to run as; "" means root in a
	// container (the image's USER is not used) and the current user on the
	// host. The process driver takes only a numeric "uid[:gid]", and one
	// other than proctor's own only when proctor runs as root.
	User string
	// Workdir overrides Spec.Workdir for this command.
	Workdir string
	// Env is added to Spec.Env for this command.
	Env map[string]string
	// Timeout bounds the command's run time; 0 means none. At the timeout
	// every process the command started gets SIGTERM, then SIGKILL after
	// Grace, and the result is ExitCode 124 with TimedOut set.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL at a timeout or a
	// context cancellation; 0 means SIGKILL at once. Callers running agents
	// pass DefaultGrace.
	Grace time.Duration
	// Stdout and Stderr receive the command's output as it is produced;
	// nil discards. Each is written from one goroutine at a time, but
	// Stdout and Stderr may be written concurrently with each other. Stdin
	// is always closed (empty).
	Stdout, Stderr io.Writer
}

// DefaultGrace is the grace period between SIGTERM and SIGKILL that agent
// phases get, so an agent can save its work (DESIGN §5.1).
const DefaultGrace = 10 * time.Second

// ExecResult is the outcome of a command.
type ExecResult struct {
	// ExitCode is the command's exit status; 124 when it timed out or its
	// context ended; 128+N when it was killed by signal N (as a shell
	// reports it).
	ExitCode int
	// TimedOut is true when the command was stopped at ExecSpec.Timeout or
	// because ctx ended.
	TimedOut bool
	// Duration is the wall-clock time from the start of the command to
	// the end of its output.
	Duration time.Duration
}

// Driver runs sandboxes. Implementations: *docker.Driver and
// *process.Driver (packages sandbox/docker and sandbox/process).
type Driver interface {
	// Start creates and starts the sandbox described by spec and returns
	// its Handle. On error nothing created is left behind.
	Start(ctx context.Context, spec Spec) (*Handle, error)
	// Exec runs one command in the sandbox and waits until it has exited
	// and its output is delivered. When ctx ends the command is stopped
	// as at a timeout (TimedOut, ExitCode 124) and the error is nil; the
	// caller then Destroys. The error is non-nil only when the command
	// could not be run or followed (the sandbox is gone: ErrDestroyed; the
	// engine failed; the process driver could not start the binary).
	//
	// A background process the command left holding stdout does not keep
	// Exec waiting (its output after the main process ends is drained for
	// a short bounded time, then dropped). The Docker driver reports a
	// command the runtime cannot start (missing binary, workdir or user)
	// as exit 126 with the runtime's message on the output, as `docker
	// exec` does.
	Exec(ctx context.Context, h *Handle, spec ExecSpec) (ExecResult, error)
	// CopyIn copies the host file or directory tree at hostPath into the
	// directory sandboxDir, created with its parents when missing: a
	// directory's contents land in sandboxDir (CopyIn("task/solution",
	// "/oracle") makes /oracle/solve.sh), a file lands in sandboxDir under
	// its base name. Permission bits are kept; files are owned by root
	// (Docker) or the current user (process); an existing sandboxDir keeps
	// its mode and owner. A missing hostPath is ErrNotFound.
	CopyIn(ctx context.Context, h *Handle, hostPath, sandboxDir string) error
	// CopyOut copies the file or directory at sandboxPath into the host
	// directory hostDir (created when missing) under its base name
	// (CopyOut("/logs/verifier", cellDir) makes cellDir/verifier/...).
	// Permission bits are kept, ownership is the current user's. A missing
	// sandboxPath is ErrNotFound.
	CopyOut(ctx context.Context, h *Handle, sandboxPath, hostDir string) error
	// Destroy stops the sandbox and removes everything Start created (the
	// container and its per-cell network; the temp work tree). It is
	// idempotent: destroying a destroyed or half-created sandbox is nil.
	Destroy(ctx context.Context, h *Handle) error
}

// Handle identifies a started sandbox.
type Handle struct {
	// Driver is DriverDocker or DriverProcess.
	Driver string `json:"driver"`
	// ID is the container id (Docker) or the temp work tree path (process).
	ID string `json:"id"`
	// State is the opaque state a restarted process needs to clean up what
	// a dead one left: for Docker "container", "network" (the per-cell
	// network id, when one was created), "run", "cell", "workdir"; for
	// process "root", "home", "workdir". It is meant to be recorded in a
	// SandboxStarted event and passed back to Destroy through a Handle
	// rebuilt from it.
	State map[string]string `json:"state"`
	// Limits are the resource limits the sandbox got (Docker; zero for a
	// process sandbox).
	Limits Limits `json:"limits"`

	// Env is a copy of Spec.Env, for a driver that applies it to every
	// Exec itself (the process driver; the Docker driver sets it on the
	// container and keeps it here only for the record). It is kept out of
	// State and out of JSON so that secrets in it are never recorded in
	// events; a Handle rebuilt from a recorded State has none, which
	// Destroy does not need. Callers do not change it.
	Env map[string]string `json:"-"`
}

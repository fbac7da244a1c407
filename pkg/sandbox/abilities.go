package sandbox

import "context"

// Optional abilities of a Driver. A service holds a Driver and finds what
// else it can do by type assertion, as database/sql/driver finds optional
// interfaces of a driver's Conn and Nomad finds a task driver's
// capabilities: a driver that lacks an ability makes the step that needs it
// fail with a clear error (or, for OOMCounter, leaves the count unknown).
// The signatures are those of *Docker; *Process has none of them.

// ImageBuilder builds or finds a task image (see Docker.EnsureImage).
type ImageBuilder interface {
	EnsureImage(ctx context.Context, b BuildSpec) (ImageInfo, error)
}

// DerivedImager makes an image derived from another by running setup in a
// sandbox of spec and committing it as ref, once per ref (see
// Docker.EnsureDerived).
type DerivedImager interface {
	EnsureDerived(ctx context.Context, ref string, spec Spec, setup func(context.Context, *Handle) error) (made bool, err error)
}

// BridgeJoiner joins a sandbox started on NetworkInternal to the open
// bridge (see Docker.ConnectBridge).
type BridgeJoiner interface {
	ConnectBridge(ctx context.Context, h *Handle) error
}

// NetworkMover moves a running sandbox to another network mode for its
// next phase and back (see Docker.MoveNetwork).
type NetworkMover interface {
	MoveNetwork(ctx context.Context, h *Handle, mode string) error
}

// EgressLogger stops the egress proxy of a sandbox started with
// Spec.Egress and returns its decision log (see Docker.EgressLog).
type EgressLogger interface {
	EgressLog(ctx context.Context, h *Handle) ([]byte, error)
}

// CallLogger returns the model calls the gateway of a sandbox's egress
// proxy recorded (see Docker.CallLog); call it after EgressLog.
type CallLogger interface {
	CallLog(ctx context.Context, h *Handle) ([]byte, error)
}

// Freezer stops every process of a sandbox but its keep-alive and returns
// how many were alive (see Docker.Freeze).
type Freezer interface {
	Freeze(ctx context.Context, h *Handle) (alive int, err error)
}

// Thawer resumes a sandbox a Freezer froze, with every process the
// verifier's exit hook stopped (see Docker.Thaw): a multi-step task's
// next step runs in the same sandbox.
type Thawer interface {
	Thaw(ctx context.Context, h *Handle) error
}

// ProcessKiller kills every process of user in a sandbox (see
// Docker.KillAll).
type ProcessKiller interface {
	KillAll(ctx context.Context, h *Handle, user string) error
}

// OOMCounter counts the processes the kernel killed at the sandbox's
// memory limit so far (see Docker.OOMKills).
type OOMCounter interface {
	OOMKills(ctx context.Context, h *Handle) (int64, error)
}

// FileCopier is CopyOut that also reads named regular files from the same
// stream, never through the host (see Docker.CopyOutFiles).
type FileCopier interface {
	CopyOutFiles(ctx context.Context, h *Handle, sandboxPath, hostDir string, files map[string]int64) (map[string]FileResult, error)
}

// FileReader reads one regular file of at most maxBytes from a sandbox
// (see Docker.ReadFile).
type FileReader interface {
	ReadFile(ctx context.Context, h *Handle, sandboxPath string, maxBytes int64) ([]byte, error)
}

// LimitReporter says which resource limits a spec would get (see
// Docker.Limits).
type LimitReporter interface {
	Limits(spec Spec) Limits
}

// ImageEnver returns the ENV of an image as KEY=VALUE pairs (see
// Docker.ImageEnv).
type ImageEnver interface {
	ImageEnv(ctx context.Context, ref string) ([]string, error)
}

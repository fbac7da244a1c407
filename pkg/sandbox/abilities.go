package sandbox

import (
	"context"
	"slices"
)

// Optional abilities of a Driver. A service holds a Driver and finds what
// else it can do by type assertion, as database/sql/driver finds optional
// interfaces of a driver's Conn and Nomad finds a task driver's
// capabilities: a driver that lacks an ability makes the step that needs it
// fail with a clear error (or, for OOMCounter, leaves the count unknown).
// The signatures are those of *Docker; *Process has none of them.
//
// Each driver also declares the abilities it has (Capable), so that a run
// whose harnesses need one the driver lacks is refused before it starts,
// naming the ability, instead of erroring cell by cell; the conformance
// suite (sandboxtest.Run) checks that the declaration is exactly what the
// driver implements and that the security abilities hold what they say.

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
// how many were alive (see Docker.Freeze). Nothing of the sandbox runs
// after it: files read afterwards are what the processes left. Exec is
// refused on a frozen sandbox; CopyOut, CopyOutFiles, ReadFile and
// Destroy work.
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
// Docker.KillAll): "" is root, whose kill reaches every process but the
// keep-alive. It gets through a fork bomb held at the pids limit and
// leaves the next phase its whole pids budget.
type ProcessKiller interface {
	KillAll(ctx context.Context, h *Handle, user string) error
}

// OOMCounter counts the processes the kernel killed at the sandbox's
// memory limit so far (see Docker.OOMKills).
type OOMCounter interface {
	OOMKills(ctx context.Context, h *Handle) (int64, error)
}

// FileCopier is CopyOut that also reads named regular files from the same
// stream, never through the host (see Docker.CopyOutFiles). Symlinks are
// copied out as symlinks and never followed; a named file that is not a
// regular file or is over its cap is refused in its FileResult
// (ErrNotRegular, ErrTooLarge).
type FileCopier interface {
	CopyOutFiles(ctx context.Context, h *Handle, sandboxPath, hostDir string, files map[string]int64) (map[string]FileResult, error)
}

// TreeCopier copies a directory tree out of a sandbox within limits (see
// Docker.CopyOutTree): as CopyOut (symlinks copied as symlinks and never
// followed, nothing written through a link or outside hostDir, devices
// and fifos left out), except that a regular file larger than what is
// left of lim.MaxBytes, and every entry past lim.MaxEntries, is left out
// and recorded in the TreeCopy it returns, never half copied.
type TreeCopier interface {
	CopyOutTree(ctx context.Context, h *Handle, sandboxPath, hostDir string, lim TreeLimits) (TreeCopy, error)
}

// FileReader reads one regular file of at most maxBytes from a sandbox
// (see Docker.ReadFile): a symlink, a device, a fifo or a directory is
// ErrNotRegular, a larger file ErrTooLarge, and nothing is resolved on
// the host.
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

// Collector removes what runs left behind, found by their labels
// (LabelRun, LabelManaged; see Docker.GC): GC everything of one run,
// GCDead everything of each run isAlive says is dead (objects of no run
// are left alone). Both return how many sandboxes (containers, sidecars
// included) and networks they removed.
type Collector interface {
	GC(ctx context.Context, runID string) (containers, networks int, err error)
	GCDead(ctx context.Context, isAlive func(runID string) bool) (containers, networks int, err error)
}

// Ability names one optional ability: the name of its interface in this
// file ("ProcessKiller").
type Ability string

// The abilities, one per interface of this file.
const (
	AbilityImageBuilder  Ability = "ImageBuilder"
	AbilityDerivedImager Ability = "DerivedImager"
	AbilityBridgeJoiner  Ability = "BridgeJoiner"
	AbilityNetworkMover  Ability = "NetworkMover"
	AbilityEgressLogger  Ability = "EgressLogger"
	AbilityCallLogger    Ability = "CallLogger"
	AbilityFreezer       Ability = "Freezer"
	AbilityThawer        Ability = "Thawer"
	AbilityProcessKiller Ability = "ProcessKiller"
	AbilityOOMCounter    Ability = "OOMCounter"
	AbilityFileCopier    Ability = "FileCopier"
	AbilityFileReader    Ability = "FileReader"
	AbilityTreeCopier    Ability = "TreeCopier"
	AbilityLimitReporter Ability = "LimitReporter"
	AbilityImageEnver    Ability = "ImageEnver"
	AbilityCollector     Ability = "Collector"
	AbilityExecPreparer  Ability = "ExecPreparer"
)

// implements holds, for each ability, whether a driver has its interface.
var implements = map[Ability]func(Driver) bool{
	AbilityImageBuilder:  is[ImageBuilder],
	AbilityDerivedImager: is[DerivedImager],
	AbilityBridgeJoiner:  is[BridgeJoiner],
	AbilityNetworkMover:  is[NetworkMover],
	AbilityEgressLogger:  is[EgressLogger],
	AbilityCallLogger:    is[CallLogger],
	AbilityFreezer:       is[Freezer],
	AbilityThawer:        is[Thawer],
	AbilityProcessKiller: is[ProcessKiller],
	AbilityOOMCounter:    is[OOMCounter],
	AbilityFileCopier:    is[FileCopier],
	AbilityFileReader:    is[FileReader],
	AbilityTreeCopier:    is[TreeCopier],
	AbilityLimitReporter: is[LimitReporter],
	AbilityImageEnver:    is[ImageEnver],
	AbilityCollector:     is[Collector],
	AbilityExecPreparer:  is[ExecPreparer],
}

func is[T any](d Driver) bool { _, ok := d.(T); return ok }

// AllAbilities returns every ability, sorted by name.
func AllAbilities() []Ability {
	out := make([]Ability, 0, len(implements))
	for a := range implements {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Capable is implemented by a driver that declares its abilities: the
// list it returns is a promise that the conformance suite holds it to
// (every ability declared is implemented and does what its interface
// says; every one implemented is declared). A driver without it declares
// none.
type Capable interface {
	Abilities() []Ability
}

// AbilitiesOf returns the abilities d declares and implements, sorted by
// name and without duplicates: what a run may count on. An ability d
// declares without implementing its interface is left out.
func AbilitiesOf(d Driver) []Ability {
	c, ok := d.(Capable)
	if !ok {
		return nil
	}
	var out []Ability
	for _, a := range c.Abilities() {
		if f := implements[a]; f != nil && f(d) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// Implemented returns the abilities whose interface d implements, sorted
// by name, whatever it declares.
func Implemented(d Driver) []Ability {
	var out []Ability
	for _, a := range AllAbilities() {
		if implements[a](d) {
			out = append(out, a)
		}
	}
	return out
}

// Missing returns the abilities of need that has lacks, in need's order
// and without duplicates.
func Missing(has, need []Ability) []Ability {
	var out []Ability
	for _, a := range need {
		if !slices.Contains(has, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/docker/docker/client"
)

// Docker is the Driver that runs each sandbox as one Docker container
// (DESIGN §4), through the engine API (github.com/docker/docker/client with
// API version negotiation). Nothing is bind-mounted: files move through the
// copy API. Every container and network it creates carries the labels
// proctor.run, proctor.cell and proctor.managed.
//
// A *Docker is safe for concurrent use.
type Docker struct {
	cli *client.Client
	log *slog.Logger
	// imageMap rewrites image references before a build or a run; nil
	// maps nothing.
	imageMap *ImageMap
}

var _ Driver = (*Docker)(nil)

// DockerOptions configures NewDocker. The zero value means defaults.
type DockerOptions struct {
	// Client is the engine client to use; nil creates one from the
	// environment (DOCKER_HOST, ...) with API version negotiation.
	Client *client.Client
	// Logger receives debug logs; nil discards.
	Logger *slog.Logger
	// ImageMap rewrites image references before a build or run (FROM lines
	// and docker_image); nil maps nothing.
	ImageMap *ImageMap
}

// NewDocker returns a Docker driver. It does not contact the engine; the
// first call that needs it does.
func NewDocker(opts DockerOptions) (*Docker, error) {
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
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Docker{cli: cli, log: log, imageMap: opts.ImageMap}, nil
}

// Client returns the engine client the driver uses.
func (d *Docker) Client() *client.Client { return d.cli }

var errUnimplemented = errors.New("sandbox: not implemented yet")

// Start implements Driver.
func (d *Docker) Start(ctx context.Context, spec Spec) (*Handle, error) {
	return nil, errUnimplemented
}

// Exec implements Driver.
func (d *Docker) Exec(ctx context.Context, h *Handle, spec ExecSpec) (ExecResult, error) {
	return ExecResult{}, errUnimplemented
}

// CopyIn implements Driver.
func (d *Docker) CopyIn(ctx context.Context, h *Handle, hostPath, sandboxDir string) error {
	return errUnimplemented
}

// CopyOut implements Driver.
func (d *Docker) CopyOut(ctx context.Context, h *Handle, sandboxPath, hostDir string) error {
	return errUnimplemented
}

// Destroy implements Driver.
func (d *Docker) Destroy(ctx context.Context, h *Handle) error {
	return errUnimplemented
}

// ConnectBridge joins the sandbox's container to the engine's default
// bridge network and disconnects it from its per-cell internal network,
// for a verifier phase whose policy is public after an agent phase
// (DESIGN §4). A container started with NetworkNone cannot be connected.
func (d *Docker) ConnectBridge(ctx context.Context, h *Handle) error {
	return errUnimplemented
}

// BuildSpec describes the image of one task revision for EnsureImage.
type BuildSpec struct {
	// Task is the task name (used in the tag proctor-task/<name>:<rev>).
	Task string
	// Revision is the task revision (hex SHA-256); its first 12 characters
	// make the tag.
	Revision string
	// EnvironmentDir is the task's environment/ directory: the build
	// context when it holds a Dockerfile.
	EnvironmentDir string
	// DockerImage is the task's prebuilt image, used when EnvironmentDir
	// has no Dockerfile.
	DockerImage string
	// Timeout bounds the build; 0 means DefaultBuildTimeout.
	Timeout time.Duration
	// Log receives the build log as it is produced; nil discards (the
	// tail is also kept in ImageInfo.Log and BuildError.Log).
	Log io.Writer
	// Labels are added to the built image.
	Labels map[string]string
}

// DefaultBuildTimeout bounds an image build when BuildSpec.Timeout is 0.
const DefaultBuildTimeout = 30 * time.Minute

// ImageInfo describes an image EnsureImage made available.
type ImageInfo struct {
	// Ref is the reference to pass in Spec.Image.
	Ref string
	// ID is the image id (sha256:...).
	ID string
	// Built is true when EnsureImage built it now; Cached when it existed.
	Built, Cached bool
	// Pulled is true when the image was pulled now.
	Pulled bool
	// Rewrites lists the image map rewrites applied.
	Rewrites []Rewrite
	// Workdir is the image's WORKDIR ("" when unset).
	Workdir string
	// Log is the tail of the build log (at most TailSize bytes).
	Log string
	// Duration is the time EnsureImage took.
	Duration time.Duration
}

// EnsureImage makes the image of a task revision available and returns its
// reference.
func (d *Docker) EnsureImage(ctx context.Context, b BuildSpec) (ImageInfo, error) {
	return ImageInfo{}, errUnimplemented
}

// ImageWorkdir returns the WORKDIR of the local image ref, "" when unset.
func (d *Docker) ImageWorkdir(ctx context.Context, ref string) (string, error) {
	return "", errUnimplemented
}

// GC removes every container and network labelled proctor.run=runID.
func (d *Docker) GC(ctx context.Context, runID string) error {
	return errUnimplemented
}

// GCDead removes the containers and networks of every run for which
// isAlive(runID) is false.
func (d *Docker) GCDead(ctx context.Context, isAlive func(runID string) bool) error {
	return errUnimplemented
}

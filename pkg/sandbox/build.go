package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// BuildSpec describes the image of one task revision for an image-building
// driver's EnsureImage (docker.Driver.EnsureImage).
type BuildSpec struct {
	// Task is the task name; it makes the repository part of the tag
	// (see ImageTag).
	Task string
	// Revision is the task revision (hex SHA-256); it is part of the
	// image key (see ImageKey), whose first 12 characters make the tag.
	Revision string
	// EnvironmentDir is the task's environment/ directory. When it holds
	// a Dockerfile, the image is built with the directory as the context.
	EnvironmentDir string
	// DockerImage is the task's prebuilt image (the sandbox table's
	// docker_image), used when EnvironmentDir has no Dockerfile.
	DockerImage string
	// Timeout bounds a build or a pull; 0 means DefaultBuildTimeout.
	Timeout time.Duration
	// Log receives the build or pull log as it is produced; nil discards.
	// Its tail is also kept in ImageInfo.Log and BuildError.Log.
	Log io.Writer
	// Labels are added to a built image (beside proctor.task,
	// proctor.revision and proctor.managed).
	Labels map[string]string
	// Dockerfile is the Dockerfile's path relative to EnvironmentDir, with
	// forward slashes ("" means "Dockerfile"), as compose's
	// build.dockerfile names it.
	Dockerfile string
	// BuildArgs are the build arguments (`--build-arg`, compose's
	// build.args); Target is the stage to build ("" the last), compose's
	// build.target.
	BuildArgs map[string]string
	Target    string
}

// DockerfilePath returns b.Dockerfile, or "Dockerfile" when it is "".
func (b BuildSpec) DockerfilePath() string {
	if b.Dockerfile == "" {
		return "Dockerfile"
	}
	return b.Dockerfile
}

// DefaultBuildTimeout bounds an image build or pull when BuildSpec.Timeout
// is 0.
const DefaultBuildTimeout = 30 * time.Minute

// ImageInfo describes an image EnsureImage (docker.Driver.EnsureImage) made
// available.
type ImageInfo struct {
	// Ref is the reference to pass in Spec.Image: the built tag, or the
	// (mapped) docker_image.
	Ref string `json:"ref"`
	// ID is the image id (sha256:...).
	ID string `json:"id"`
	// Source is "build" (from the Dockerfile) or "image" (docker_image).
	Source string `json:"source"`
	// Cached is true when the image already existed (no build, no pull).
	Cached bool `json:"cached"`
	// Pulled is true when docker_image was pulled now.
	Pulled bool `json:"pulled,omitempty"`
	// Rewrites lists the image map rewrites applied (FROM lines or
	// docker_image).
	Rewrites []Rewrite `json:"rewrites,omitempty"`
	// Workdir is the image's WORKDIR ("" when unset).
	Workdir string `json:"workdir,omitempty"`
	// User is the image's USER as written ("" when unset: root), whom a
	// container of the image runs as by default and Harbor's agent with
	// it (harness.SolveUser under --agent-user task).
	User string `json:"user,omitempty"`
	// Log is the last DefaultTailSize bytes of the build or pull log, as
	// plain valid UTF-8 ("" when cached).
	Log string `json:"log,omitempty"`
	// Key is the image key of a built image (see ImageKey); "" for
	// docker_image.
	Key string `json:"key,omitempty"`
	// Bases are the base images of a build (its FROM images after the
	// image map) with the image ids they resolved to.
	Bases []BaseImage `json:"bases,omitempty"`
	// Duration is the time EnsureImage took.
	Duration time.Duration `json:"duration"`
}

// BaseImage is a base image of a build: the reference of a FROM line after
// the image map, and the local image id it resolved to ("" for `scratch`
// and references with a variable, which are not resolved).
type BaseImage struct {
	Ref string `json:"ref"`
	ID  string `json:"id,omitempty"`
}

// BuildError is returned by EnsureImage when a build or a pull fails or
// times out. Test with errors.As.
type BuildError struct {
	// Ref is the tag being built or the image being pulled.
	Ref string
	// Pull is true for a failed pull of docker_image.
	Pull bool
	// TimedOut is true when the build or pull hit its timeout.
	TimedOut bool
	// Message is the engine's error message.
	Message string
	// Log is the tail of the build or pull log (plain valid UTF-8).
	Log string
	// Err is the underlying error, if any.
	Err error
}

// Error returns the message followed, on lines of their own, by the last
// meaningful lines of the log (LastLogLines): the cause a failing command
// printed (`E: Unable to locate package foo`) is in the error itself.
func (e *BuildError) Error() string {
	what := "build"
	if e.Pull {
		what = "pull"
	}
	verb := "failed"
	if e.TimedOut {
		verb = "timed out"
	}
	msg := fmt.Sprintf("sandbox: %s of %s %s: %s", what, e.Ref, verb, e.Message)
	if lines := LastLogLines(e.Log, e.Message); lines != "" {
		msg += "\n" + lines
	}
	return msg
}

// Build-log lines that say nothing about a failure: the classic builder's
// own progress lines (a step's header ends the search: stepLine).
var buildNoise = []string{" ---> ", "Removing intermediate container ", "Successfully built ", "Successfully tagged ", "Sending build context "}

// stepLine is the classic builder's header of a build step.
var stepLine = regexp.MustCompile(`^Step [0-9]+/[0-9]+ : `)

// LastLogLines returns the last meaningful lines of a build or pull log
// (at most 5 lines and 1 KiB, each line at most 300 bytes) of its last
// build step (after the last `Step N/M :` line, when the log holds one:
// an earlier step's output says nothing of the failure of a later one):
// lines that are not blank, not the builder's own progress
// (` ---> Running in ...`) and not the final error message msg, which the
// log repeats. "" when there are none.
func LastLogLines(log, msg string) string {
	const maxLines, maxLine, maxBytes = 5, 300, 1024
	msg = strings.TrimSpace(msg)
	var keep []string
	size := 0
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0 && len(keep) < maxLines; i-- {
		if stepLine.MatchString(lines[i]) {
			break // the failing step's header: what is above is earlier steps'
		}
		l := strings.TrimRight(lines[i], " \t\r")
		t := strings.TrimSpace(l)
		if t == "" || t == msg || slices.ContainsFunc(buildNoise, func(p string) bool { return strings.HasPrefix(l, p) }) {
			continue
		}
		if len(l) > maxLine {
			l = strings.ToValidUTF8(l[:maxLine], "") + "…"
		}
		if size+len(l) > maxBytes {
			break
		}
		size += len(l) + 1
		keep = append(keep, l)
	}
	slices.Reverse(keep)
	return strings.Join(keep, "\n")
}

func (e *BuildError) Unwrap() error { return e.Err }

// ImageTag returns the tag of a task's built image:
// proctor-task/<name>:<key[:12]>, where key is its image key (ImageKey)
// and name is the task name lowercased with every run of characters other
// than [a-z0-9] replaced by "-" in each "/"-separated part (an empty part
// becomes "x").
func ImageTag(task, key string) string {
	parts := strings.Split(strings.ToLower(task), "/")
	var out []string
	for _, p := range parts {
		var b strings.Builder
		dash := false
		for _, r := range p {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
				dash = false
			} else if !dash {
				b.WriteByte('-')
				dash = true
			}
		}
		s := strings.Trim(b.String(), "-")
		if s == "" {
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		out = []string{"x"}
	}
	rev := strings.ToLower(key)
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return "proctor-task/" + strings.Join(out, "/") + ":" + rev
}

// ImageKey returns the key of a task image build: the hex SHA-256 of
//
//	proctor image key v1 LF
//	revision <revision> LF
//	dockerfile <hex SHA-256 of the Dockerfile as built> LF
//	base <ref> <image id> LF        (one per base image, in order)
//
// so it covers everything the build used: the task's files (the revision),
// the Dockerfile after the image map's rewrites, and the image ids the base
// images resolved to on this engine. A run with another image map, or
// after a base image was re-tagged to another id, has another key and
// builds anew; it never reuses an image built from other bases.
func ImageKey(revision string, dockerfile []byte, bases []BaseImage) string {
	return BuildKey(BuildSpec{Revision: revision}, dockerfile, bases)
}

// BuildKey is ImageKey for the build b (its Revision), which may name
// another Dockerfile, build arguments and a target stage; each of those
// that is set adds a line after the bases, so a build without them has
// the key ImageKey gives:
//
//	dockerfile-path <path> LF
//	build-arg <name>=<value> LF      (one per argument, sorted by name)
//	target <stage> LF
func BuildKey(b BuildSpec, dockerfile []byte, bases []BaseImage) string {
	h := sha256.New()
	fmt.Fprintf(h, "proctor image key v1\nrevision %s\ndockerfile %x\n", b.Revision, sha256.Sum256(dockerfile))
	for _, base := range bases {
		fmt.Fprintf(h, "base %s %s\n", base.Ref, base.ID)
	}
	if b.Dockerfile != "" && b.Dockerfile != "Dockerfile" {
		fmt.Fprintf(h, "dockerfile-path %s\n", b.Dockerfile)
	}
	for _, k := range slices.Sorted(maps.Keys(b.BuildArgs)) {
		fmt.Fprintf(h, "build-arg %s=%s\n", k, b.BuildArgs[k])
	}
	if b.Target != "" {
		fmt.Fprintf(h, "target %s\n", b.Target)
	}
	return hex.EncodeToString(h.Sum(nil))
}

package sandbox

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
)

// BuildSpec describes the image of one task revision for EnsureImage.
type BuildSpec struct {
	// Task is the task name; it makes the repository part of the tag
	// (see ImageTag).
	Task string
	// Revision is the task revision (hex SHA-256); its first 12
	// characters make the tag.
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
}

// DefaultBuildTimeout bounds an image build or pull when BuildSpec.Timeout
// is 0.
const DefaultBuildTimeout = 30 * time.Minute

// ImageInfo describes an image EnsureImage made available.
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
	// Log is the last DefaultTailSize bytes of the build or pull log, as
	// valid UTF-8 ("" when cached).
	Log string `json:"log,omitempty"`
	// Duration is the time EnsureImage took.
	Duration time.Duration `json:"duration"`
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
	// Log is the tail of the build or pull log (valid UTF-8).
	Log string
	// Err is the underlying error, if any.
	Err error
}

func (e *BuildError) Error() string {
	what := "build"
	if e.Pull {
		what = "pull"
	}
	if e.TimedOut {
		return fmt.Sprintf("sandbox: %s of %s timed out: %s", what, e.Ref, e.Message)
	}
	return fmt.Sprintf("sandbox: %s of %s failed: %s", what, e.Ref, e.Message)
}

func (e *BuildError) Unwrap() error { return e.Err }

// ImageTag returns the tag of a task revision's built image:
// proctor-task/<name>:<revision[:12]>, where name is the task name
// lowercased with every run of characters other than [a-z0-9] replaced by
// "-" in each "/"-separated part (an empty part becomes "x").
func ImageTag(task, revision string) string {
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
	rev := strings.ToLower(revision)
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return "proctor-task/" + strings.Join(out, "/") + ":" + rev
}

// EnsureImage makes the image of a task revision available and returns its
// reference.
//
// With a Dockerfile in b.EnvironmentDir, the image is tagged
// ImageTag(b.Task, b.Revision) and built only when that tag does not exist
// yet (an existing tag costs one ImageInspect and is never rebuilt; builds
// of one tag are serialised, so concurrent cells of a task build once).
// The build context is the environment directory with its skills/
// replaced by an empty directory and its Dockerfile's FROM lines rewritten
// by the image map; the classic builder is used (no BuildKit session; a
// Dockerfile needing BuildKit features fails to build), base images are
// not pulled when present, .dockerignore is not applied. Without a
// Dockerfile, b.DockerImage (rewritten by the image map) is used, pulled
// only when missing.
//
// A failed or timed-out build or pull is a *BuildError carrying the log
// tail; a spec with neither a Dockerfile nor a docker_image wraps
// ErrInvalidSpec.
func (d *Docker) EnsureImage(ctx context.Context, b BuildSpec) (ImageInfo, error) {
	start := time.Now()
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultBuildTimeout
	}
	dockerfile := ""
	if b.EnvironmentDir != "" {
		p := filepath.Join(b.EnvironmentDir, "Dockerfile")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			dockerfile = p
		}
	}
	var info ImageInfo
	var err error
	switch {
	case dockerfile != "":
		if b.Revision == "" {
			return ImageInfo{}, fmt.Errorf("%w: task %s: empty revision", ErrInvalidSpec, b.Task)
		}
		info, err = d.buildImage(ctx, b, dockerfile, timeout)
	case b.DockerImage != "":
		info, err = d.pullImage(ctx, b, timeout)
	default:
		return ImageInfo{}, fmt.Errorf("%w: task %s: no environment/Dockerfile and no docker_image", ErrInvalidSpec, b.Task)
	}
	info.Duration = time.Since(start)
	return info, err
}

func (d *Docker) buildImage(ctx context.Context, b BuildSpec, dockerfile string, timeout time.Duration) (ImageInfo, error) {
	tag := ImageTag(b.Task, b.Revision)
	info := ImageInfo{Ref: tag, Source: "build"}
	unlock := d.builds.lock(tag)
	defer unlock()
	if found, err := d.cached(ctx, tag, &info); found || err != nil {
		return info, err
	}

	src, err := os.ReadFile(dockerfile)
	if err != nil {
		return info, fmt.Errorf("sandbox: %w", err)
	}
	rewritten, rw := d.imageMap.RewriteDockerfile(src)
	info.Rewrites = rw

	lbl := maps.Clone(b.Labels)
	if lbl == nil {
		lbl = map[string]string{}
	}
	lbl[LabelManaged] = "1"
	lbl[LabelTask] = b.Task
	lbl[LabelRevision] = b.Revision

	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeBuildContext(pw, b.EnvironmentDir, rewritten))
	}()
	defer pr.CloseWithError(io.ErrClosedPipe)
	tail := NewTail(0)
	var logw io.Writer = tail
	if b.Log != nil {
		logw = io.MultiWriter(tail, safeWriter{b.Log})
	}
	resp, err := d.cli.ImageBuild(bctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Labels:      lbl,
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return info, d.buildErr(bctx, tag, false, err.Error(), tail, err)
	}
	msg, err := readJSONMessages(resp.Body, logw)
	resp.Body.Close()
	info.Log = tail.String()
	if err != nil || msg != "" {
		if msg == "" {
			msg = err.Error()
		}
		return info, d.buildErr(bctx, tag, false, msg, tail, err)
	}
	if found, err := d.cached(ctx, tag, &info); !found {
		return info, &BuildError{Ref: tag, Message: fmt.Sprintf("image missing after build (%v)", err), Log: info.Log, Err: err}
	}
	info.Cached = false
	d.log.Debug("image built", "tag", tag, "id", short(info.ID))
	return info, nil
}

func (d *Docker) buildErr(ctx context.Context, ref string, pull bool, msg string, tail *Tail, err error) *BuildError {
	e := &BuildError{Ref: ref, Pull: pull, Message: strings.TrimSpace(msg), Log: tail.String(), Err: err}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e.TimedOut = true
		if e.Err == nil {
			e.Err = ctx.Err()
		}
	}
	return e
}

func (d *Docker) pullImage(ctx context.Context, b BuildSpec, timeout time.Duration) (ImageInfo, error) {
	ref := d.imageMap.RewriteRef(b.DockerImage)
	info := ImageInfo{Ref: ref, Source: "image"}
	if ref != b.DockerImage {
		info.Rewrites = []Rewrite{{From: b.DockerImage, To: ref}}
	}
	unlock := d.builds.lock(ref)
	defer unlock()
	if found, err := d.cached(ctx, ref, &info); found || err != nil {
		return info, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail := NewTail(0)
	var logw io.Writer = tail
	if b.Log != nil {
		logw = io.MultiWriter(tail, safeWriter{b.Log})
	}
	rc, err := d.cli.ImagePull(pctx, ref, image.PullOptions{})
	if err != nil {
		return info, d.buildErr(pctx, ref, true, err.Error(), tail, err)
	}
	msg, err := readJSONMessages(rc, logw)
	rc.Close()
	info.Log = tail.String()
	if err != nil || msg != "" {
		if msg == "" {
			msg = err.Error()
		}
		return info, d.buildErr(pctx, ref, true, msg, tail, err)
	}
	if found, err := d.cached(ctx, ref, &info); !found {
		return info, &BuildError{Ref: ref, Pull: true, Message: fmt.Sprintf("image missing after pull (%v)", err), Log: info.Log, Err: err}
	}
	info.Cached, info.Pulled = false, true
	return info, nil
}

// ImageWorkdir returns the WORKDIR of the local image ref, "" when unset
// (for the agent arms' refusal check, DESIGN §4). A missing image wraps
// ErrNotFound.
func (d *Docker) ImageWorkdir(ctx context.Context, ref string) (string, error) {
	ins, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: image %s", ErrNotFound, ref)
		}
		return "", fmt.Errorf("sandbox: inspect image %s: %w", ref, err)
	}
	if ins.Config == nil {
		return "", nil
	}
	return ins.Config.WorkingDir, nil
}

// jsonMessage is the subset of the engine's build/pull progress messages
// used here.
type jsonMessage struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	ID          string `json:"id"`
	Progress    string `json:"progress"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// readJSONMessages reads a build or pull progress stream, writes its text
// to w, and returns the engine's error message ("" when none) or a read
// error.
func readJSONMessages(r io.Reader, w io.Writer) (string, error) {
	dec := json.NewDecoder(r)
	for {
		var m jsonMessage
		if err := dec.Decode(&m); err == io.EOF {
			return "", nil
		} else if err != nil {
			return "", err
		}
		switch {
		case m.Error != "" || m.ErrorDetail != nil:
			msg := m.Error
			if msg == "" {
				msg = m.ErrorDetail.Message
			}
			_, _ = io.WriteString(w, msg+"\n")
			return msg, nil
		case m.Stream != "":
			_, _ = io.WriteString(w, m.Stream)
		case m.Status != "" && m.Progress == "":
			if m.ID != "" {
				_, _ = io.WriteString(w, m.ID+": ")
			}
			_, _ = io.WriteString(w, m.Status+"\n")
		}
	}
}

// writeBuildContext writes the build context tar of an environment
// directory: every file as it is, except the Dockerfile (replaced by
// dockerfile) and skills/ (replaced by an empty directory, as BenchFlow
// does, so an agent arm never finds the task's skills in the image).
func writeBuildContext(w io.Writer, dir string, dockerfile []byte) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		name := filepath.ToSlash(rel)
		fi, err := de.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !fi.Mode().IsRegular() && !fi.IsDir():
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if name == "Dockerfile" {
			hdr.Size = int64(len(dockerfile))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err := tw.Write(dockerfile)
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if name == "skills" && fi.IsDir() {
			return filepath.SkipDir
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// cached fills info from the local image ref when it exists (ID, Cached,
// Workdir) and reports whether it does.
func (d *Docker) cached(ctx context.Context, ref string, info *ImageInfo) (bool, error) {
	ins, err := d.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sandbox: inspect image %s: %w", ref, err)
	}
	info.ID, info.Cached = ins.ID, true
	if ins.Config != nil {
		info.Workdir = ins.Config.WorkingDir
	}
	return true, nil
}

// keyedMutex serialises work per key (one build per image tag).
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks key and returns its unlock function.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
)

// BuildSpec describes the image of one task revision for EnsureImage.
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
// own progress lines.
var buildNoise = []string{"Step ", " ---> ", "Removing intermediate container ", "Successfully built ", "Successfully tagged ", "Sending build context "}

// LastLogLines returns the last meaningful lines of a build or pull log
// (at most 5 lines and 1 KiB, each line at most 300 bytes): lines that are
// not blank, not the builder's own progress (`Step 2/3 : ...`,
// ` ---> Running in ...`) and not the final error message msg, which the
// log repeats. "" when there are none.
func LastLogLines(log, msg string) string {
	const maxLines, maxLine, maxBytes = 5, 300, 1024
	msg = strings.TrimSpace(msg)
	var keep []string
	size := 0
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0 && len(keep) < maxLines; i-- {
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
	h := sha256.New()
	fmt.Fprintf(h, "proctor image key v1\nrevision %s\ndockerfile %x\n", revision, sha256.Sum256(dockerfile))
	for _, b := range bases {
		fmt.Fprintf(h, "base %s %s\n", b.Ref, b.ID)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// EnsureImage makes the image of a task revision available and returns its
// reference.
//
// With a Dockerfile in b.EnvironmentDir, the Dockerfile's FROM lines are
// rewritten by the image map, its base images resolved to image ids
// (pulled first when missing), and the image tagged ImageTag(b.Task, key)
// with key = ImageKey(b.Revision, rewritten Dockerfile, bases); it is built
// only when that tag does not exist yet (an existing tag costs one
// ImageInspect per base and one for the tag, and is never rebuilt; builds
// of one tag are serialised, so concurrent cells of a task build once).
// The build context is the environment directory with its skills/
// replaced by an empty directory and the rewritten Dockerfile; the classic
// builder is used (plain-text output, no BuildKit session; a Dockerfile
// needing BuildKit features fails to build), .dockerignore is not applied.
// Without a Dockerfile, b.DockerImage (rewritten by the image map) is used,
// pulled only when missing.
//
// The log (b.Log, ImageInfo.Log, BuildError.Log) is plain text: terminal
// escape sequences are removed and a line redrawn with carriage returns
// keeps its last text.
//
// A failed or timed-out build or pull is a *BuildError carrying the log
// tail (the returned ImageInfo still has Ref, Rewrites and Bases); a spec
// with neither a Dockerfile nor a docker_image wraps ErrInvalidSpec.
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
	info := ImageInfo{Source: "build"}
	src, err := os.ReadFile(dockerfile)
	if err != nil {
		return info, fmt.Errorf("sandbox: %w", err)
	}
	rewritten, rw, bases := d.imageMap.scanDockerfile(src)
	info.Rewrites = rw

	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail := NewTail(0)
	var out io.Writer = tail
	if b.Log != nil {
		out = io.MultiWriter(tail, safeWriter{b.Log})
	}
	logw := newPlainWriter(out)
	defer logw.Flush()

	info.Bases = make([]BaseImage, 0, len(bases))
	for _, ref := range bases {
		id, err := d.resolveBase(bctx, ref, logw)
		if err != nil {
			logw.Flush()
			info.Log = tail.String()
			var be *BuildError
			if errors.As(err, &be) {
				be.Log = info.Log
			}
			return info, err
		}
		info.Bases = append(info.Bases, BaseImage{Ref: ref, ID: id})
	}
	info.Key = ImageKey(b.Revision, rewritten, info.Bases)
	tag := ImageTag(b.Task, info.Key)
	info.Ref = tag

	unlock := d.builds.lock(tag)
	defer unlock()
	if found, err := d.cached(ctx, tag, &info); found || err != nil {
		return info, err
	}

	lbl := maps.Clone(b.Labels)
	if lbl == nil {
		lbl = map[string]string{}
	}
	lbl[LabelManaged] = "1"
	lbl[LabelTask] = b.Task
	lbl[LabelRevision] = b.Revision
	lbl[LabelImageKey] = info.Key

	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeBuildContext(pw, b.EnvironmentDir, rewritten))
	}()
	defer pr.CloseWithError(io.ErrClosedPipe)
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
	logw.Flush()
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

// resolveBase returns the local image id of a base image, pulling it first
// when it is missing (as the builder would); "" for `scratch` and for a
// reference with a variable. A failed pull is a *BuildError (Pull set).
func (d *Docker) resolveBase(ctx context.Context, ref string, log io.Writer) (string, error) {
	if ref == "scratch" || strings.Contains(ref, "$") {
		return "", nil
	}
	unlock := d.builds.lock(ref)
	defer unlock()
	var info ImageInfo
	if found, err := d.cached(ctx, ref, &info); found || err != nil {
		return info.ID, err
	}
	rc, err := d.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return "", d.buildErr(ctx, ref, true, err.Error(), NewTail(0), err)
	}
	msg, err := readJSONMessages(rc, log)
	rc.Close()
	if err != nil || msg != "" {
		if msg == "" {
			msg = err.Error()
		}
		return "", d.buildErr(ctx, ref, true, msg, NewTail(0), err)
	}
	if found, err := d.cached(ctx, ref, &info); !found {
		return "", &BuildError{Ref: ref, Pull: true, Message: fmt.Sprintf("image missing after pull (%v)", err), Err: err}
	}
	return info.ID, nil
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
	ref, rule := d.imageMap.rewrite(b.DockerImage)
	info := ImageInfo{Ref: ref, Source: "image"}
	if ref != b.DockerImage {
		info.Rewrites = []Rewrite{{From: b.DockerImage, To: ref, Rule: rule}}
	}
	unlock := d.builds.lock(ref)
	defer unlock()
	if found, err := d.cached(ctx, ref, &info); found || err != nil {
		return info, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail := NewTail(0)
	var out io.Writer = tail
	if b.Log != nil {
		out = io.MultiWriter(tail, safeWriter{b.Log})
	}
	logw := newPlainWriter(out)
	defer logw.Flush()
	rc, err := d.cli.ImagePull(pctx, ref, image.PullOptions{})
	if err != nil {
		return info, d.buildErr(pctx, ref, true, err.Error(), tail, err)
	}
	msg, err := readJSONMessages(rc, logw)
	rc.Close()
	logw.Flush()
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

// plainWriter turns a build or pull log into plain text, line by line:
// terminal escape sequences (colours, cursor moves, titles) and other
// control characters but tabs are removed, and a line
// redrawn with carriage returns (a progress bar) keeps its last non-empty
// text, as a terminal would show it. A line longer than maxPlainLine is
// written in pieces. Flush writes a last unterminated line.
type plainWriter struct {
	w   io.Writer
	buf []byte
}

const maxPlainLine = 64 << 10

func newPlainWriter(w io.Writer) *plainWriter { return &plainWriter{w: w} }

func (p *plainWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.buf = append(p.buf, b...)
			if len(p.buf) >= maxPlainLine {
				p.emit(false)
			}
			break
		}
		p.buf = append(p.buf, b[:i]...)
		b = b[i+1:]
		p.emit(true)
	}
	return n, nil
}

// Flush writes the pending unterminated line, if any.
func (p *plainWriter) Flush() {
	if len(p.buf) > 0 {
		p.emit(false)
	}
}

func (p *plainWriter) emit(newline bool) {
	line := ansi.Strip(string(p.buf))
	p.buf = p.buf[:0]
	if strings.Contains(line, "\r") {
		parts := strings.Split(line, "\r")
		line = ""
		for i := len(parts) - 1; i >= 0; i-- {
			if strings.TrimSpace(parts[i]) != "" {
				line = parts[i]
				break
			}
		}
	}
	// Other control characters (a bell, a backspace) are dropped too.
	line = strings.Map(func(r rune) rune {
		if r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, line)
	if newline {
		line += "\n"
	}
	_, _ = io.WriteString(p.w, line)
}

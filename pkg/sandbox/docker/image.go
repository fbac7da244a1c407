package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// EnsureImage makes the image of a task revision available and returns its
// reference.
//
// With a Dockerfile in b.EnvironmentDir (b.DockerfilePath(), another name
// or a subdirectory as compose's build.dockerfile names it; built with
// b.BuildArgs and up to b.Target), the Dockerfile's FROM lines are
// rewritten by the image map (variables expanded with the build
// arguments; the stages after the target left alone), its base images
// resolved to image ids (pulled first when missing), and the image tagged
// ImageTag(b.Task, key) with key = BuildKey(b, rewritten Dockerfile,
// bases); it is built
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
func (d *Driver) EnsureImage(ctx context.Context, b sandbox.BuildSpec) (sandbox.ImageInfo, error) {
	start := time.Now()
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = sandbox.DefaultBuildTimeout
	}
	dockerfile := ""
	if b.EnvironmentDir != "" {
		rel := filepath.FromSlash(b.DockerfilePath())
		if !filepath.IsLocal(rel) {
			return sandbox.ImageInfo{}, fmt.Errorf("%w: task %s: Dockerfile %s is outside the build context", sandbox.ErrInvalidSpec, b.Task, b.Dockerfile)
		}
		p := filepath.Join(b.EnvironmentDir, rel)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			dockerfile = p
		} else if b.Dockerfile != "" {
			return sandbox.ImageInfo{}, fmt.Errorf("%w: task %s: no Dockerfile %s in %s", sandbox.ErrInvalidSpec, b.Task, b.Dockerfile, b.EnvironmentDir)
		}
	}
	var info sandbox.ImageInfo
	var err error
	switch {
	case dockerfile != "":
		if b.Revision == "" {
			return sandbox.ImageInfo{}, fmt.Errorf("%w: task %s: empty revision", sandbox.ErrInvalidSpec, b.Task)
		}
		info, err = d.buildImage(ctx, b, dockerfile, timeout)
	case b.DockerImage != "":
		info, err = d.pullImage(ctx, b, timeout)
	default:
		return sandbox.ImageInfo{}, fmt.Errorf("%w: task %s: no environment/Dockerfile and no docker_image", sandbox.ErrInvalidSpec, b.Task)
	}
	info.Duration = time.Since(start)
	return info, err
}

func (d *Driver) buildImage(ctx context.Context, b sandbox.BuildSpec, dockerfile string, timeout time.Duration) (sandbox.ImageInfo, error) {
	info := sandbox.ImageInfo{Source: "build"}
	src, err := os.ReadFile(dockerfile)
	if err != nil {
		return info, fmt.Errorf("sandbox: %w", err)
	}
	rewritten, rw, bases := d.imageMap.ScanBuild(src, b.BuildArgs, b.Target)
	info.Rewrites = rw

	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail, logw := d.buildLog(b)
	defer logw.Flush()

	info.Bases = make([]sandbox.BaseImage, 0, len(bases))
	for _, ref := range bases {
		id, err := d.resolveBase(bctx, ref, logw)
		if err != nil {
			logw.Flush()
			info.Log = tail.String()
			var be *sandbox.BuildError
			if errors.As(err, &be) {
				be.Log = info.Log
			}
			return info, err
		}
		info.Bases = append(info.Bases, sandbox.BaseImage{Ref: ref, ID: id})
	}
	info.Key = sandbox.BuildKey(b, rewritten, info.Bases)
	tag := sandbox.ImageTag(b.Task, info.Key)
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
	lbl[sandbox.LabelManaged] = "1"
	lbl[sandbox.LabelTask] = b.Task
	lbl[sandbox.LabelRevision] = b.Revision
	lbl[sandbox.LabelImageKey] = info.Key

	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeBuildContext(pw, b.EnvironmentDir, b.DockerfilePath(), rewritten))
	}()
	defer pr.CloseWithError(io.ErrClosedPipe)
	// The build's proxy variables, then the task's own build arguments
	// (compose's build.args) over them.
	args := buildArgs(d.buildProxy)
	for k, v := range b.BuildArgs {
		if args == nil {
			args = map[string]*string{}
		}
		args[k] = &v
	}
	resp, err := d.cli.ImageBuild(bctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  b.DockerfilePath(),
		BuildArgs:   args,
		Target:      b.Target,
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
		return info, &sandbox.BuildError{Ref: tag, Message: fmt.Sprintf("image missing after build (%v)", err), Log: info.Log, Err: err}
	}
	info.Cached = false
	d.log.Debug("image built", "tag", tag, "id", short(info.ID))
	return info, nil
}

// resolveBase returns the local image id of a base image, pulling it first
// when it is missing (as the builder would); "" for `scratch` and for a
// reference with a variable. A failed pull is a *BuildError (Pull set).
func (d *Driver) resolveBase(ctx context.Context, ref string, log io.Writer) (string, error) {
	if ref == "scratch" || strings.Contains(ref, "$") {
		return "", nil
	}
	unlock := d.builds.lock(ref)
	defer unlock()
	var info sandbox.ImageInfo
	if found, err := d.cached(ctx, ref, &info); found || err != nil {
		return info.ID, err
	}
	rc, err := d.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return "", d.buildErr(ctx, ref, true, err.Error(), sandbox.NewTail(0), err)
	}
	msg, err := readJSONMessages(rc, log)
	rc.Close()
	if err != nil || msg != "" {
		if msg == "" {
			msg = err.Error()
		}
		return "", d.buildErr(ctx, ref, true, msg, sandbox.NewTail(0), err)
	}
	if found, err := d.cached(ctx, ref, &info); !found {
		return "", &sandbox.BuildError{Ref: ref, Pull: true, Message: fmt.Sprintf("image missing after pull (%v)", err), Err: err}
	}
	return info.ID, nil
}

func (d *Driver) buildErr(ctx context.Context, ref string, pull bool, msg string, tail *sandbox.Tail, err error) *sandbox.BuildError {
	if sc := scrubber(secretsOf(d.buildProxy)); sc != nil {
		msg = sc.Replace(msg)
		if err != nil && sc.Replace(err.Error()) != err.Error() {
			err = errors.New(sc.Replace(err.Error()))
		}
	}
	e := &sandbox.BuildError{Ref: ref, Pull: pull, Message: strings.TrimSpace(msg), Log: tail.String(), Err: err}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e.TimedOut = true
		if e.Err == nil {
			e.Err = ctx.Err()
		}
	}
	return e
}

func (d *Driver) pullImage(ctx context.Context, b sandbox.BuildSpec, timeout time.Duration) (sandbox.ImageInfo, error) {
	ref, rule := d.imageMap.RewriteRefRule(b.DockerImage)
	info := sandbox.ImageInfo{Ref: ref, Source: "image"}
	if ref != b.DockerImage {
		info.Rewrites = []sandbox.Rewrite{{From: b.DockerImage, To: ref, Rule: rule}}
	}
	unlock := d.builds.lock(ref)
	defer unlock()
	if found, err := d.cached(ctx, ref, &info); found || err != nil {
		return info, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail, logw := d.buildLog(b)
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
		return info, &sandbox.BuildError{Ref: ref, Pull: true, Message: fmt.Sprintf("image missing after pull (%v)", err), Log: info.Log, Err: err}
	}
	info.Cached, info.Pulled = false, true
	return info, nil
}

// ImageWorkdir returns the WORKDIR of the local image ref, "" when unset
// (for the agent arms' refusal check, DESIGN §4). A missing image wraps
// ErrNotFound.
func (d *Driver) ImageWorkdir(ctx context.Context, ref string) (string, error) {
	ins, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("%w: image %s", sandbox.ErrNotFound, ref)
		}
		return "", fmt.Errorf("sandbox: inspect image %s: %w", ref, err)
	}
	if ins.Config == nil {
		return "", nil
	}
	return ins.Config.WorkingDir, nil
}

// ImageEnv returns the image's ENV as KEY=VALUE pairs, as the engine
// records them (nil when the image sets none). A missing image wraps
// sandbox.ErrNotFound.
func (d *Driver) ImageEnv(ctx context.Context, ref string) ([]string, error) {
	ins, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: image %s", sandbox.ErrNotFound, ref)
		}
		return nil, fmt.Errorf("sandbox: inspect image %s: %w", ref, err)
	}
	if ins.Config == nil {
		return nil, nil
	}
	return ins.Config.Env, nil
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
// directory: every file as it is, except the Dockerfile at dfPath (a
// slash-separated path relative to dir, replaced by dockerfile) and
// skills/ (replaced by an empty directory, as BenchFlow does, so an agent
// arm never finds the task's skills in the image).
func writeBuildContext(w io.Writer, dir, dfPath string, dockerfile []byte) error {
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
		if name == dfPath {
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
// Workdir, User) and reports whether it does.
func (d *Driver) cached(ctx context.Context, ref string, info *sandbox.ImageInfo) (bool, error) {
	ins, err := d.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sandbox: inspect image %s: %w", ref, err)
	}
	info.ID, info.Cached = ins.ID, true
	if ins.Config != nil {
		info.Workdir, info.User = ins.Config.WorkingDir, ins.Config.User
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
	// scrub, when set, replaces the build proxy's credentials.
	scrub *strings.Replacer
}

const maxPlainLine = 64 << 10

func newPlainWriter(w io.Writer) *plainWriter { return &plainWriter{w: w} }

// secretsOf returns the user names and passwords of the proxy URLs in m,
// which a build log must not show.
func secretsOf(m map[string]string) []string {
	var out []string
	for _, v := range m {
		raw := v
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw, url.QueryEscape(pw))
		}
		if n := u.User.Username(); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// scrubber replaces each secret with "REDACTED"; nil when there is none.
func scrubber(secrets []string) *strings.Replacer {
	if len(secrets) == 0 {
		return nil
	}
	var pairs []string
	for _, s := range secrets {
		pairs = append(pairs, s, "REDACTED")
	}
	return strings.NewReplacer(pairs...)
}

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
	if p.scrub != nil {
		line = p.scrub.Replace(line)
	}
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

// buildLog is where a build's or pull's output goes: a tail kept for the
// error text and, when b.Log is set, that log, both through the writer
// that strips terminal escape sequences (flush it when done).
func (d *Driver) buildLog(b sandbox.BuildSpec) (*sandbox.Tail, *plainWriter) {
	tail := sandbox.NewTail(0)
	var out io.Writer = tail
	if b.Log != nil {
		out = io.MultiWriter(tail, safeWriter{w: b.Log})
	}
	w := newPlainWriter(out)
	w.scrub = scrubber(secretsOf(d.buildProxy))
	return tail, w
}

// buildArgs turns the build's proxy variables into build arguments. The
// builder treats HTTP_PROXY, HTTPS_PROXY, FTP_PROXY, ALL_PROXY, NO_PROXY
// (both cases) as predefined arguments: a Dockerfile's RUN sees them
// without declaring them, and they stay out of `docker history` and of the
// build cache's key.
func buildArgs(m map[string]string) map[string]*string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}

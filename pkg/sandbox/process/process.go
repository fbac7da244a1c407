// Package process is the sandbox driver that runs each sandbox as a temp
// work tree on the host and its commands as host process groups (DESIGN
// §4). It isolates nothing from a hostile agent; it serves command
// harnesses (Driver.Host) and tests without a container engine. Its
// conformance run is TestConformance (package sandbox/sandboxtest).
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Driver is the sandbox.Driver that runs commands on the host (DESIGN
// §4): each sandbox is a fresh temp work tree outside any checkout, HOME
// points at an empty scratch dir inside it, the environment is an
// allowlist (EnvAllowlist, then Spec.Env as kept in Handle.Env, then
// ExecSpec.Env), stdin is closed and every command runs in its own
// process group.
//
// Sandbox paths (Spec.Workdir, ExecSpec.Workdir, CopyIn's sandboxDir,
// CopyOut's sandboxPath) are taken inside the work tree: "/app" and "app"
// both mean <root>/app. Handle.State["root"] is the tree's host path.
//
// Unlike Docker, a Process sandbox does not let a command's background
// processes outlive it: when the command's main process exits, whatever
// is left in its process group is killed (SIGKILL), and its output is no
// longer read. A process that leaves the group (setsid) escapes this; its
// output is drained for at most DrainTimeout after the main process exits.
//
// The zero value is ready to use and safe for concurrent use.
type Driver struct {
	// BaseDir is where temp work trees are made; "" means os.TempDir().
	BaseDir string
	// Host runs commands in the caller's own world instead of a closed
	// one: the whole environment of proctor (HOME included) instead of the
	// allowlist, and an absolute workdir is a host path, not a path in the
	// work tree. It is for command:<template> harnesses, which wrap host
	// tools and are run "in the tasks root's parent directory with the
	// caller's environment" (DESIGN §5). Process groups, timeouts and the
	// kill of what a command leaves behind are the same.
	Host bool
	// Prefix names the temp work trees: <BaseDir>/<Prefix>*; "" means
	// "proctor-sbx-". The host agent arms use "proctor-run-".
	Prefix string
	// Cgroup puts every command of a sandbox in a cgroup v2 of its own
	// (made by Start under proctor's own cgroup, when the unified
	// hierarchy is mounted and writable; Handle.State["cgroup"] is its
	// path, absent when none could be made): KillAll then reaches a
	// process that left its process group (setsid), and Destroy removes
	// the cgroup.
	Cgroup bool
}

var _ sandbox.Driver = (*Driver)(nil)

// EnvAllowlist names the host environment variables a process-driver
// command inherits (when set on the host). HOME is always the sandbox's
// scratch dir.
var EnvAllowlist = []string{"PATH", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// Start implements Driver: it creates the work tree <BaseDir>/proctor-sbx-*
// with home/ (HOME) and the workdir, and records them in Handle.State
// ("root", "home", "workdir") and Handle.ID (the root).
func (p *Driver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(spec.Services) > 0 {
		return nil, fmt.Errorf("%w: a host process cannot run compose services (Spec.Services)", sandbox.ErrInvalidSpec)
	}
	if spec.Egress != nil {
		return nil, fmt.Errorf("%w: a host process cannot be put behind an egress proxy (Spec.Egress)", sandbox.ErrInvalidSpec)
	}
	prefix := p.Prefix
	if prefix == "" {
		prefix = "proctor-sbx-"
	}
	root, err := os.MkdirTemp(p.BaseDir, prefix)
	if err != nil {
		return nil, fmt.Errorf("sandbox: process: work tree: %w", err)
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("sandbox: process: work tree: %w", err)
	}
	home := filepath.Join(root, "home")
	wd := inTree(root, spec.Workdir)
	for _, d := range []string{home, wd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("sandbox: process: %w", err)
		}
	}
	st := map[string]string{"root": root, "home": home, "workdir": wd}
	if spec.RunID != "" {
		st["run"] = spec.RunID
	}
	if spec.CellID != "" {
		st["cell"] = spec.CellID
	}
	if p.Cgroup {
		if cg, err := makeCgroup(filepath.Base(root)); err == nil {
			st["cgroup"] = cg
		}
	}
	return &sandbox.Handle{Driver: sandbox.DriverProcess, ID: root, State: st, Env: maps.Clone(spec.Env)}, nil
}

// inTree maps a sandbox path into the work tree at root.
func inTree(root, p string) string {
	return filepath.Join(root, filepath.Clean("/"+p))
}

// HostPath returns the host path of the sandbox path p inside the work tree
// of a process sandbox ("/app" and "app" are <root>/app).
func (p *Driver) HostPath(h *sandbox.Handle, sandboxPath string) (string, error) {
	root, err := p.root(h)
	if err != nil {
		return "", err
	}
	return inTree(root, sandboxPath), nil
}

func (p *Driver) root(h *sandbox.Handle) (string, error) {
	root := state(h, "root")
	if root == "" {
		return "", fmt.Errorf("%w: process handle without a work tree", sandbox.ErrInvalidSpec)
	}
	if _, err := os.Stat(root); err != nil {
		return "", sandbox.ErrDestroyed
	}
	return root, nil
}

// env builds a command's environment: the allowlist, HOME, then the
// sandbox's Env, then the command's Env.
func (p *Driver) env(h *sandbox.Handle, extra map[string]string) []string {
	m := map[string]string{}
	if p.Host {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			}
		}
	} else {
		for _, k := range EnvAllowlist {
			if v, ok := os.LookupEnv(k); ok {
				m[k] = v
			}
		}
		m["HOME"] = state(h, "home")
	}
	for k, v := range h.Env {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Exec implements Driver. The command runs in its own process group with
// stdin on /dev/null. Its output goes through pipes this driver reads, so
// a grandchild holding a pipe open never blocks Exec: when the main process
// exits, the group is killed and the pipes are drained for at most
// DrainTimeout. At the timeout (or when ctx ends) the group gets SIGTERM,
// then SIGKILL after spec.Grace (at once when the main process is gone and
// when Grace is 0).
func (p *Driver) Exec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
	if len(spec.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	cred, err := credential(spec.User)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	root, err := p.root(h)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	wd := state(h, "workdir")
	switch {
	case p.Host && filepath.IsAbs(spec.Workdir):
		wd = spec.Workdir
	case spec.Workdir != "":
		wd = inTree(root, spec.Workdir)
	}
	if wd == "" {
		wd = root
	}

	cmd := exec.Command(spec.Cmd[0], spec.Cmd[1:]...)
	cmd.Dir = wd
	cmd.Env = p.env(h, spec.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if cg := state(h, "cgroup"); cg != "" {
		fd, err := os.Open(cg)
		if err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("sandbox: process: the sandbox's cgroup: %w", err)
		}
		defer fd.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
	}
	// Look the command up in the sandbox's PATH, not proctor's.
	if !strings.Contains(spec.Cmd[0], "/") {
		if path, ok := lookPathIn(spec.Cmd[0], cmd.Env); ok {
			cmd.Path = path
			cmd.Err = nil
		}
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("sandbox: process: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return sandbox.ExecResult{}, fmt.Errorf("sandbox: process: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	start := time.Now()
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return sandbox.ExecResult{}, fmt.Errorf("sandbox: process: start %q: %w", spec.Cmd[0], err)
	}
	outW.Close()
	errW.Close()
	pgid := cmd.Process.Pid

	var copies sync.WaitGroup
	copies.Add(2)
	go copyOut(&copies, spec.Stdout, outR)
	go copyOut(&copies, spec.Stderr, errR)

	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()

	var deadline <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	timedOut := false
	select {
	case <-waited:
	case <-deadline:
		timedOut = true
	case <-ctx.Done():
		timedOut = true
	}
	if timedOut {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		if spec.Grace > 0 {
			g := time.NewTimer(spec.Grace)
			select {
			case <-waited:
			case <-g.C:
			}
			g.Stop()
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-waited
	}
	// Kill whatever the command left in its group; a process holding the
	// pipes dies with it and the pipes reach EOF.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)

	drained := make(chan struct{})
	go func() {
		copies.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(sandbox.DrainTimeout):
		// Something outside the group holds a pipe: stop reading.
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()

	res := sandbox.ExecResult{Duration: time.Since(start)}
	switch {
	case timedOut:
		res.ExitCode, res.TimedOut = sandbox.TimeoutExitCode, true
	default:
		res.ExitCode = exitCode(cmd.ProcessState)
	}
	return res, nil
}

// exitCode returns a process's exit status, 128+N when killed by signal N.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// copyOut copies r to w (io.Discard when nil) until EOF or a read error
// (the pipe closed by Exec). A failing writer does not stop the draining.
func copyOut(wg *sync.WaitGroup, w io.Writer, r io.Reader) {
	defer wg.Done()
	if w == nil {
		w = io.Discard
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				w = io.Discard
			}
		}
		if err != nil {
			return
		}
	}
}

// lookPathIn finds an executable named file in the PATH of env.
func lookPathIn(file string, env []string) (string, bool) {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// CopyIn implements Driver: a directory's contents are copied into
// sandboxDir (inside the work tree), a file into sandboxDir under its base
// name. Modes are kept; symlinks are copied as symlinks.
func (p *Driver) CopyIn(ctx context.Context, h *sandbox.Handle, hostPath, sandboxDir string) error {
	root, err := p.root(h)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(hostPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, hostPath)
	} else if err != nil {
		return fmt.Errorf("sandbox: copy in: %w", err)
	}
	dst := inTree(root, sandboxDir)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("sandbox: copy in: %w", err)
	}
	if fi.IsDir() {
		return copyTree(ctx, hostPath, dst, false)
	}
	return copyTree(ctx, hostPath, filepath.Join(dst, filepath.Base(hostPath)), false)
}

// CopyOut implements Driver: sandboxPath (inside the work tree) is copied
// into hostDir under its base name.
func (p *Driver) CopyOut(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string) error {
	root, err := p.root(h)
	if err != nil {
		return err
	}
	src := inTree(root, sandboxPath)
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
	} else if err != nil {
		return fmt.Errorf("sandbox: copy out: %w", err)
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return fmt.Errorf("sandbox: copy out: %w", err)
	}
	name := filepath.Base(src)
	if src == root {
		name = "root"
	}
	return copyTree(ctx, src, filepath.Join(hostDir, name), true)
}

// copyTree copies the file, symlink or directory src to dst (a directory
// src merges into an existing dst), keeping permission bits. The mode of
// dst itself is set from src only when rootMode is true.
func copyTree(ctx context.Context, src, dst string, rootMode bool) error {
	// Directory modes are set after their contents are written, deepest
	// first, so a read-only source dir still gets its files.
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	defer func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Chmod(dirs[i].path, dirs[i].mode)
		}
	}()
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("sandbox: copy: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("sandbox: copy: %w", err)
		}
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return fmt.Errorf("sandbox: copy: %w", err)
			}
			if rel != "." || rootMode {
				dirs = append(dirs, dirMode{target, info.Mode().Perm()})
			}
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return fmt.Errorf("sandbox: copy: %w", err)
			}
			_ = os.Remove(target)
			if err := os.Symlink(link, target); err != nil {
				return fmt.Errorf("sandbox: copy: %w", err)
			}
			return nil
		case d.Type().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return nil // sockets, devices, fifos are not copied
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("sandbox: copy: %w", err)
	}
	defer in.Close()
	_ = os.Remove(dst)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("sandbox: copy: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("sandbox: copy: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("sandbox: copy: %w", err)
	}
	return os.Chmod(dst, perm)
}

// Destroy implements Driver: it kills what is left in the sandbox's
// cgroup, removes the cgroup and the work tree. Idempotent.
func (p *Driver) Destroy(ctx context.Context, h *sandbox.Handle) error {
	if cg := state(h, "cgroup"); cg != "" {
		if err := killCgroup(ctx, cg); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sandbox: process: destroy: %w", err)
		}
		if err := os.Remove(cg); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sandbox: process: destroy: remove %s: %w", cg, err)
		}
	}
	root := state(h, "root")
	if root == "" {
		return nil
	}
	// Make every dir writable so RemoveAll can empty read-only dirs a
	// command created.
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("sandbox: process: destroy %s: %w", root, err)
	}
	return nil
}

// state returns h.State[key], "" for a nil Handle or State.
func state(h *sandbox.Handle, key string) string {
	if h == nil {
		return ""
	}
	return h.State[key]
}

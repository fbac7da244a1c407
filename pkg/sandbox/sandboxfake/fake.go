// Package sandboxfake is a scripted sandbox.Driver for tests that must not
// need a container engine: every command a test expects is given a Script
// (exit code, output, a timeout, files it leaves behind), matched by a
// substring of its argv. It has every optional ability of
// sandbox/abilities.go, each of which can be switched off, and records
// every call so a test can assert what a harness or service did. It runs
// nothing: a harness conformance test checks the harness's decisions, the
// sandbox conformance suite checks the real drivers.
package sandboxfake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Script is what one command does.
type Script struct {
	// Match is a substring of the command's argv joined by spaces; ""
	// matches every command.
	Match string
	// Exit is the exit code (ignored when TimedOut).
	Exit int
	// Stdout and Stderr are written to the ExecSpec's writers.
	Stdout, Stderr string
	// TimedOut ends the command at its timeout: exit 124, Duration the
	// ExecSpec's Timeout.
	TimedOut bool
	// Duration is the reported run time when not TimedOut.
	Duration time.Duration
	// Err is returned by Exec (the sandbox could not run the command).
	Err error
	// Files are sandbox files the command leaves (absolute path → result
	// of reading it): CopyOutFiles and ReadFile see them afterwards.
	Files map[string]sandbox.FileResult
	// Do runs on the host when the command runs (a host command writing
	// its {output_dir}, say); its error is returned by Exec.
	Do func(spec sandbox.ExecSpec) error
}

// Exec is one recorded Exec call.
type Exec struct {
	Spec   sandbox.ExecSpec
	Script *Script // nil: no script matched (exit 0, no output)
}

// Driver is the scripted fake. Set its fields before use; its methods are
// safe for concurrent use.
type Driver struct {
	// Scripts are tried in order; the first that matches a command runs.
	Scripts []Script
	// Files are sandbox files present from the start.
	Files map[string]sandbox.FileResult
	// Image is what EnsureImage returns (Ref defaults to
	// "fake/<task>:latest", Workdir to /app); BuildErr makes it fail.
	Image    sandbox.ImageInfo
	BuildErr error
	// StartErr makes Start fail; DerivedErr EnsureDerived (after setup ran
	// when it is nil).
	StartErr, DerivedErr error
	// Alive is what Freeze reports; FreezeErr makes it fail.
	Alive     int
	FreezeErr error
	// OOM is the sequence of OOMKills answers (the last repeats); empty: 0.
	OOM []int64
	// Limits are put on every Handle. Plain wraps a Driver without any of
	// the optional abilities.
	Limits sandbox.Limits

	mu        sync.Mutex
	execs     []Exec
	started   []sandbox.Spec
	destroyed []string
	copiedIn  [][2]string
	connected int
	moves     []string
	frozen    int
	killed    []string
	derived   []string
	oomCalls  int
	files     map[string]sandbox.FileResult
	n         int
}

// Start records spec and returns a handle "fake-<n>".
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.StartErr != nil {
		return nil, d.StartErr
	}
	d.n++
	d.started = append(d.started, spec)
	return &sandbox.Handle{Driver: "fake", ID: fmt.Sprintf("fake-%d", d.n), State: map[string]string{"cell": spec.CellID}, Limits: d.Limits}, nil
}

// Exec runs the first matching script.
func (d *Driver) Exec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
	if len(spec.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	line := strings.Join(spec.Cmd, " ")
	d.mu.Lock()
	var sc *Script
	for i := range d.Scripts {
		if strings.Contains(line, d.Scripts[i].Match) {
			sc = &d.Scripts[i]
			break
		}
	}
	d.execs = append(d.execs, Exec{Spec: spec, Script: sc})
	if sc != nil {
		for p, f := range sc.Files {
			if d.files == nil {
				d.files = map[string]sandbox.FileResult{}
			}
			d.files[p] = f
		}
	}
	d.mu.Unlock()
	if sc == nil {
		return sandbox.ExecResult{}, nil
	}
	if sc.Do != nil {
		if err := sc.Do(spec); err != nil {
			return sandbox.ExecResult{}, err
		}
	}
	if sc.Err != nil {
		return sandbox.ExecResult{}, sc.Err
	}
	write(spec.Stdout, sc.Stdout)
	write(spec.Stderr, sc.Stderr)
	if sc.TimedOut || ctx.Err() != nil {
		return sandbox.ExecResult{ExitCode: sandbox.TimeoutExitCode, TimedOut: true, Duration: spec.Timeout}, nil
	}
	return sandbox.ExecResult{ExitCode: sc.Exit, Duration: sc.Duration}, nil
}

func write(w io.Writer, s string) {
	if w != nil && s != "" {
		_, _ = io.Copy(w, bytes.NewBufferString(s))
	}
}

// CopyIn records the copy; a missing host path is sandbox.ErrNotFound.
func (d *Driver) CopyIn(ctx context.Context, h *sandbox.Handle, hostPath, sandboxDir string) error {
	if _, err := os.Lstat(hostPath); err != nil {
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, hostPath)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.copiedIn = append(d.copiedIn, [2]string{hostPath, sandboxDir})
	return nil
}

// CopyOut writes the regular files under sandboxPath into hostDir under
// the path's base name; nothing there is sandbox.ErrNotFound.
func (d *Driver) CopyOut(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string) error {
	_, err := d.CopyOutFiles(ctx, h, sandboxPath, hostDir, nil)
	return err
}

// CopyOutFiles is CopyOut returning the files named in files (their caps
// are applied as sandbox.ErrTooLarge).
func (d *Driver) CopyOutFiles(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string, files map[string]int64) (map[string]sandbox.FileResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	all := d.all()
	prefix := strings.TrimSuffix(sandboxPath, "/") + "/"
	found := false
	got := map[string]sandbox.FileResult{}
	for p, f := range all {
		if p != sandboxPath && !strings.HasPrefix(p, prefix) {
			continue
		}
		found = true
		if f.Err == nil {
			dst := filepath.Join(hostDir, filepath.Base(sandboxPath), strings.TrimPrefix(p, prefix))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(dst, f.Data, 0o644); err != nil {
				return nil, err
			}
		}
		if max, ok := files[p]; ok {
			if f.Err == nil && int64(len(f.Data)) > max {
				f = sandbox.FileResult{Err: fmt.Errorf("%w: %s", sandbox.ErrTooLarge, p)}
			}
			got[p] = f
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
	}
	return got, nil
}

// ReadFile returns a file of Files or of a script that ran.
func (d *Driver) ReadFile(ctx context.Context, h *sandbox.Handle, sandboxPath string, maxBytes int64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.all()[sandboxPath]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
	case f.Err != nil:
		return nil, f.Err
	case int64(len(f.Data)) > maxBytes:
		return nil, fmt.Errorf("%w: %s", sandbox.ErrTooLarge, sandboxPath)
	}
	return f.Data, nil
}

func (d *Driver) all() map[string]sandbox.FileResult {
	m := map[string]sandbox.FileResult{}
	for p, f := range d.Files {
		m[p] = f
	}
	for p, f := range d.files {
		m[p] = f
	}
	return m
}

// Destroy records the handle; it is idempotent.
func (d *Driver) Destroy(ctx context.Context, h *sandbox.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.destroyed = append(d.destroyed, h.ID)
	return nil
}

// EnsureImage returns Image, or BuildErr.
func (d *Driver) EnsureImage(ctx context.Context, b sandbox.BuildSpec) (sandbox.ImageInfo, error) {
	if b.Log != nil {
		fmt.Fprintf(b.Log, "fake build of %s\n", b.Task)
	}
	img := d.Image
	if img.Ref == "" {
		img.Ref = "fake/" + b.Task + ":latest"
	}
	if img.Workdir == "" {
		img.Workdir = "/app"
	}
	if img.ID == "" {
		img.ID = "sha256:0123456789abcdef0123"
	}
	if d.BuildErr != nil {
		return sandbox.ImageInfo{}, d.BuildErr
	}
	return img, nil
}

// EnsureDerived runs setup in a fake sandbox of spec and records ref.
func (d *Driver) EnsureDerived(ctx context.Context, ref string, spec sandbox.Spec, setup func(context.Context, *sandbox.Handle) error) (bool, error) {
	if d.DerivedErr != nil {
		return false, d.DerivedErr
	}
	h, err := d.Start(ctx, spec)
	if err != nil {
		return false, err
	}
	defer d.Destroy(ctx, h)
	if err := setup(ctx, h); err != nil {
		return false, err
	}
	d.mu.Lock()
	d.derived = append(d.derived, ref)
	d.mu.Unlock()
	return true, nil
}

// ConnectBridge records the join.
func (d *Driver) ConnectBridge(ctx context.Context, h *sandbox.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.connected++
	return nil
}

// Freeze returns Alive, or FreezeErr.
func (d *Driver) Freeze(ctx context.Context, h *sandbox.Handle) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frozen++
	return d.Alive, d.FreezeErr
}

// KillAll records the user.
func (d *Driver) KillAll(ctx context.Context, h *sandbox.Handle, user string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.killed = append(d.killed, user)
	return nil
}

// OOMKills answers from OOM in turn.
func (d *Driver) OOMKills(ctx context.Context, h *sandbox.Handle) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := d.oomCalls
	d.oomCalls++
	switch {
	case len(d.OOM) == 0:
		return 0, nil
	case i >= len(d.OOM):
		return d.OOM[len(d.OOM)-1], nil
	}
	return d.OOM[i], nil
}

// Execs returns the recorded Exec calls in order.
func (d *Driver) Execs() []Exec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Exec(nil), d.execs...)
}

// Started returns the specs of the sandboxes started.
func (d *Driver) Started() []sandbox.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]sandbox.Spec(nil), d.started...)
}

// Destroyed returns the ids of the sandboxes destroyed.
func (d *Driver) Destroyed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.destroyed...)
}

// CopiedIn returns the (host path, sandbox dir) pairs copied in.
func (d *Driver) CopiedIn() [][2]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][2]string(nil), d.copiedIn...)
}

// MoveNetwork records the move; a move to the bridge counts as a join
// (Counts).
func (d *Driver) MoveNetwork(ctx context.Context, h *sandbox.Handle, mode string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.moves = append(d.moves, mode)
	if mode == sandbox.NetworkBridge {
		d.connected++
	}
	return nil
}

// Moves returns the network modes MoveNetwork was asked for, in order.
func (d *Driver) Moves() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.moves...)
}

// Counts returns how often ConnectBridge and Freeze were called, the users
// KillAll was called for and the derived images made.
func (d *Driver) Counts() (connected, frozen int, killed, derived []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.connected, d.frozen, append([]string(nil), d.killed...), append([]string(nil), d.derived...)
}

// Plain is a sandbox.Driver with none of the optional abilities: the
// core five methods of d only.
type Plain struct{ D *Driver }

func (p Plain) Start(ctx context.Context, s sandbox.Spec) (*sandbox.Handle, error) {
	return p.D.Start(ctx, s)
}
func (p Plain) Exec(ctx context.Context, h *sandbox.Handle, s sandbox.ExecSpec) (sandbox.ExecResult, error) {
	return p.D.Exec(ctx, h, s)
}
func (p Plain) CopyIn(ctx context.Context, h *sandbox.Handle, a, b string) error {
	return p.D.CopyIn(ctx, h, a, b)
}
func (p Plain) CopyOut(ctx context.Context, h *sandbox.Handle, a, b string) error {
	return p.D.CopyOut(ctx, h, a, b)
}
func (p Plain) Destroy(ctx context.Context, h *sandbox.Handle) error { return p.D.Destroy(ctx, h) }

// Symlink is the FileResult a sandbox file that is a symlink reads as
// (what the Docker driver reports: sandbox.ErrNotRegular).
func Symlink(path, target string) sandbox.FileResult {
	return sandbox.FileResult{Err: fmt.Errorf("%w: %s is a symlink to %q", sandbox.ErrNotRegular, path, target)}
}

// Regular is a regular file's FileResult.
func Regular(data string) sandbox.FileResult { return sandbox.FileResult{Data: []byte(data)} }

var (
	_ sandbox.Driver        = (*Driver)(nil)
	_ sandbox.ImageBuilder  = (*Driver)(nil)
	_ sandbox.DerivedImager = (*Driver)(nil)
	_ sandbox.BridgeJoiner  = (*Driver)(nil)
	_ sandbox.NetworkMover  = (*Driver)(nil)
	_ sandbox.Freezer       = (*Driver)(nil)
	_ sandbox.ProcessKiller = (*Driver)(nil)
	_ sandbox.OOMCounter    = (*Driver)(nil)
	_ sandbox.FileCopier    = (*Driver)(nil)
	_ sandbox.FileReader    = (*Driver)(nil)
	_ sandbox.Driver        = Plain{}
)

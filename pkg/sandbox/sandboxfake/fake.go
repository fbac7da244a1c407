// Package sandboxfake is a scripted sandbox.Driver for tests that must not
// need a container engine. It runs nothing: each sandbox it starts is a
// small model (a Sandbox: its files and symlinks, the processes left
// running in it, frozen or not, destroyed or not), and each command is
// answered by the first Script whose Match is a substring of its argv.
// It has every optional ability of sandbox/abilities.go but ExecPreparer
// (sandbox.PrepareExec's fallback serves it) and declares them
// (Abilities); any of them can be switched off (Driver.Off), and
// Plain has none. It records every call in order (Calls, Execs), so a
// test can assert what a harness or service did and when: the user each
// command ran as, the processes KillAll killed and after which command,
// that Freeze came before the reward was read.
//
// How a command is answered, since the fake cannot run a shell: a Script
// gives a canned answer (exit code, output, a timeout, an error), the
// files the command leaves (Files), the processes it leaves running as
// its user (Leaves) and, for a command whose effect a test needs to
// simulate (a script that removes symlinks, say), an Answer function
// that reads and changes the Sandbox and returns the result. A command
// no script matches exits 0 without output and changes nothing.
//
// The model follows the Docker driver's contract where a harness depends
// on it: ReadFile and CopyOutFiles refuse a symlink, a directory, a
// device or a fifo (ErrNotRegular) and a file over its cap (ErrTooLarge)
// and never follow a link (a linked parent directory resolves inside the
// sandbox for ReadFile); CopyOut stores symlinks as symlinks; KillAll
// kills the processes of its user (root's: every process); Freeze stops
// every process and refuses Exec until Thaw; a running writer (Spawn
// with a path) changes its file before every read, so a reward read from
// a sandbox that was not frozen is not what the verifier left; Destroy
// and GC end every process, and Exec after them is ErrDestroyed. The
// sandbox conformance suite's ability checks (sandboxtest.Abilities) run
// against it.
package sandboxfake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Script is how one command is answered.
type Script struct {
	// Match is a substring of the command's argv joined by spaces; ""
	// matches every command.
	Match string
	// Exit is the exit code (ignored when TimedOut).
	Exit int
	// Stdout and Stderr are written to the ExecSpec's writers.
	Stdout, Stderr string
	// TimedOut ends the command at its timeout: exit 124, Duration the
	// ExecSpec's Timeout. A Duration over the ExecSpec's Timeout, or a
	// context that ended, does the same.
	TimedOut bool
	// Duration is the reported run time when not TimedOut.
	Duration time.Duration
	// Err is returned by Exec (the sandbox could not run the command).
	Err error
	// Files are sandbox files the command leaves (absolute path → result
	// of reading it; Symlink and Regular make them): CopyOut,
	// CopyOutFiles and ReadFile see them afterwards.
	Files map[string]sandbox.FileResult
	// Leaves are the processes the command leaves running after it ends,
	// whatever its end (a daemon that left its process group), as the
	// command's user: each a command line. Only KillAll, Destroy or GC
	// end them; Freeze stops them. Over the sandbox's pids limit
	// (Driver.HandleLimits.PidsLimit) the rest are not started, as a fork
	// fails there.
	Leaves []string
	// Do runs on the host when the command runs (a host command writing
	// its {output_dir}, say); its error is returned by Exec.
	Do func(spec sandbox.ExecSpec) error
	// DoContext is Do with the Exec's context: a command that runs until
	// its context ends (a cancelled cell's solve) returns then.
	DoContext func(ctx context.Context, spec sandbox.ExecSpec) error
	// Answer, when set, answers the command instead of Exit, Stdout,
	// Stderr, TimedOut and Duration, after Files and Leaves were applied
	// and Do ran: it may read and change the sandbox (remove the links a
	// find would remove, print what it removed) and writes the output
	// itself.
	Answer func(s *Sandbox, spec sandbox.ExecSpec) (sandbox.ExecResult, error)
}

// Exec is one recorded Exec call.
type Exec struct {
	// Sandbox is the Handle's ID.
	Sandbox string
	Spec    sandbox.ExecSpec
	Script  *Script // nil: no script matched (exit 0, no output)
	// Call is the index of the call in Driver.Calls.
	Call int
}

// Call is one recorded call of any method, in the order the calls were
// made.
type Call struct {
	// Op is the method's name ("Start", "Exec", "KillAll", "Freeze",
	// "ReadFile", ...).
	Op string
	// Sandbox is the Handle's ID ("" for a call on none).
	Sandbox string
	// User is the user of an Exec or a KillAll.
	User string
	// Cmd is the argv of an Exec.
	Cmd []string
	// Path is the sandbox path of a CopyIn (its directory), CopyOut,
	// CopyOutFiles or ReadFile; the ref of EnsureDerived or ImageEnv; the
	// run of GC.
	Path string
}

// Proc is a process the model says runs, or ran, in a sandbox.
type Proc struct {
	PID int
	// User is the user it runs as, as the ExecSpec said ("" is root).
	User string
	Cmd  string
	// Started is the index in Driver.Calls of the Exec that left it
	// (-1: planted by Sandbox.Spawn); Killed that of the call that ended
	// it (KillAll, Destroy, GC), -1 while it runs.
	Started, Killed int
	// Stopped is true while the sandbox is frozen.
	Stopped bool
	// Writes is the file it appends Line to before every read of the
	// sandbox while it runs ("" for none).
	Writes, Line string
}

// Running reports whether p has not been killed.
func (p Proc) Running() bool { return p.Killed < 0 }

// ErrOff is wrapped by the error of an ability switched off by
// Driver.Off.
var ErrOff = errors.New("sandboxfake: ability switched off")

// Driver is the scripted fake. Set its fields before use; its methods are
// safe for concurrent use.
type Driver struct {
	// Prefix starts each handle's id ("fake-" when empty): drivers of
	// several processes serving one node give distinct prefixes, so one
	// process's reaper never mistakes another's sandbox for its own.
	Prefix string
	// Scripts are tried in order; the first that matches a command runs.
	Scripts []Script
	// Files are sandbox files present from the start in every sandbox.
	Files map[string]sandbox.FileResult
	// Image is what EnsureImage returns (Ref defaults to
	// "fake/<task>:latest", Workdir to /app); BuildErr makes it fail.
	Image    sandbox.ImageInfo
	BuildErr error
	// StartErr makes Start fail; DerivedErr EnsureDerived (after setup ran
	// when it is nil).
	StartErr, DerivedErr error
	// Alive is added to the processes Freeze counts; FreezeErr makes it
	// fail.
	Alive     int
	FreezeErr error
	// OOM is the sequence of OOMKills answers (the last repeats); empty: 0.
	OOM []int64
	// HandleLimits are put on every Handle and are what Limits reports;
	// a PidsLimit over 0 bounds the processes running in a sandbox.
	HandleLimits sandbox.Limits
	// EgressJSONL is what EgressLog returns (the proxy's decision log),
	// CallJSONL what CallLog returns (the gateway's model calls).
	EgressJSONL, CallJSONL []byte
	// ImageEnvs maps an image ref to what ImageEnv returns; a ref not in
	// it has only PATH.
	ImageEnvs map[string][]string
	// Off lists abilities switched off: left out of Abilities, and their
	// methods fail with an error wrapping ErrOff.
	Off []sandbox.Ability
	// OnCopyIn, when set, is called by every CopyIn that succeeds with
	// its host path while that still exists (a caller may remove a
	// staging directory right after): a test reads what was copied in.
	OnCopyIn func(hostPath, sandboxDir string)

	mu        sync.Mutex
	calls     []Call
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
	refused   []sandbox.Ability
	boxes     map[string]*box
	order     []string
	n, pid    int
}

// box is the model of one sandbox.
type box struct {
	id        string
	spec      sandbox.Spec
	nodes     map[string]node // absolute path → what is there; a zero node with gone set: removed
	procs     []*Proc
	frozen    bool
	destroyed bool
}

// node is one file of a sandbox.
type node struct {
	res  sandbox.FileResult
	dir  bool
	gone bool
}

// Abilities declares every ability of sandbox/abilities.go but those
// switched off, and but ExecPreparer: a scripted exec has no process to
// hold, so sandbox.PrepareExec's fallback makes the Exec at Run.
func (d *Driver) Abilities() []sandbox.Ability {
	var out []sandbox.Ability
	for _, a := range sandbox.AllAbilities() {
		if a != sandbox.AbilityExecPreparer && !slices.Contains(d.Off, a) {
			out = append(out, a)
		}
	}
	return out
}

// off returns the error of an ability switched off, nil when it is on,
// and records the refusal (Refused).
func (d *Driver) off(a sandbox.Ability) error {
	if !slices.Contains(d.Off, a) {
		return nil
	}
	d.mu.Lock()
	d.refused = append(d.refused, a)
	d.mu.Unlock()
	return fmt.Errorf("%w: %s", ErrOff, a)
}

// Refused returns the abilities switched off that were called anyway, in
// order: a caller that needs an ability it did not declare (an error it
// logged and went on from included).
func (d *Driver) Refused() []sandbox.Ability {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.refused)
}

// record appends a call and returns its index; mu held.
func (d *Driver) record(c Call) int {
	d.calls = append(d.calls, c)
	return len(d.calls) - 1
}

// boxOf returns the sandbox of handle id, made on first use (a Handle
// rebuilt from a recorded state names one Start never made); mu held.
func (d *Driver) boxOf(id string) *box {
	if d.boxes == nil {
		d.boxes = map[string]*box{}
	}
	b := d.boxes[id]
	if b == nil {
		b = &box{id: id, nodes: map[string]node{}}
		d.boxes[id] = b
		d.order = append(d.order, id)
	}
	return b
}

func handleID(h *sandbox.Handle) string {
	if h == nil {
		return ""
	}
	return h.ID
}

// Start records spec and returns a handle "fake-<n>"; with spec.Egress
// its State holds a "proxy", and with a gateway a "gateway_ca", as the
// Docker driver's.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.StartErr != nil {
		d.record(Call{Op: "Start"})
		return nil, d.StartErr
	}
	d.n++
	prefix := d.Prefix
	if prefix == "" {
		prefix = "fake-"
	}
	id := fmt.Sprintf("%s%d", prefix, d.n)
	d.record(Call{Op: "Start", Sandbox: id})
	d.started = append(d.started, spec)
	d.boxOf(id).spec = spec
	h := &sandbox.Handle{Driver: "fake", ID: id, State: map[string]string{"cell": spec.CellID, "run": spec.RunID}, Limits: d.HandleLimits, Env: spec.Env}
	if spec.Egress != nil {
		h.State["proxy"] = "proxy:3128"
		if spec.Egress.Gateway != nil {
			h.State["gateway_ca"] = sandbox.GatewayCAPath
		}
	}
	return h, nil
}

// Exec answers with the first matching script (see the package doc). A
// destroyed sandbox is sandbox.ErrDestroyed; a frozen one refuses the
// command with an error, as a paused container does.
func (d *Driver) Exec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
	if len(spec.Cmd) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	line := strings.Join(spec.Cmd, " ")
	d.mu.Lock()
	id := handleID(h)
	b := d.boxOf(id)
	idx := d.record(Call{Op: "Exec", Sandbox: id, User: spec.User, Cmd: slices.Clone(spec.Cmd)})
	var sc *Script
	for i := range d.Scripts {
		if strings.Contains(line, d.Scripts[i].Match) {
			sc = &d.Scripts[i]
			break
		}
	}
	d.execs = append(d.execs, Exec{Sandbox: id, Spec: spec, Script: sc, Call: idx})
	switch {
	case b.destroyed:
		d.mu.Unlock()
		return sandbox.ExecResult{}, fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	case b.frozen:
		d.mu.Unlock()
		return sandbox.ExecResult{}, fmt.Errorf("sandboxfake: %s is frozen: exec refused, as a paused container's", id)
	}
	if sc != nil {
		for p, f := range sc.Files {
			b.put(p, f)
		}
		for _, c := range sc.Leaves {
			d.spawn(b, spec.User, c, idx)
		}
	}
	d.mu.Unlock()
	if sc == nil {
		if ctx.Err() != nil {
			return sandbox.ExecResult{ExitCode: sandbox.TimeoutExitCode, TimedOut: true}, nil
		}
		return sandbox.ExecResult{}, nil
	}
	if sc.Do != nil {
		if err := sc.Do(spec); err != nil {
			return sandbox.ExecResult{}, err
		}
	}
	if sc.DoContext != nil {
		if err := sc.DoContext(ctx, spec); err != nil {
			return sandbox.ExecResult{}, err
		}
	}
	if sc.Err != nil {
		return sandbox.ExecResult{}, sc.Err
	}
	if sc.Answer != nil {
		return sc.Answer(&Sandbox{d: d, id: id}, spec)
	}
	write(spec.Stdout, sc.Stdout)
	write(spec.Stderr, sc.Stderr)
	if sc.TimedOut || ctx.Err() != nil || (spec.Timeout > 0 && sc.Duration > spec.Timeout) {
		return sandbox.ExecResult{ExitCode: sandbox.TimeoutExitCode, TimedOut: true, Duration: spec.Timeout}, nil
	}
	return sandbox.ExecResult{ExitCode: sc.Exit, Duration: sc.Duration}, nil
}

func write(w io.Writer, s string) {
	if w != nil && s != "" {
		_, _ = io.Copy(w, bytes.NewBufferString(s))
	}
}

// spawn starts a process of user in b unless b is at its pids limit;
// mu held. It returns the pid, 0 when none was started.
func (d *Driver) spawn(b *box, user, cmd string, by int) int {
	if d.HandleLimits.PidsLimit > 0 && int64(len(b.running())) >= d.HandleLimits.PidsLimit {
		return 0
	}
	d.pid++
	b.procs = append(b.procs, &Proc{PID: d.pid + 1, User: user, Cmd: cmd, Started: by, Killed: -1, Stopped: b.frozen})
	return d.pid + 1
}

func (b *box) running() []*Proc {
	var out []*Proc
	for _, p := range b.procs {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// kill ends the running processes of b that user may signal (root: all).
func (b *box) kill(user string, by int) {
	uid := uidOf(user)
	for _, p := range b.running() {
		if uid == "0" || uidOf(p.User) == uid {
			p.Killed = by
		}
	}
}

// uidOf is the uid part of a user: "" and "root" are "0".
func uidOf(u string) string {
	u, _, _ = strings.Cut(u, ":")
	if u == "" || u == "root" {
		return "0"
	}
	return u
}

// tick lets every running, unstopped writer of b append its line: what
// happens between two reads of a sandbox that is not frozen.
func (b *box) tick() {
	for _, p := range b.running() {
		if p.Writes == "" || p.Stopped {
			continue
		}
		n, _ := b.get(p.Writes)
		var data []byte
		if n.res.Err == nil && !n.dir && !n.gone {
			data = n.res.Data
		}
		b.put(p.Writes, sandbox.FileResult{Data: append(slices.Clone(data), p.Line+"\n"...)})
	}
}

func (b *box) put(p string, f sandbox.FileResult) {
	b.nodes[path.Clean(p)] = node{res: f}
}

// get returns the node at p: the sandbox's own, else the driver's Files
// (looked up by the caller through files).
func (b *box) get(p string) (node, bool) {
	n, ok := b.nodes[path.Clean(p)]
	return n, ok
}

// view returns every file of b (the driver's Files under the sandbox's
// own), without the removed ones; mu held.
func (d *Driver) view(b *box) map[string]node {
	m := map[string]node{}
	for p, f := range d.Files {
		m[path.Clean(p)] = node{res: f}
	}
	for p, n := range b.nodes {
		if n.gone {
			delete(m, p)
			continue
		}
		m[p] = n
	}
	return m
}

// CopyIn records the copy and calls OnCopyIn; a missing host path is
// sandbox.ErrNotFound. The files copied are not added to the model.
func (d *Driver) CopyIn(ctx context.Context, h *sandbox.Handle, hostPath, sandboxDir string) error {
	d.mu.Lock()
	id := handleID(h)
	d.record(Call{Op: "CopyIn", Sandbox: id, Path: sandboxDir})
	if d.boxOf(id).destroyed {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	if _, err := os.Lstat(hostPath); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, hostPath)
	}
	d.copiedIn = append(d.copiedIn, [2]string{hostPath, sandboxDir})
	hook := d.OnCopyIn
	d.mu.Unlock()
	if hook != nil {
		hook(hostPath, sandboxDir)
	}
	return nil
}

// CopyOut writes the files under sandboxPath into hostDir under the
// path's base name: regular files as files, symlinks as symlinks (never
// followed), directories as directories; nothing else. Nothing there is
// sandbox.ErrNotFound.
func (d *Driver) CopyOut(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string) error {
	_, err := d.copyOut(ctx, "CopyOut", h, sandboxPath, hostDir, nil, nil)
	return err
}

// CopyOutTree is CopyOut within lim, as the Docker driver's: in path
// order, a regular file over what is left of lim.MaxBytes is left out,
// and every entry once lim.MaxEntries are copied (a directory left out
// with what it holds); what was left out is in the TreeCopy. Directories
// the model holds only implicitly (as the parents of its files) are
// made but not counted.
func (d *Driver) CopyOutTree(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string, lim sandbox.TreeLimits) (sandbox.TreeCopy, error) {
	if err := d.off(sandbox.AbilityTreeCopier); err != nil {
		return sandbox.TreeCopy{}, err
	}
	if lim.MaxBytes <= 0 || lim.MaxEntries <= 0 {
		return sandbox.TreeCopy{}, fmt.Errorf("%w: CopyOutTree needs positive limits", sandbox.ErrInvalidSpec)
	}
	b := &sandbox.TreeBudget{Lim: lim}
	_, err := d.copyOut(ctx, "CopyOutTree", h, sandboxPath, hostDir, nil, b)
	return b.Copy, err
}

// CopyOutFiles is CopyOut returning the files named in files, each as
// ReadFile would (a symlink, a directory or a special file is
// ErrNotRegular, a file over its cap ErrTooLarge, a file under a linked
// directory ErrNotRegular: the link is never followed); a named file
// that does not exist is left out, and one outside sandboxPath is
// sandbox.ErrInvalidSpec.
func (d *Driver) CopyOutFiles(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string, files map[string]int64) (map[string]sandbox.FileResult, error) {
	if err := d.off(sandbox.AbilityFileCopier); err != nil {
		return nil, err
	}
	return d.copyOut(ctx, "CopyOutFiles", h, sandboxPath, hostDir, files, nil)
}

func (d *Driver) copyOut(ctx context.Context, op string, h *sandbox.Handle, sandboxPath, hostDir string, files map[string]int64, budget *sandbox.TreeBudget) (map[string]sandbox.FileResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	d.record(Call{Op: op, Sandbox: id, Path: sandboxPath})
	b := d.boxOf(id)
	if b.destroyed {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	b.tick()
	root := path.Clean(sandboxPath)
	prefix := strings.TrimSuffix(root, "/") + "/"
	for p := range files {
		if c := path.Clean(p); c != root && !strings.HasPrefix(c, prefix) {
			return nil, fmt.Errorf("%w: %s is outside %s", sandbox.ErrInvalidSpec, p, sandboxPath)
		}
	}
	all := d.view(b)
	var paths []string
	for p := range all {
		if p == root || strings.HasPrefix(p, prefix) {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
	}
	sort.Strings(paths)
	base := filepath.Join(hostDir, path.Base(root))
	var left []string // directories the budget left out
	for _, p := range paths {
		n := all[p]
		if linkedParent(all, root, p) != "" {
			continue // under a symlink: the link was copied, not what it points at
		}
		if budget != nil {
			if slices.ContainsFunc(left, func(l string) bool { return strings.HasPrefix(p, l+"/") }) {
				continue
			}
			var le *LinkError
			var kind byte
			switch {
			case n.dir:
				kind = sandbox.TreeDir
			case errors.As(n.res.Err, &le):
				kind = sandbox.TreeLink
			case n.res.Err == nil:
				kind = sandbox.TreeFile
			default:
				continue // a special file: never made
			}
			if !budget.Admit(p, kind, int64(len(n.res.Data))) {
				if n.dir {
					left = append(left, p)
				}
				continue
			}
		}
		dst := base
		if p != root {
			dst = filepath.Join(base, filepath.FromSlash(strings.TrimPrefix(p, prefix)))
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		var le *LinkError
		switch {
		case n.dir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return nil, err
			}
		case errors.As(n.res.Err, &le):
			if err := os.Symlink(le.Target, dst); err != nil {
				return nil, err
			}
		case n.res.Err == nil:
			if err := os.WriteFile(dst, n.res.Data, 0o644); err != nil {
				return nil, err
			}
		}
	}
	got := map[string]sandbox.FileResult{}
	for p, max := range files {
		c := path.Clean(p)
		if l := linkedParent(all, root, c); l != "" {
			got[p] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is under the symlink %s", sandbox.ErrNotRegular, p, l)}
			continue
		}
		n, ok := all[c]
		if !ok && !isDir(all, c) {
			continue
		}
		got[p] = readNode(n, ok, c, max)
	}
	return got, nil
}

// linkedParent returns the first directory of p below root (root
// excluded) that is a symlink in all, "" when none.
func linkedParent(all map[string]node, root, p string) string {
	for q := path.Dir(p); q != root && len(q) > len(root); q = path.Dir(q) {
		var le *LinkError
		if errors.As(all[q].res.Err, &le) {
			return q
		}
	}
	return ""
}

// isDir reports whether p holds files in all.
func isDir(all map[string]node, p string) bool {
	prefix := strings.TrimSuffix(p, "/") + "/"
	for q := range all {
		if strings.HasPrefix(q, prefix) {
			return true
		}
	}
	return false
}

// readNode reads n (ok: it exists as a node; else p is an implicit
// directory) as ReadFile does.
func readNode(n node, ok bool, p string, max int64) sandbox.FileResult {
	switch {
	case !ok || n.dir:
		return sandbox.FileResult{Err: fmt.Errorf("%w: %s is a directory", sandbox.ErrNotRegular, p)}
	case n.res.Err != nil:
		return sandbox.FileResult{Err: n.res.Err}
	case int64(len(n.res.Data)) > max:
		return sandbox.FileResult{Err: fmt.Errorf("%w: %s is %d bytes, over the cap of %d", sandbox.ErrTooLarge, p, len(n.res.Data), max)}
	}
	return sandbox.FileResult{Data: slices.Clone(n.res.Data)}
}

// ReadFile returns a regular file of at most maxBytes of the sandbox: a
// symlink, a directory or a special file is sandbox.ErrNotRegular, a
// larger file sandbox.ErrTooLarge, a missing one sandbox.ErrNotFound. A
// symlinked parent directory resolves inside the sandbox.
func (d *Driver) ReadFile(ctx context.Context, h *sandbox.Handle, sandboxPath string, maxBytes int64) ([]byte, error) {
	if err := d.off(sandbox.AbilityFileReader); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	d.record(Call{Op: "ReadFile", Sandbox: id, Path: sandboxPath})
	b := d.boxOf(id)
	if b.destroyed {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	b.tick()
	all := d.view(b)
	p := resolveParents(all, path.Clean(sandboxPath))
	n, ok := all[p]
	if !ok && !isDir(all, p) {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
	}
	f := readNode(n, ok, sandboxPath, maxBytes)
	return f.Data, f.Err
}

// resolveParents replaces each symlinked directory above p's last
// element by its target, inside the model (at most 40 links).
func resolveParents(all map[string]node, p string) string {
	for hops := 0; hops < 40; hops++ {
		changed := false
		for q := path.Dir(p); q != "/" && q != "."; q = path.Dir(q) {
			var le *LinkError
			if errors.As(all[q].res.Err, &le) {
				t := le.Target
				if !path.IsAbs(t) {
					t = path.Join(path.Dir(q), t)
				}
				p = path.Join(t, strings.TrimPrefix(p, q+"/"))
				changed = true
				break
			}
		}
		if !changed {
			return p
		}
	}
	return p
}

// Destroy ends every process of the sandbox and records its id; it is
// idempotent.
func (d *Driver) Destroy(ctx context.Context, h *sandbox.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	idx := d.record(Call{Op: "Destroy", Sandbox: id})
	d.destroyed = append(d.destroyed, id)
	b := d.boxOf(id)
	b.kill("", idx)
	b.destroyed = true
	return nil
}

// EnsureImage returns Image, or BuildErr.
func (d *Driver) EnsureImage(ctx context.Context, b sandbox.BuildSpec) (sandbox.ImageInfo, error) {
	if err := d.off(sandbox.AbilityImageBuilder); err != nil {
		return sandbox.ImageInfo{}, err
	}
	d.mu.Lock()
	d.record(Call{Op: "EnsureImage", Path: b.Task})
	d.mu.Unlock()
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
	if err := d.off(sandbox.AbilityDerivedImager); err != nil {
		return false, err
	}
	d.mu.Lock()
	d.record(Call{Op: "EnsureDerived", Path: ref})
	d.mu.Unlock()
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
	if err := d.off(sandbox.AbilityBridgeJoiner); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	d.record(Call{Op: "ConnectBridge", Sandbox: id})
	if d.boxOf(id).destroyed {
		return fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	d.connected++
	return nil
}

// MoveNetwork records the move; a move to the bridge counts as a join
// (Counts).
func (d *Driver) MoveNetwork(ctx context.Context, h *sandbox.Handle, mode string) error {
	if err := d.off(sandbox.AbilityNetworkMover); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	d.record(Call{Op: "MoveNetwork", Sandbox: id, Path: mode})
	if d.boxOf(id).destroyed {
		return fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
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

// CallLog returns CallJSONL.
func (d *Driver) CallLog(ctx context.Context, h *sandbox.Handle) ([]byte, error) {
	if err := d.off(sandbox.AbilityCallLogger); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Op: "CallLog", Sandbox: handleID(h)})
	return slices.Clone(d.CallJSONL), nil
}

// EgressLog returns EgressJSONL.
func (d *Driver) EgressLog(ctx context.Context, h *sandbox.Handle) ([]byte, error) {
	if err := d.off(sandbox.AbilityEgressLogger); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Op: "EgressLog", Sandbox: handleID(h)})
	return slices.Clone(d.EgressJSONL), nil
}

// Freeze stops every process of the sandbox and returns how many were
// running (plus Alive), or FreezeErr; Exec is refused until Thaw. A
// destroyed sandbox is sandbox.ErrDestroyed.
func (d *Driver) Freeze(ctx context.Context, h *sandbox.Handle) (int, error) {
	if err := d.off(sandbox.AbilityFreezer); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	d.record(Call{Op: "Freeze", Sandbox: id})
	d.frozen++
	b := d.boxOf(id)
	if b.destroyed {
		return 0, fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	if d.FreezeErr != nil {
		return d.Alive, d.FreezeErr
	}
	b.frozen = true
	alive := d.Alive
	for _, p := range b.running() {
		p.Stopped = true
		alive++
	}
	return alive, nil
}

// Thaw resumes a frozen sandbox: its processes run and Exec works again.
// A destroyed sandbox is an error.
func (d *Driver) Thaw(ctx context.Context, h *sandbox.Handle) error {
	if err := d.off(sandbox.AbilityThawer); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	d.record(Call{Op: "Thaw", Sandbox: id})
	b := d.boxOf(id)
	if b.destroyed {
		return fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	b.frozen = false
	for _, p := range b.procs {
		p.Stopped = false
	}
	return nil
}

// KillAll ends every running process of user in the sandbox ("" or root:
// every process) and records the user.
func (d *Driver) KillAll(ctx context.Context, h *sandbox.Handle, user string) error {
	if err := d.off(sandbox.AbilityProcessKiller); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := handleID(h)
	idx := d.record(Call{Op: "KillAll", Sandbox: id, User: user})
	d.killed = append(d.killed, user)
	b := d.boxOf(id)
	if b.destroyed {
		return fmt.Errorf("%w: %s", sandbox.ErrDestroyed, id)
	}
	b.kill(user, idx)
	return nil
}

// OOMKills answers from OOM in turn.
func (d *Driver) OOMKills(ctx context.Context, h *sandbox.Handle) (int64, error) {
	if err := d.off(sandbox.AbilityOOMCounter); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Op: "OOMKills", Sandbox: handleID(h)})
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

// Limits reports the driver's Limits, whatever spec says. Switched off,
// it reports none.
func (d *Driver) Limits(spec sandbox.Spec) sandbox.Limits {
	if d.off(sandbox.AbilityLimitReporter) != nil {
		return sandbox.Limits{}
	}
	return d.HandleLimits
}

// ImageEnv returns ImageEnvs[ref], else only a PATH.
func (d *Driver) ImageEnv(ctx context.Context, ref string) ([]string, error) {
	if err := d.off(sandbox.AbilityImageEnver); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Op: "ImageEnv", Path: ref})
	if env, ok := d.ImageEnvs[ref]; ok {
		return slices.Clone(env), nil
	}
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, nil
}

// GC destroys every sandbox started for runID and returns how many (and
// how many of them had a network of their own: internal, or with
// services).
func (d *Driver) GC(ctx context.Context, runID string) (containers, networks int, err error) {
	if err := d.off(sandbox.AbilityCollector); err != nil {
		return 0, 0, err
	}
	if runID == "" {
		return 0, 0, fmt.Errorf("%w: empty run id", sandbox.ErrInvalidSpec)
	}
	return d.gc("GC", runID, func(r string) bool { return r == runID })
}

// GCDead destroys every sandbox of a run isAlive says is dead.
func (d *Driver) GCDead(ctx context.Context, isAlive func(runID string) bool) (containers, networks int, err error) {
	if err := d.off(sandbox.AbilityCollector); err != nil {
		return 0, 0, err
	}
	return d.gc("GCDead", "", func(r string) bool { return r != "" && !isAlive(r) })
}

func (d *Driver) gc(op, run string, pick func(string) bool) (nc, nn int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	idx := d.record(Call{Op: op, Path: run})
	for _, id := range d.order {
		b := d.boxes[id]
		if b.destroyed || !pick(b.spec.RunID) {
			continue
		}
		b.kill("", idx)
		b.destroyed = true
		d.destroyed = append(d.destroyed, id)
		nc++
		if b.spec.Network == sandbox.NetworkInternal || len(b.spec.Services) > 0 {
			nn++
		}
	}
	return nc, nn, nil
}

// Sandbox is the model of one fake sandbox, for a Script's Answer and for
// a test that plants state in a sandbox or asserts on it. Its methods are
// safe for concurrent use.
type Sandbox struct {
	d  *Driver
	id string
}

// Sandbox returns the model of h's sandbox (made on first use).
func (d *Driver) Sandbox(h *sandbox.Handle) *Sandbox { return d.SandboxByID(handleID(h)) }

// SandboxByID returns the model of the sandbox of Handle ID id.
func (d *Driver) SandboxByID(id string) *Sandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.boxOf(id)
	return &Sandbox{d: d, id: id}
}

// Sandboxes returns the models of every sandbox in the order they were
// first used.
func (d *Driver) Sandboxes() []*Sandbox {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Sandbox, 0, len(d.order))
	for _, id := range d.order {
		out = append(out, &Sandbox{d: d, id: id})
	}
	return out
}

// ID is the sandbox's Handle ID.
func (s *Sandbox) ID() string { return s.id }

func (s *Sandbox) with(f func(b *box)) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	f(s.d.boxOf(s.id))
}

// Put sets the file at p (Regular, Symlink, Special, or any FileResult).
func (s *Sandbox) Put(p string, f sandbox.FileResult) { s.with(func(b *box) { b.put(p, f) }) }

// Mkdir makes p a directory (reading it is ErrNotRegular).
func (s *Sandbox) Mkdir(p string) { s.with(func(b *box) { b.nodes[path.Clean(p)] = node{dir: true} }) }

// Remove removes the file, link or directory at p (not what is under a
// directory).
func (s *Sandbox) Remove(p string) {
	s.with(func(b *box) { b.nodes[path.Clean(p)] = node{gone: true} })
}

// Files returns every file of the sandbox as a read of it returns it
// (the driver's Files and what scripts and tests put), directories left
// out.
func (s *Sandbox) Files() map[string]sandbox.FileResult {
	out := map[string]sandbox.FileResult{}
	s.with(func(b *box) {
		for p, n := range s.d.view(b) {
			if !n.dir {
				out[p] = n.res
			}
		}
	})
	return out
}

// Links returns the symlinks of the sandbox: path → target.
func (s *Sandbox) Links() map[string]string {
	out := map[string]string{}
	for p, f := range s.Files() {
		var le *LinkError
		if errors.As(f.Err, &le) {
			out[p] = le.Target
		}
	}
	return out
}

// Spawn plants a process of user running cmd, as one a command left
// behind, and returns its pid (0: the sandbox is at its pids limit).
// With writes set it appends line to that file before every read of the
// sandbox while it runs unstopped.
func (s *Sandbox) Spawn(user, cmd, writes, line string) int {
	pid := 0
	s.with(func(b *box) {
		pid = s.d.spawn(b, user, cmd, -1)
		if pid != 0 && writes != "" {
			p := b.procs[len(b.procs)-1]
			p.Writes, p.Line = path.Clean(writes), line
			b.tick()
		}
	})
	return pid
}

// Procs returns every process that ran in the sandbox, killed ones
// included, in the order they started.
func (s *Sandbox) Procs() []Proc {
	var out []Proc
	s.with(func(b *box) {
		for _, p := range b.procs {
			out = append(out, *p)
		}
	})
	return out
}

// Running returns the processes of the sandbox that run (stopped ones
// included).
func (s *Sandbox) Running() []Proc {
	var out []Proc
	for _, p := range s.Procs() {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// Frozen reports whether the sandbox is frozen; Destroyed whether it was
// destroyed (or collected).
func (s *Sandbox) Frozen() (frozen bool) {
	s.with(func(b *box) { frozen = b.frozen })
	return frozen
}

func (s *Sandbox) Destroyed() (gone bool) {
	s.with(func(b *box) { gone = b.destroyed })
	return gone
}

// Calls returns every recorded call in order.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Call, len(d.calls))
	for i, c := range d.calls {
		c.Cmd = slices.Clone(c.Cmd)
		out[i] = c
	}
	return out
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

// Destroyed returns the ids of the sandboxes destroyed (by Destroy, once
// per call, or by GC).
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

// LinkError is the error a read of a symlink returns (what the Docker
// driver reports: it wraps sandbox.ErrNotRegular); Symlink makes one.
type LinkError struct{ Path, Target string }

func (e *LinkError) Error() string {
	return fmt.Sprintf("%v: %s is a symlink to %q", sandbox.ErrNotRegular, e.Path, e.Target)
}

// Unwrap makes errors.Is(err, sandbox.ErrNotRegular) hold.
func (e *LinkError) Unwrap() error { return sandbox.ErrNotRegular }

// Symlink is the FileResult of a sandbox file that is a symlink to
// target.
func Symlink(path, target string) sandbox.FileResult {
	return sandbox.FileResult{Err: &LinkError{Path: path, Target: target}}
}

// Special is the FileResult of a file that is neither regular nor a
// link: what names it ("fifo", "character device").
func Special(path, what string) sandbox.FileResult {
	return sandbox.FileResult{Err: fmt.Errorf("%w: %s is a %s", sandbox.ErrNotRegular, path, what)}
}

// Regular is a regular file's FileResult.
func Regular(data string) sandbox.FileResult { return sandbox.FileResult{Data: []byte(data)} }

var (
	_ sandbox.Driver        = (*Driver)(nil)
	_ sandbox.Capable       = (*Driver)(nil)
	_ sandbox.ImageBuilder  = (*Driver)(nil)
	_ sandbox.DerivedImager = (*Driver)(nil)
	_ sandbox.BridgeJoiner  = (*Driver)(nil)
	_ sandbox.NetworkMover  = (*Driver)(nil)
	_ sandbox.EgressLogger  = (*Driver)(nil)
	_ sandbox.CallLogger    = (*Driver)(nil)
	_ sandbox.Freezer       = (*Driver)(nil)
	_ sandbox.TreeCopier    = (*Driver)(nil)
	_ sandbox.Thawer        = (*Driver)(nil)
	_ sandbox.ProcessKiller = (*Driver)(nil)
	_ sandbox.OOMCounter    = (*Driver)(nil)
	_ sandbox.FileCopier    = (*Driver)(nil)
	_ sandbox.FileReader    = (*Driver)(nil)
	_ sandbox.LimitReporter = (*Driver)(nil)
	_ sandbox.ImageEnver    = (*Driver)(nil)
	_ sandbox.Collector     = (*Driver)(nil)
	_ sandbox.Driver        = Plain{}
)

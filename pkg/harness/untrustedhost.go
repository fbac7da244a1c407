package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
)

// HostAgentUserEnv names the user the host arms run their agent as when
// proctor runs as root: a numeric "uid:gid" or a user name. Unset, it is
// the user HostAgentUserName, created (useradd --system) the first time
// it is needed.
const HostAgentUserEnv = "PROCTOR_HOST_AGENT_USER"

// HostAgentUserName is the dedicated unprivileged user of the host arms.
const HostAgentUserName = "proctor-agent"

// HostTreePrefix names a host arm's scratch tree: <TMPDIR>/proctor-run-*.
const HostTreePrefix = "proctor-run-"

// Caps of the working tree a host arm copies out of the task container
// and back: a tree larger than either is refused (out) or errors the
// cell (back), never copied in part, since the copy back replaces the
// container's tree.
const (
	MaxHostTreeBytes   = 1 << 30
	MaxHostTreeEntries = 200_000
)

// HostOpen are the isolation classes a host launch cannot seal, each with
// why: every host arm's row carries them as metrics.isolation.host_open
// (beside agent_location "host"), and docker-probe-host finds them open.
var HostOpen = map[string]string{
	"work_tree":       "the agent works on a copy of the task's working tree in a host directory; the container's tree is replaced by that copy before the verifier, so the copy is all that is checked",
	"operator_config": "the agent runs on the operator's machine: the CLI binary, /etc and every file of the operator's that its user can read are its to read",
	"env":             "the operator's uid can read the agent's /proc/<pid>/environ (its variables: the provider placeholder, the proxy) and the agent sees the host's processes",
	"host_filesystem": "every host file its user can read or write is open to the agent; only the scratch tree is its own",
	"network":         "the agent has the host's network: the egress proxy is its route to the model, not the only way out",
}

// HostUntrusted is what a host arm adds to an untrusted solve on the
// host; RunUntrustedHost owns the rest. Its methods are called in order,
// once each, from one goroutine: Stage, Command, Ended.
type HostUntrusted interface {
	// Stage writes the arm's files into the scratch tree (its prompt, a
	// skill), as proctor's user, outside Workspace, once the tree holds
	// the working tree's copy. Its error ends the solve before the agent
	// starts.
	Stage(ctx context.Context, u *HostRun) error
	// Command is the agent's exec on the host: Cmd, Env (the arm's
	// variables; the scratch HOME, CLAUDE_CONFIG_DIR, TMPDIR, the proxy's
	// and the gateway CA's are laid over them), Timeout, Stdout and
	// Stderr. User, Workdir and Grace are RunUntrustedHost's.
	Command(ctx context.Context, u *HostRun) (sandbox.ExecSpec, error)
	// Ended is called as soon as the exec returned, before the epilogue.
	Ended(res sandbox.ExecResult)
}

// HostRun is the host solve RunUntrustedHost drives, as the arm's
// HostUntrusted methods see it.
type HostRun struct {
	Env Env
	// Driver and Handle are the task container (where the verifier runs).
	Driver sandbox.Driver
	Handle *sandbox.Handle
	// Host runs the agent; Tree is its sandbox, the scratch tree.
	Host *process.Driver
	Tree *sandbox.Handle
	// Root is the scratch tree's host path; Workspace (the copy of the
	// task's working tree, the agent's working directory), Baseline (a
	// read-only copy of the image's baseline beside the working tree, ""
	// when it has none), Home and ConfigDir (CLAUDE_CONFIG_DIR, empty)
	// are in it.
	Root, Workspace, Baseline, Home, ConfigDir string
	// User is who the agent runs as ("uid:gid"; "" when proctor is not
	// root: proctor's own user).
	User string
	// Workdir is the task's working directory in the container as the
	// placement names it; RealWorkdir the same with its links resolved.
	Workdir, RealWorkdir string
	// Grace is the SIGTERM-to-SIGKILL grace at the budget's end.
	Grace time.Duration
	// Kill ends every process of the agent now (the Claude CLI's result
	// grace); the epilogue kills what is left anyway.
	Kill func(ctx context.Context) error
}

// RunUntrustedHost runs one untrusted solve on the host for a host arm
// (docker-claude-host, docker-probe-host), against the started task
// container h of placement p, which keeps the verifier. In order:
//
//  1. the container's working directory is resolved (resolveWorkdir),
//     its owners recorded and the verifier's HOME kept when the tree
//     holds it (snapshotHome);
//  2. a fresh scratch tree <TMPDIR>/proctor-run-* outside any checkout
//     (refused when a parent holds .git) gets a copy of the working tree
//     as workspace/ (within MaxHostTreeBytes and MaxHostTreeEntries,
//     refused beyond), a read-only baseline/ when the image has a
//     baseline directory beside the working tree, and empty home/,
//     config/ and tmp/;
//  3. when proctor is root the agent's user is the dedicated one
//     (HostAgentUser), never root, and the workspace, home, config and
//     tmp are given to it;
//  4. the arm stages its files and its command runs as that user in
//     workspace/, in its own process group and cgroup (when the host
//     gives one), with only the process driver's allowlisted variables,
//     the arm's, the scratch HOME, CLAUDE_CONFIG_DIR and TMPDIR, and the
//     container's egress proxy (reached on its internal-network address)
//     as its route to the model;
//  5. the epilogue, whatever the exec returned: every process the agent
//     started is killed (its cgroup, else every process of its dedicated
//     user, else its process group only, recorded), then only the
//     workspace is copied back over the container's working tree (fifos,
//     sockets and devices left out), symlinks into grader paths removed,
//     the verifier's HOME reset and the paths of before given back their
//     owners, each before RunUntrustedHost returns; the scratch tree is
//     removed.
//
// The result's Isolation states agent_location "host" and host_open
// (HostOpen). An error of the exec is returned after the epilogue ran;
// an error of the epilogue is returned even when the exec succeeded.
func RunUntrustedHost(ctx context.Context, env Env, p Placement, h *sandbox.Handle, arm HostUntrusted) (UntrustedResult, error) {
	d := p.Driver
	tc, ok := d.(sandbox.TreeCopier)
	if !ok {
		return UntrustedResult{}, fmt.Errorf("the sandbox driver %T cannot copy the working tree out within a cap (%s)", d, sandbox.AbilityTreeCopier)
	}
	real, err := resolveWorkdir(ctx, d, h, p.Workdir, AgentUserSealed)
	if err != nil {
		return UntrustedResult{}, err
	}
	owners, err := snapshotOwners(ctx, d, h, real)
	if err != nil {
		return UntrustedResult{}, err
	}
	home, err := snapshotHome(ctx, d, h, real, env.Task().VerifierEnv["HOME"])
	if err != nil {
		return UntrustedResult{}, err
	}
	usr, err := HostAgentUser(env.Getenv)
	if err != nil {
		return UntrustedResult{}, events.Classed(events.ClassSandbox, err)
	}
	hd := hostAgentDriver(env)
	th, err := hd.Start(ctx, sandbox.Spec{RunID: env.RunID(), CellID: env.CellID()})
	if err != nil {
		return UntrustedResult{}, events.Classed(events.ClassSandbox, err)
	}
	defer func() { _ = hd.Destroy(context.WithoutCancel(ctx), th) }()
	u := &HostRun{Env: env, Driver: d, Handle: h, Host: hd, Tree: th, Root: th.State["root"], User: usr,
		Workdir: p.Workdir, RealWorkdir: real, Grace: sandbox.DefaultGrace}
	u.Workspace, u.Home = filepath.Join(u.Root, "workspace"), th.State["home"]
	u.ConfigDir = filepath.Join(u.Root, "config")
	u.Kill = func(ctx context.Context) error { return hd.KillSandbox(ctx, th, u.User) }
	if sp := env.Spec(); sp.AgentGraceSec > 0 {
		u.Grace = seconds(sp.AgentGraceSec)
	}
	if err := u.fill(ctx, tc); err != nil {
		return UntrustedResult{}, err
	}
	if err := arm.Stage(ctx, u); err != nil {
		return UntrustedResult{}, err
	}
	spec, err := arm.Command(ctx, u)
	if err != nil {
		return UntrustedResult{}, err
	}
	spec.User, spec.Workdir, spec.Grace = u.User, "/workspace", u.Grace
	hostEnv := map[string]string{"HOME": u.Home, "CLAUDE_CONFIG_DIR": u.ConfigDir, "TMPDIR": filepath.Join(u.Root, "tmp")}
	if g := p.Spec.Egress; g != nil && g.Gateway != nil && g.Gateway.CA != nil {
		ca := filepath.Join(u.Root, "gateway-ca.pem")
		if err := os.WriteFile(ca, g.Gateway.CA.CertPEM, 0o644); err != nil {
			return UntrustedResult{}, err
		}
		hostEnv["NODE_EXTRA_CA_CERTS"] = ca
	}
	spec.Env = withEnv(withEnv(spec.Env, hostEnv), sandbox.ProxyEnv(h))
	r := UntrustedResult{Started: time.Now(), RealWorkdir: real}
	r.Exec, err = hd.Exec(ctx, th, spec)
	r.Ended = time.Now()
	arm.Ended(r.Exec)
	if err != nil {
		err = fmt.Errorf("run the agent on the host: %w", err)
	}
	return r, errors.Join(err, u.epilogue(ctx, home, owners, h, &r))
}

// hostAgentDriver is the process driver of the host arms: trees named
// HostTreePrefix in the host driver's BaseDir (the system's temp
// directory by default), a cgroup each, the allowlisted environment.
func hostAgentDriver(env Env) *process.Driver {
	hd := &process.Driver{Prefix: HostTreePrefix, Cgroup: true}
	if pd, ok := env.Host().(*process.Driver); ok {
		hd.BaseDir = pd.BaseDir
	}
	return hd
}

// fill makes the scratch tree (step 2 and 3 of RunUntrustedHost).
func (u *HostRun) fill(ctx context.Context, tc sandbox.TreeCopier) error {
	if co := checkoutAbove(u.Root); co != "" {
		return events.Classf(events.ClassSandbox, "the host scratch tree %s is inside the checkout %s: set TMPDIR outside any checkout", u.Root, co)
	}
	if err := u.copyOut(ctx, tc, u.RealWorkdir, u.Workspace); err != nil {
		return err
	}
	// The image's baseline beside the working tree (/app's is /baseline),
	// read-only beside the workspace.
	if base := path.Join(path.Dir(u.RealWorkdir), "baseline"); base != u.RealWorkdir {
		res, err := u.Driver.Exec(ctx, u.Handle, sandbox.ExecSpec{Cmd: []string{"test", "-d", base}, Timeout: time.Minute})
		if err != nil {
			return err
		}
		if res.ExitCode == 0 {
			u.Baseline = filepath.Join(u.Root, "baseline")
			if err := u.copyOut(ctx, tc, base, u.Baseline); err != nil {
				return err
			}
			if err := readOnly(u.Baseline); err != nil {
				return err
			}
		}
	}
	for _, d := range []string{u.ConfigDir, filepath.Join(u.Root, "tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Chmod(u.Root, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(u.Home, 0o700); err != nil {
		return err
	}
	if u.User == "" {
		return nil
	}
	uid, gid := userIDs(u.User)
	for _, d := range []string{u.Workspace, u.Home, u.ConfigDir, filepath.Join(u.Root, "tmp")} {
		if err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		}); err != nil {
			return fmt.Errorf("give the scratch tree to %s: %w", u.User, err)
		}
	}
	return nil
}

// copyOut copies the container's tree src to the host directory dst
// whole, or refuses it (class refused) when it is over the caps.
func (u *HostRun) copyOut(ctx context.Context, tc sandbox.TreeCopier, src, dst string) error {
	stage := filepath.Join(u.Root, ".in")
	got, err := tc.CopyOutTree(ctx, u.Handle, src, stage, sandbox.TreeLimits{MaxBytes: MaxHostTreeBytes, MaxEntries: MaxHostTreeEntries})
	if err != nil {
		return fmt.Errorf("copy %s out of the task container: %w", src, err)
	}
	if got.Truncated {
		return events.Classf(events.ClassRefused, "%s in the task image is over what a host arm copies (%d bytes, %d entries; %d entries left out): refused before the agent starts",
			src, MaxHostTreeBytes, MaxHostTreeEntries, got.SkippedEntries)
	}
	if err := os.Rename(filepath.Join(stage, path.Base(src)), dst); err != nil {
		return err
	}
	return os.Remove(stage)
}

// epilogue is RunUntrustedHost's step 5.
func (u *HostRun) epilogue(ctx context.Context, home *homeSnapshot, owners *ownerSnapshot, h *sandbox.Handle, r *UntrustedResult) error {
	d, dir := u.Driver, u.Env.Dir()
	iso := map[string]any{"agent_location": "host", "host_open": HostOpen, "egress": "none", "workdir": u.Workdir,
		"host_tree": filepath.Base(u.Root), "process_group": true, "cgroup": u.Tree.State["cgroup"] != ""}
	if h.State["proxy"] != "" {
		iso["egress"] = "proxy"
	}
	iso["user"] = u.User
	if u.User == "" {
		iso["user"] = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	}
	switch err := u.Kill(ctx); {
	case err == nil:
		iso["leftover_kill"] = map[bool]string{true: "cgroup", false: "user"}[iso["cgroup"] == true]
	case errors.Is(err, sandbox.ErrInvalidSpec):
		// Neither a cgroup nor a dedicated user: its process group was
		// killed when it exited; a process that left it is not reached.
		iso["leftover_kill"] = "process group"
		dir.Logf("host: %v; only the agent's process group was killed", err)
	default:
		return fmt.Errorf("stop the agent's processes on the host: %w", err)
	}
	n, err := prune(u.Workspace)
	if err != nil {
		return fmt.Errorf("read the agent's working tree back: %w", err)
	}
	if n.bytes > MaxHostTreeBytes || n.entries > MaxHostTreeEntries {
		return events.Classf(events.ClassSolverError, "the agent's working tree on the host is over what is copied back (%d bytes, %d entries; caps %d, %d)",
			n.bytes, n.entries, MaxHostTreeBytes, MaxHostTreeEntries)
	}
	var out bytes.Buffer
	res, err := d.Exec(ctx, u.Handle, sandbox.ExecSpec{Cmd: []string{"find", u.RealWorkdir, "-mindepth", "1", "-maxdepth", "1", "-exec", "rm", "-rf", "--", "{}", "+"},
		Stdout: &out, Stderr: &out, Timeout: 5 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("empty the container's working tree: exit %d: %v: %s", res.ExitCode, err, cellfs.Suffix(out.String(), 300))
	}
	if err := d.CopyIn(ctx, u.Handle, u.Workspace, u.RealWorkdir); err != nil {
		return fmt.Errorf("copy the agent's working tree into the container: %w", err)
	}
	links, err := RemoveGraderLinks(ctx, d, u.Handle, u.Workdir)
	if err != nil {
		return err
	}
	reset, err := home.reset(ctx, d, u.Handle)
	if err != nil {
		return err
	}
	restored, err := owners.restoreByPath(ctx, d, u.Handle)
	if err != nil {
		return err
	}
	iso["copied_back"] = map[string]any{"files": n.files, "bytes": n.bytes, "left_out": n.left}
	r.GraderLinks, r.HomeReset, r.OwnersRestored = links, reset, restored
	noteGraderLinks(dir, iso, links)
	noteHomeReset(dir, iso, reset)
	noteOwners(dir, iso, owners, restored)
	r.Isolation = iso
	dir.Logf("host: %d file(s), %d bytes copied back into %s (%d special file(s) left out)", n.files, n.bytes, u.RealWorkdir, n.left)
	return nil
}

// treeCount is what prune found.
type treeCount struct {
	files, entries, left int
	bytes                int64
}

// prune removes from the tree at root whatever is not a regular file, a
// directory or a symlink (fifos, sockets, devices: never copied back) and
// counts the rest. It runs once the agent's processes are gone.
func prune(root string) (treeCount, error) {
	var n treeCount
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n.entries++
		switch t := d.Type(); {
		case t.IsDir(), t&fs.ModeSymlink != 0:
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n.files++
			n.bytes += fi.Size()
		default:
			n.left++
			return os.Remove(p)
		}
		return nil
	})
	return n, err
}

// readOnly makes every file and directory under root read-only to
// everyone (proctor's user keeps it; the agent's never had it).
func readOnly(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		return os.Chmod(p, fi.Mode().Perm()&^0o222)
	})
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = os.Chmod(dirs[i], 0o555)
	}
	return err
}

// checkoutAbove returns the first directory at or above dir holding a
// .git entry (a checkout), or "".
func checkoutAbove(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// HostAgentUser is who a host arm's agent runs as: "" when proctor is not
// root (its own user, as it must be); as root, HostAgentUserEnv when set,
// else the user HostAgentUserName, created with useradd --system the
// first time (no home, no login shell). Root (uid 0) is refused.
// HostAgentUserEnv is read through getenv (nil: os.Getenv).
func HostAgentUser(getenv func(string) string) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	name := orProcess(getenv)(HostAgentUserEnv)
	if name == "" {
		name = HostAgentUserName
	}
	if us, gs, ok := strings.Cut(name, ":"); ok {
		uid, err1 := strconv.Atoi(us)
		gid, err2 := strconv.Atoi(gs)
		if err1 != nil || err2 != nil || uid <= 0 {
			return "", fmt.Errorf("%s=%s: want a numeric uid:gid other than root, or a user name", HostAgentUserEnv, name)
		}
		return fmt.Sprintf("%d:%d", uid, gid), nil
	}
	ensureHostUser.Do(func() {
		if _, err := user.Lookup(HostAgentUserName); err == nil || name != HostAgentUserName {
			return
		}
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", "--comment", "proctor host agent", HostAgentUserName).CombinedOutput()
		if err != nil {
			ensureHostUserErr = fmt.Errorf("create the host agent's user %s (useradd): %v: %s", HostAgentUserName, err, strings.TrimSpace(string(out)))
		}
	})
	if ensureHostUserErr != nil {
		return "", ensureHostUserErr
	}
	us, err := user.Lookup(name)
	if err != nil {
		return "", fmt.Errorf("the host agent's user %s: %w (set %s)", name, err, HostAgentUserEnv)
	}
	if us.Uid == "0" {
		return "", fmt.Errorf("the host agent's user %s is root: the host arms never run their agent as root", name)
	}
	return us.Uid + ":" + us.Gid, nil
}

var (
	ensureHostUser    sync.Once
	ensureHostUserErr error
)

// userIDs parses "uid:gid".
func userIDs(u string) (int, int) {
	us, gs, _ := strings.Cut(u, ":")
	uid, _ := strconv.Atoi(us)
	gid, _ := strconv.Atoi(gs)
	return uid, gid
}

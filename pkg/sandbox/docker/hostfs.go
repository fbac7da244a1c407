package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Files of a running container, straight through its root directory.
//
// The engine's copy API costs a re-exec of the engine binary per call on
// Docker 20.10 (docker-untar, docker-tar: about 50 ms of CPU each, the
// largest cost a cell has beyond a bare container's lifecycle). When the
// engine runs on this machine and this process may look into the
// container (root in the engine's pid namespace), CopyIn, CopyOutFiles and
// ReadFile go through /proc/<pid>/root of the container's PID 1 instead,
// with the same results as the copy API:
//
//   - every path is resolved inside that directory with os.Root (no
//     symlink or ".." leads out of it, and the final component of a read
//     is never followed);
//   - the root opened is checked to be the container's root filesystem
//     (its device and inode are those of the engine's merged directory of
//     the container), so a PID 1 that was made to chroot elsewhere, or a
//     reused pid, is refused;
//   - writes are made only when both this process and the container map
//     uid 0 to the host's uid 0 (no user-namespace remapping), so files
//     are owned as the copy API would own them;
//   - a case the copy API would resolve differently (a symlink among the
//     parents of the path, an absolute symlink, an entry that is not a
//     file, directory or symlink where one is expected) goes to the copy
//     API, decided before anything is written.
//
// Anything else that stops the host path (the engine on another machine,
// a non-root user, another graph driver than overlay2, Options.CopyAPIOnly)
// means the copy API, as before.

// hostContainer is what the driver remembers of a container for its host
// path: its PID 1 as this machine numbers it and the device and inode of
// its root filesystem.
type hostContainer struct {
	pid      int
	dev, ino uint64
	identity bool // uid 0 maps to the host's uid 0 in the container
}

// errNoHostPath is returned by a host path that left the work to the copy
// API before writing anything.
var errNoHostPath = errors.New("sandbox: docker: not through the host")

// hostRoot returns the container's root directory as an os.Root, or ok
// false when the host path cannot be used for it (see above); write asks
// for a root writes may go through.
func (d *Driver) hostRoot(ctx context.Context, cid string, write bool) (r *os.Root, ok bool) {
	if d.copyAPIOnly || d.noHostFS.Load() {
		return nil, false
	}
	if write && os.Geteuid() != 0 {
		return nil, false
	}
	hc, err := d.hostContainerOf(ctx, cid)
	if err != nil || (write && !hc.identity) {
		return nil, false
	}
	r, err = openContainerRoot(hc)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			d.noHostFS.Store(true) // this process may not look into containers
		}
		d.hostConts.Delete(cid)
		return nil, false
	}
	return r, true
}

// hostContainerOf returns what the driver knows of container cid for the
// host path, asking the engine once per container.
func (d *Driver) hostContainerOf(ctx context.Context, cid string) (hostContainer, error) {
	if v, ok := d.hostConts.Load(cid); ok {
		if hc := v.(hostContainer); hc.pid > 0 {
			return hc, nil
		}
		return hostContainer{}, errNoHostPath
	}
	ins, err := d.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return hostContainer{}, err
	}
	if ins.State == nil || !ins.State.Running || ins.State.Pid <= 0 {
		return hostContainer{}, errNoHostPath
	}
	merged := ins.GraphDriver.Data["MergedDir"]
	if ins.GraphDriver.Name != "overlay2" || !filepath.IsAbs(merged) {
		// Another graph driver: this container never takes the host path.
		d.hostConts.Store(cid, hostContainer{})
		return hostContainer{}, errNoHostPath
	}
	var st syscall.Stat_t
	if err := syscall.Stat(merged, &st); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			d.noHostFS.Store(true)
		}
		return hostContainer{}, errNoHostPath
	}
	hc := hostContainer{pid: ins.State.Pid, dev: uint64(st.Dev), ino: st.Ino,
		identity: identityMap("/proc/self/uid_map") && identityMap(fmt.Sprintf("/proc/%d/uid_map", ins.State.Pid))}
	d.hostConts.Store(cid, hc)
	return hc, nil
}

// openContainerRoot opens /proc/<pid>/root and checks it is the
// container's root filesystem.
func openContainerRoot(hc hostContainer) (*os.Root, error) {
	r, err := os.OpenRoot(fmt.Sprintf("/proc/%d/root", hc.pid))
	if err != nil {
		return nil, err
	}
	fi, err := r.Stat(".")
	if err != nil {
		r.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || uint64(st.Dev) != hc.dev || st.Ino != hc.ino {
		r.Close()
		return nil, fmt.Errorf("%w: /proc/%d/root is not the container's root filesystem", errNoHostPath, hc.pid)
	}
	return r, nil
}

// identityMap reports whether the uid_map file maps the whole range of
// ids to itself.
func identityMap(file string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

// relPath turns an absolute sandbox path into a path relative to the
// container's root ("" for the root itself).
func relPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(p)), "/")
}

// plainParents checks that every existing component of rel's parent
// directories (all of rel when self is set) is a directory, not a
// symlink: it returns errNoHostPath when one is something else (the copy
// API resolves such paths its own way), and missing true when a component
// does not exist.
func plainParents(r *os.Root, rel string, self bool) (missing bool, err error) {
	if rel == "" {
		return false, nil
	}
	parts := strings.Split(rel, "/")
	if !self {
		parts = parts[:len(parts)-1]
	}
	cur := ""
	for _, p := range parts {
		cur = path.Join(cur, p)
		fi, err := r.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, errNoHostPath
		}
		if !fi.IsDir() {
			return false, errNoHostPath
		}
	}
	return false, nil
}

// hostCopyIn is CopyIn through the container's root directory r (the
// same entries writeTar would stream, extracted as the engine extracts
// them). It returns errNoHostPath, having written nothing, when the copy
// API should do it instead.
func hostCopyIn(ctx context.Context, r *os.Root, hostPath string, fi fs.FileInfo, sandboxDir string) error {
	dst := relPath(sandboxDir)
	missing, err := plainParents(r, dst, true)
	if err != nil {
		return err
	}
	entries, err := copyEntries(hostPath, fi, dst)
	if err != nil {
		return err
	}
	// The engine refuses to put a directory over anything else, or
	// anything else over a directory: such a copy is left to it, to fail
	// with its own error.
	for _, e := range entries {
		old, err := r.Lstat(e.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || e.fi.IsDir() != old.IsDir() {
			return errNoHostPath
		}
	}
	// Every entry's parents inside the copy are entries before it (the
	// walk is in lexical order), so only the destination's own parents
	// are made here, as the engine makes them: 0755, root.
	if missing {
		if err := mkdirAllRoot(r, dst); err != nil {
			return err
		}
	}
	type dirTimes struct {
		rel          string
		atime, mtime time.Time
	}
	var dirs []dirTimes
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		old, err := r.Lstat(e.name)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		isDir := e.fi.IsDir()
		if exists && !isDir && !old.IsDir() {
			// A file or symlink in the way is replaced, as the engine
			// does.
			if err := r.Remove(e.name); err != nil {
				return err
			}
			exists = false
		}
		switch {
		case isDir:
			if !exists {
				if err := r.Mkdir(e.name, 0o700); err != nil {
					return err
				}
			}
		case e.link != "":
			if err := r.Symlink(e.link, e.name); err != nil {
				return err
			}
			if err := r.Lchown(e.name, 0, 0); err != nil {
				return err
			}
			continue
		default:
			if err := writeFileIn(r, e.name, e.host); err != nil {
				return err
			}
		}
		if err := r.Lchown(e.name, 0, 0); err != nil {
			return err
		}
		if err := r.Chmod(e.name, e.fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
		at, mt := fileTimes(e.fi)
		if isDir {
			dirs = append(dirs, dirTimes{e.name, at, mt})
			continue
		}
		if err := r.Chtimes(e.name, at, mt); err != nil {
			return err
		}
	}
	// Directory times last, deepest first: their entries changed them.
	for _, d := range slices.Backward(dirs) {
		if err := r.Chtimes(d.rel, d.atime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// mkdirAllRoot makes rel and its missing parents, 0755 and owned by root.
func mkdirAllRoot(r *os.Root, rel string) error {
	cur := ""
	for _, p := range strings.Split(rel, "/") {
		cur = path.Join(cur, p)
		err := r.Mkdir(cur, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := r.Lchown(cur, 0, 0); err != nil {
			return err
		}
		// Made under a setgid directory, it keeps the setgid bit the
		// kernel gave it, as the engine's do; only a umask is undone.
		fi, err := r.Lstat(cur)
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != 0o755 {
			if err := r.Chmod(cur, 0o755|fi.Mode()&(fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky)); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFileIn creates rel (which must not exist) with the contents of the
// host file.
func writeFileIn(r *os.Root, rel, host string) error {
	src, err := os.Open(host)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fileTimes returns a host file's access and modification times, as a
// PAX tar header carries them.
func fileTimes(fi fs.FileInfo) (atime, mtime time.Time) {
	mtime = fi.ModTime()
	atime = mtime
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		atime = time.Unix(st.Atim.Sec, st.Atim.Nsec)
	}
	return atime, mtime
}

// typeName names a file type as checkRegular names the tar entry types.
func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "file of mode " + m.Type().String()
}

// openRegular opens rel for reading without following a final symlink or
// blocking on a fifo, and checks it is still the regular file fi.
func openRegular(r *os.Root, rel string, fi fs.FileInfo) (*os.File, error) {
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	now, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !now.Mode().IsRegular() || !os.SameFile(now, fi) {
		f.Close()
		return nil, fmt.Errorf("%w: %s changed while it was read", errNoHostPath, rel)
	}
	return f, nil
}

// readCapped reads all of f, failing with ErrTooLarge when it holds more
// than maxBytes.
func readCapped(f *os.File, name string, maxBytes int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("sandbox: read %s: %w", name, err)
	}
	if int64(len(b)) > maxBytes {
		return nil, fmt.Errorf("%w: %s is over the cap of %d bytes", sandbox.ErrTooLarge, name, maxBytes)
	}
	return b, nil
}

// hostLookup finds the entry at sandboxPath (not the root) for a read:
// its path relative to the root and its description, not followed. A
// missing entry or parent is ErrNotFound; a symlinked parent (which the
// copy API resolves its own way) or any other failure is errNoHostPath.
func hostLookup(r *os.Root, sandboxPath string) (string, fs.FileInfo, error) {
	rel := relPath(sandboxPath)
	if rel == "" {
		return "", nil, errNoHostPath
	}
	missing, err := plainParents(r, rel, false)
	if err != nil {
		return "", nil, err
	}
	fi, err := r.Lstat(rel)
	switch {
	case missing || errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
	case err != nil:
		return "", nil, errNoHostPath
	}
	return rel, fi, nil
}

// hostReadFile is ReadFile through the container's root directory.
func hostReadFile(r *os.Root, sandboxPath string, maxBytes int64) ([]byte, error) {
	rel, fi, err := hostLookup(r, sandboxPath)
	switch {
	case err != nil:
		return nil, err
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := r.Readlink(rel)
		if err != nil {
			return nil, errNoHostPath
		}
		return nil, fmt.Errorf("%w: %s is a symlink to %q", sandbox.ErrNotRegular, sandboxPath, boundText(l, 200))
	case fi.Mode()&fs.ModeSocket != 0:
		return nil, errNoHostPath // the copy API has no entry for a socket
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is a %s", sandbox.ErrNotRegular, sandboxPath, typeName(fi.Mode()))
	case fi.Size() > maxBytes:
		return nil, fmt.Errorf("%w: %s is %d bytes, over the cap of %d", sandbox.ErrTooLarge, sandboxPath, fi.Size(), maxBytes)
	}
	f, err := openRegular(r, rel, fi)
	if err != nil {
		return nil, errNoHostPath
	}
	defer f.Close()
	return readCapped(f, sandboxPath, maxBytes)
}

// hostCopyOut is CopyOutFiles through the container's root directory:
// the tree at sandboxPath copied into hostDir as extractTar would extract
// the copy API's stream of it, and the files of want (sandbox path → cap)
// read on the way.
func hostCopyOut(ctx context.Context, r *os.Root, sandboxPath, hostDir string, want map[string]int64) (map[string]sandbox.FileResult, error) {
	src, top, err := hostLookup(r, sandboxPath)
	if err != nil {
		return nil, err
	}
	if top.Mode()&fs.ModeSymlink != 0 {
		return nil, errNoHostPath // the copy API archives the link itself
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: copy out: %w", err)
	}
	c := &outCopy{ctx: ctx, r: r, hostDir: hostDir, base: path.Dir("/" + src), want: want,
		got: map[string]sandbox.FileResult{}, seen: map[fileID]string{}}
	defer func() { c.dirs.apply() }()
	if err := c.entry(src, top); err != nil {
		return nil, fmt.Errorf("sandbox: copy out %s: %w", sandboxPath, err)
	}
	return c.got, nil
}

type fileID struct{ dev, ino uint64 }

// outCopy is one hostCopyOut in progress.
type outCopy struct {
	ctx     context.Context
	r       *os.Root
	hostDir string
	base    string // the sandbox directory entry names are relative to
	want    map[string]int64
	got     map[string]sandbox.FileResult
	seen    map[fileID]string // files with more links: the first name copied
	dirs    dirModes
	// budget, when set, bounds the copy (CopyOutTree): an entry it does
	// not admit is left out, a directory with what it holds.
	budget *sandbox.TreeBudget
}

// entry copies the container's entry rel (described by fi, not followed)
// and, for a directory, what it holds, in lexical order as the engine's
// tar stream has it.
func (c *outCopy) entry(rel string, fi fs.FileInfo) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	abs := "/" + rel
	name := strings.TrimPrefix(strings.TrimPrefix(abs, c.base), "/")
	target, err := safeJoin(c.hostDir, name)
	if err != nil {
		return err
	}
	limit, wanted := c.want[abs]
	mode := fi.Mode()
	if c.budget != nil {
		if kind, size := c.treeKind(fi); kind != 0 && !c.budget.Admit(abs, kind, size) {
			return nil
		}
	}
	switch {
	case mode.IsDir():
		if wanted {
			c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is a directory", sandbox.ErrNotRegular, abs)}
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		c.dirs.add(target, mode.Perm())
		f, err := c.r.Open(rel)
		if err != nil {
			return err
		}
		list, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, de := range list {
			child := rel + "/" + de.Name()
			info, err := c.r.Lstat(child)
			if errors.Is(err, fs.ErrNotExist) {
				continue // gone since it was listed
			}
			if err != nil {
				return err
			}
			if err := c.entry(child, info); err != nil {
				return err
			}
		}
		return nil
	case mode&fs.ModeSymlink != 0:
		link, err := c.r.Readlink(rel)
		if err != nil {
			return err
		}
		if wanted {
			c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is a symlink to %q", sandbox.ErrNotRegular, abs, boundText(link, 200))}
		}
		// A linked parent directory: the copy is not descended into
		// it, and the host must not either.
		for p := range c.want {
			if strings.HasPrefix(p, abs+"/") {
				c.got[p] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is under %s, a symlink to %q", sandbox.ErrNotRegular, p, abs, boundText(link, 200))}
			}
		}
		return writeHostLink(target, link)
	case mode.IsRegular():
		return c.file(rel, abs, target, fi, limit, wanted)
	case mode&fs.ModeSocket != 0:
		return nil // no tar entry for a socket
	default:
		if wanted {
			c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is a %s", sandbox.ErrNotRegular, abs, typeName(mode))}
		}
		return nil // devices, fifos: skipped
	}
}

// treeKind is the sandbox.TreeBudget kind and size of an entry (0: an
// entry no copy makes, a device, a fifo or a socket).
func (c *outCopy) treeKind(fi fs.FileInfo) (byte, int64) {
	mode := fi.Mode()
	switch {
	case mode.IsDir():
		return sandbox.TreeDir, 0
	case mode&fs.ModeSymlink != 0:
		return sandbox.TreeLink, 0
	case mode.IsRegular():
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			if _, seen := c.seen[fileID{uint64(st.Dev), st.Ino}]; seen {
				return sandbox.TreeHardLink, 0
			}
		}
		return sandbox.TreeFile, fi.Size()
	}
	return 0, 0
}

// file copies one regular file, capturing it when wanted.
func (c *outCopy) file(rel, abs, target string, fi fs.FileInfo, limit int64, wanted bool) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		// A second name of a file already copied is a hard link, as in
		// the engine's tar stream.
		id := fileID{uint64(st.Dev), st.Ino}
		if first, ok := c.seen[id]; ok {
			if wanted {
				c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is a hard link", sandbox.ErrNotRegular, abs)}
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			_ = os.Remove(target)
			return os.Link(first, target)
		}
		c.seen[id] = target
	}
	f, err := openRegular(c.r, rel, fi)
	if err != nil {
		return err
	}
	defer f.Close()
	var src io.Reader = f
	if c.budget != nil {
		src = io.LimitReader(f, fi.Size()) // what was admitted, even if it grows
	}
	if wanted {
		if fi.Size() > limit {
			c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is %d bytes, over the cap of %d", sandbox.ErrTooLarge, abs, fi.Size(), limit)}
		} else {
			b, err := io.ReadAll(io.LimitReader(f, limit+1))
			switch {
			case err != nil:
				c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("sandbox: read %s: %w", abs, err)}
			case int64(len(b)) > limit:
				c.got[abs] = sandbox.FileResult{Err: fmt.Errorf("%w: %s grew over the cap of %d bytes while it was read", sandbox.ErrTooLarge, abs, limit)}
			default:
				c.got[abs] = sandbox.FileResult{Data: b}
			}
			src = io.MultiReader(bytes.NewReader(b), f)
		}
	}
	return writeHostFile(target, fi.Mode().Perm(), src)
}

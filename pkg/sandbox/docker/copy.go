package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// CopyIn implements Driver through the engine's copy API (a tar stream
// extracted at "/"), or with the same result through the container's root
// directory when this machine allows it (hostfs.go): a directory's contents are copied into sandboxDir, a
// file into sandboxDir under its base name; missing parents of sandboxDir
// are created (mode 0755, root). Files, directories and symlinks keep
// their permission bits and are owned by root (uid 0, gid 0); an existing
// sandboxDir keeps its own mode and owner. Other file types are skipped.
// A missing hostPath is ErrNotFound.
func (d *Driver) CopyIn(ctx context.Context, h *sandbox.Handle, hostPath, sandboxDir string) error {
	cid, err := d.container(h)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(hostPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, hostPath)
	} else if err != nil {
		return fmt.Errorf("sandbox: copy in: %w", err)
	}
	if r, ok := d.hostRoot(ctx, cid, true); ok {
		err := hostCopyIn(ctx, r, hostPath, fi, sandboxDir)
		r.Close()
		if !errors.Is(err, errNoHostPath) {
			if err != nil {
				return fmt.Errorf("sandbox: copy in %s to %s: %w", hostPath, sandboxDir, err)
			}
			d.hostOps.Add(1)
			return nil
		}
	}
	prefix := relPath(sandboxDir)
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeTar(pw, hostPath, fi, prefix))
	}()
	err = d.cli.CopyToContainer(ctx, cid, "/", pr, container.CopyToContainerOptions{})
	pr.CloseWithError(io.ErrClosedPipe) // stop the writer if the engine quit early
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
		}
		return fmt.Errorf("sandbox: copy in %s to %s: %w", hostPath, sandboxDir, err)
	}
	return nil
}

// inEntry is one entry CopyIn puts in the sandbox: its name (its path
// relative to the container's root), the host file it comes from, and a
// symlink's target.
type inEntry struct {
	name, host string
	fi         fs.FileInfo
	link       string
}

// copyEntries lists what CopyIn puts in the sandbox for hostPath, in
// lexical order (a directory before what it holds): for a directory, its
// contents under prefix (prefix itself only when the directory is empty);
// for a file or symlink, prefix/<base name>. Sockets, devices and fifos
// are left out.
func copyEntries(hostPath string, fi fs.FileInfo, prefix string) ([]inEntry, error) {
	join := func(rel string) string {
		if prefix == "" {
			return rel
		}
		if rel == "" {
			return prefix
		}
		return prefix + "/" + rel
	}
	var entries []inEntry
	add := func(p, name string, fi fs.FileInfo) error {
		e := inEntry{name: name, host: p, fi: fi}
		if fi.Mode()&fs.ModeSymlink != 0 {
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.link = l
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil // sockets, devices, fifos
		}
		entries = append(entries, e)
		return nil
	}
	if !fi.IsDir() {
		err := add(hostPath, join(filepath.Base(hostPath)), fi)
		return entries, err
	}
	n := 0
	err := filepath.WalkDir(hostPath, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(hostPath, p)
		if rel == "." {
			return nil
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		n++
		return add(p, join(filepath.ToSlash(rel)), info)
	})
	if err != nil {
		return nil, err
	}
	if n == 0 && prefix != "" {
		// An empty directory: create sandboxDir itself.
		if err := add(hostPath, prefix, fi); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// writeTar writes the entries of copyEntries as a tar stream, owned by
// uid/gid 0. Directory entries carry no trailing slash, so the engine
// creates their missing parents.
func writeTar(w io.Writer, hostPath string, fi fs.FileInfo, prefix string) error {
	entries, err := copyEntries(hostPath, fi, prefix)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr, err := tar.FileInfoHeader(e.fi, e.link)
		if err != nil {
			return err
		}
		hdr.Name = e.name
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if e.fi.Mode().IsRegular() {
			f, err := os.Open(e.host)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// CopyOut implements Driver through the engine's copy API, or with the
// same result through the container's root directory (hostfs.go): sandboxPath
// (file, symlink or directory tree) is copied into hostDir under its base
// name; hostDir is created when missing. Permission bits are kept;
// ownership is the current user's. Entries that would land outside hostDir
// or be written through a symlink are refused with an error. A missing
// sandboxPath is ErrNotFound.
func (d *Driver) CopyOut(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string) error {
	_, err := d.CopyOutFiles(ctx, h, sandboxPath, hostDir, nil)
	return err
}

// CopyOutFiles is CopyOut that also reads, from the same tar stream, the
// files named in files (absolute sandbox paths under sandboxPath → size cap
// in bytes, > 0), so the caller never reads them through the host: each
// must be a regular file of at most its cap, as ReadFile checks; a symlink,
// device, fifo or directory in its place, or a symlink in place of one of
// its parent directories under sandboxPath, is a FileResult with an error
// wrapping ErrNotRegular, an oversized one wraps ErrTooLarge. A file that
// is not in the tree is absent from the result. Errors are as CopyOut's.
func (d *Driver) CopyOutFiles(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string, files map[string]int64) (map[string]sandbox.FileResult, error) {
	cid, err := d.container(h)
	if err != nil {
		return nil, err
	}
	want := map[string]int64{} // tar entry name → cap
	names := map[string]string{}
	base := path.Dir(path.Clean("/" + sandboxPath))
	for p, limit := range files {
		rel := strings.TrimPrefix(path.Clean(p), base)
		rel = strings.TrimPrefix(rel, "/")
		if limit <= 0 || rel == "" || !strings.HasPrefix(path.Clean(p), path.Clean("/"+sandboxPath)+"/") {
			return nil, fmt.Errorf("%w: CopyOutFiles: %s is not under %s or has no positive cap", sandbox.ErrInvalidSpec, p, sandboxPath)
		}
		want[rel], names[rel] = limit, p
	}
	if r, ok := d.hostRoot(ctx, cid, false); ok {
		wantAbs := make(map[string]int64, len(files))
		for p, limit := range files {
			wantAbs[path.Clean(p)] = limit
		}
		got, err := hostCopyOut(ctx, r, sandboxPath, hostDir, wantAbs)
		r.Close()
		if !errors.Is(err, errNoHostPath) {
			if err != nil {
				return nil, err
			}
			// Keyed by the caller's names, as the stream's results are.
			out := make(map[string]sandbox.FileResult, len(got))
			for p := range files {
				if f, ok := got[path.Clean(p)]; ok {
					out[p] = f
				}
			}
			d.hostOps.Add(1)
			return out, nil
		}
	}
	rc, _, err := d.cli.CopyFromContainer(ctx, cid, sandboxPath)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			// The engine says not found both for the path and for the
			// container; tell them apart.
			if _, ierr := d.cli.ContainerInspect(ctx, cid); cerrdefs.IsNotFound(ierr) {
				return nil, fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
			}
			return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
		}
		return nil, fmt.Errorf("sandbox: copy out %s: %w", sandboxPath, err)
	}
	defer rc.Close()
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: copy out: %w", err)
	}
	got := map[string]sandbox.FileResult{}
	capture := func(hdr *tar.Header, r io.Reader) ([]byte, bool) {
		name := strings.TrimSuffix(hdr.Name, "/")
		if limit, ok := want[name]; ok {
			if err := checkRegular(hdr, names[name], limit); err != nil {
				got[names[name]] = sandbox.FileResult{Err: err}
				return nil, false
			}
			b := make([]byte, hdr.Size)
			if _, err := io.ReadFull(r, b); err != nil {
				got[names[name]] = sandbox.FileResult{Err: err}
				return nil, false
			}
			got[names[name]] = sandbox.FileResult{Data: b}
			return b, true
		}
		if hdr.Typeflag == tar.TypeSymlink {
			// A linked parent directory: the engine does not descend into
			// it, and the host must not either.
			for rel, p := range names {
				if strings.HasPrefix(rel, name+"/") {
					got[p] = sandbox.FileResult{Err: fmt.Errorf("%w: %s is under %s, a symlink to %q", sandbox.ErrNotRegular, p, "/"+path.Join(strings.TrimPrefix(base, "/"), name), boundText(hdr.Linkname, 200))}
				}
			}
		}
		return nil, false
	}
	if err := extractTar(rc, hostDir, capture, nil); err != nil {
		return nil, fmt.Errorf("sandbox: copy out %s: %w", sandboxPath, err)
	}
	return got, nil
}

// ReadFile returns the contents of the regular file at sandboxPath, read
// straight from the engine's copy API's tar stream, or through the
// container's root directory with every path resolved inside it
// (hostfs.go): nothing is written to or resolved on the host, so a file the sandbox made a symlink (to
// /etc/hostname, to /dev/zero, to a file of the host) is never followed.
// The tar entry's type must be a regular file, else the error wraps
// ErrNotRegular and names the type (and a symlink's target); a file over
// maxBytes (bytes, > 0) is not read and the error wraps ErrTooLarge with its
// size. Parent directories of sandboxPath are resolved by the engine
// inside the container's root filesystem, never on the host. A missing
// path is ErrNotFound; a removed container is ErrDestroyed.
func (d *Driver) ReadFile(ctx context.Context, h *sandbox.Handle, sandboxPath string, maxBytes int64) ([]byte, error) {
	cid, err := d.container(h)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		return nil, fmt.Errorf("%w: ReadFile needs a positive size cap", sandbox.ErrInvalidSpec)
	}
	if r, ok := d.hostRoot(ctx, cid, false); ok {
		b, err := hostReadFile(r, sandboxPath, maxBytes)
		r.Close()
		if !errors.Is(err, errNoHostPath) {
			d.hostOps.Add(1)
			return b, err
		}
	}
	rc, _, err := d.cli.CopyFromContainer(ctx, cid, sandboxPath)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			if _, ierr := d.cli.ContainerInspect(ctx, cid); cerrdefs.IsNotFound(ierr) {
				return nil, fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
			}
			return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
		}
		return nil, fmt.Errorf("sandbox: read %s: %w", sandboxPath, err)
	}
	defer rc.Close()
	return readOneRegular(rc, sandboxPath, maxBytes)
}

// readOneRegular reads the first entry of a tar stream, which must be a
// regular file of at most maxBytes bytes.
func readOneRegular(r io.Reader, name string, maxBytes int64) ([]byte, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("sandbox: read %s: %w", name, err)
	}
	if err := checkRegular(hdr, name, maxBytes); err != nil {
		return nil, err
	}
	b := make([]byte, hdr.Size)
	if _, err := io.ReadFull(tr, b); err != nil {
		return nil, fmt.Errorf("sandbox: read %s: %w", name, err)
	}
	return b, nil
}

// checkRegular returns nil when hdr is a regular file of at most maxBytes,
// else an error wrapping ErrNotRegular or ErrTooLarge naming it as name.
func checkRegular(hdr *tar.Header, name string, maxBytes int64) error {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
	case tar.TypeSymlink:
		return fmt.Errorf("%w: %s is a symlink to %q", sandbox.ErrNotRegular, name, boundText(hdr.Linkname, 200))
	default:
		return fmt.Errorf("%w: %s is a %s", sandbox.ErrNotRegular, name, tarTypeName(hdr.Typeflag))
	}
	if hdr.Size > maxBytes {
		return fmt.Errorf("%w: %s is %d bytes, over the cap of %d", sandbox.ErrTooLarge, name, hdr.Size, maxBytes)
	}
	return nil
}

func tarTypeName(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeDir:
		return "directory"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}

// boundText cuts s to n bytes (valid UTF-8), for container-made text put
// into errors.
func boundText(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// extractTar extracts a tar stream into dir, refusing entries that escape
// dir or pass through a symlink. Directory modes are applied last. capture,
// when not nil, sees every entry first; when it returns ok, the entry is a
// regular file whose contents it has read and returned, and they are
// written from that. admit, when not nil, decides next whether the entry
// is extracted at all (its error ends the extraction with that error).
func extractTar(r io.Reader, dir string, capture func(*tar.Header, io.Reader) ([]byte, bool), admit func(*tar.Header) (bool, error)) error {
	tr := tar.NewReader(r)
	var dirs dirModes
	defer func() { dirs.apply() }() // the modes of the dirs made by then
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target, err := safeJoin(dir, hdr.Name)
		if err != nil {
			return err
		}
		if admit != nil {
			ok, err := admit(hdr)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		var src io.Reader = tr
		if capture != nil {
			if b, ok := capture(hdr, tr); ok {
				src = bytes.NewReader(b)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			dirs.add(target, mode)
		case tar.TypeReg:
			if err := writeHostFile(target, mode, src); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := writeHostLink(target, hdr.Linkname); err != nil {
				return err
			}
		case tar.TypeLink:
			src, err := safeJoin(dir, hdr.Linkname)
			if err != nil {
				return err
			}
			_ = os.Remove(target)
			if err := os.Link(src, target); err != nil {
				return err
			}
		default:
			// Devices, fifos: skipped.
		}
	}
}

// dirModes are the modes of the directories a copy out made, applied once
// their contents are in (a directory without write permission would stop
// them), deepest first.
type dirModes []dirMode

type dirMode struct {
	path string
	mode fs.FileMode
}

func (d *dirModes) add(path string, mode fs.FileMode) { *d = append(*d, dirMode{path, mode}) }

func (d dirModes) apply() {
	for i := len(d) - 1; i >= 0; i-- {
		_ = os.Chmod(d[i].path, d[i].mode)
	}
}

// writeHostFile writes a copied-out file at target (its parents made,
// whatever stood there removed, never written through), with mode.
func writeHostFile(target string, mode fs.FileMode, src io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	_ = os.Remove(target)
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o200)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Chmod(target, mode)
}

// writeHostLink stores a copied-out symlink at target as a symlink.
func writeHostLink(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	_ = os.Remove(target)
	return os.Symlink(link, target)
}

// safeJoin joins the tar entry name to dir, refusing a name that leaves
// dir or whose parent directories inside dir include a symlink.
func safeJoin(dir, name string) (string, error) {
	clean := path.Clean("/" + name)
	if clean == "/" {
		return "", fmt.Errorf("tar entry %q: empty name", name)
	}
	target := filepath.Join(dir, filepath.FromSlash(clean))
	rel, err := filepath.Rel(dir, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("tar entry %q leaves the destination", name)
	}
	// Every parent inside dir must be a real directory (or not exist yet).
	cur := dir
	parts := strings.Split(rel, string(filepath.Separator))
	for _, p := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, p)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("tar entry %q passes through the symlink %s", name, cur)
		}
	}
	return target, nil
}

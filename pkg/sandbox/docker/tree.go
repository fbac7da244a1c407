package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

var _ sandbox.TreeCopier = (*Driver)(nil)

// StreamSkipLimit bounds what CopyOutTree reads of the engine's tar stream
// only to leave it out: past this many bytes of files left out (or
// 16 × MaxEntries entries left out), the rest of the stream is not read
// and the copy is recorded as truncated there. A sparse file of 100 GB
// costs the stream 100 GB of zeros; this keeps a hostile tree from
// holding the cell that long.
const StreamSkipLimit = 1 << 30

// errTreeStop ends the extraction of a tree whose skipped part reached
// StreamSkipLimit.
var errTreeStop = errors.New("sandbox: tree copy stopped")

// CopyOutTree implements sandbox.TreeCopier, through the container's root
// directory (hostfs.go) when this machine allows it, else the engine's
// copy API: sandboxPath is copied into hostDir under its base name as
// CopyOut copies it, within lim. Entries are taken in lexical order (a
// directory before what it holds); a regular file larger than what is
// left of lim.MaxBytes is left out and later, smaller files are still
// copied; once lim.MaxEntries entries are copied, every later one is left
// out. A file is never half copied: on the host path one that grows
// while it is copied is cut at the size it was admitted with. A missing
// sandboxPath is ErrNotFound; limits that are not positive are
// ErrInvalidSpec.
func (d *Driver) CopyOutTree(ctx context.Context, h *sandbox.Handle, sandboxPath, hostDir string, lim sandbox.TreeLimits) (sandbox.TreeCopy, error) {
	if lim.MaxBytes <= 0 || lim.MaxEntries <= 0 {
		return sandbox.TreeCopy{}, fmt.Errorf("%w: CopyOutTree needs positive limits, got %+v", sandbox.ErrInvalidSpec, lim)
	}
	cid, err := d.container(h)
	if err != nil {
		return sandbox.TreeCopy{}, err
	}
	b := &sandbox.TreeBudget{Lim: lim}
	if r, ok := d.hostRoot(ctx, cid, false); ok {
		err := hostCopyOutTree(ctx, r, sandboxPath, hostDir, b)
		r.Close()
		if !errors.Is(err, errNoHostPath) {
			if err != nil {
				return sandbox.TreeCopy{}, err
			}
			d.hostOps.Add(1)
			return b.Copy, nil
		}
		b = &sandbox.TreeBudget{Lim: lim} // nothing was written
	}
	rc, _, err := d.cli.CopyFromContainer(ctx, cid, sandboxPath)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			if _, ierr := d.cli.ContainerInspect(ctx, cid); cerrdefs.IsNotFound(ierr) {
				return sandbox.TreeCopy{}, fmt.Errorf("%w: %v", sandbox.ErrDestroyed, err)
			}
			return sandbox.TreeCopy{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, sandboxPath)
		}
		return sandbox.TreeCopy{}, fmt.Errorf("sandbox: copy out %s: %w", sandboxPath, err)
	}
	defer rc.Close()
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return sandbox.TreeCopy{}, fmt.Errorf("sandbox: copy out: %w", err)
	}
	base := path.Dir(path.Clean("/" + sandboxPath))
	seen := map[string]bool{}  // regular files copied, by entry name
	left := map[string]int64{} // regular files left out: their size
	// The last directory left out: what it holds follows it in the
	// stream (a depth-first walk) and goes unrecorded.
	leftDir := ""
	admit := func(hdr *tar.Header) (bool, error) {
		name := strings.TrimSuffix(hdr.Name, "/")
		abs := path.Join(base, name)
		if leftDir != "" && strings.HasPrefix(name, leftDir+"/") {
			return false, nil
		}
		var kind byte
		var size int64
		switch hdr.Typeflag {
		case tar.TypeDir:
			kind = sandbox.TreeDir
		case tar.TypeSymlink:
			kind = sandbox.TreeLink
		case tar.TypeReg, tar.TypeRegA:
			kind, size = sandbox.TreeFile, hdr.Size
		case tar.TypeLink:
			first := strings.TrimSuffix(hdr.Linkname, "/")
			if size, ok := left[first]; ok {
				// Its first name was left out: so is this one, as the
				// host path leaves out a file it sees first here.
				b.Skip(abs, size)
				left[name] = size
				return false, nil
			}
			if !seen[first] {
				return false, nil
			}
			kind = sandbox.TreeHardLink
		default:
			return false, nil // devices, fifos: as CopyOut, never made
		}
		if b.Admit(abs, kind, size) {
			if kind == sandbox.TreeFile {
				seen[name] = true
			}
			return true, nil
		}
		switch kind {
		case sandbox.TreeFile:
			left[name] = size
		case sandbox.TreeDir:
			leftDir = name
		}
		if b.Copy.SkippedBytes > StreamSkipLimit || b.Copy.SkippedEntries > 16*lim.MaxEntries {
			return false, errTreeStop
		}
		return false, nil
	}
	err = extractTar(rc, hostDir, nil, admit)
	if errors.Is(err, errTreeStop) {
		b.Skip(base+"/… (the rest of the tree: not read, over the skip limit)", -1)
		err = nil
	}
	if err != nil {
		return sandbox.TreeCopy{}, fmt.Errorf("sandbox: copy out %s: %w", sandboxPath, err)
	}
	return b.Copy, nil
}

// hostCopyOutTree is hostCopyOut of a whole tree within the budget b.
func hostCopyOutTree(ctx context.Context, r *os.Root, sandboxPath, hostDir string, b *sandbox.TreeBudget) error {
	src, top, err := hostLookup(r, sandboxPath)
	if err != nil {
		return err
	}
	if top.Mode()&os.ModeSymlink != 0 {
		return errNoHostPath // the copy API archives the link itself
	}
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return fmt.Errorf("sandbox: copy out: %w", err)
	}
	c := &outCopy{ctx: ctx, r: r, hostDir: hostDir, base: path.Dir("/" + src),
		got: map[string]sandbox.FileResult{}, seen: map[fileID]string{}, budget: b}
	defer func() { c.dirs.apply() }()
	if err := c.entry(src, top); err != nil {
		return fmt.Errorf("sandbox: copy out %s: %w", sandboxPath, err)
	}
	return nil
}

// Package trees stores directories in a JetStream object store so that a
// cluster needs no shared file system: a task revision, an agent or skill
// directory goes in once, content-addressed by its digest, and every
// worker fetches and caches it; a cell's output directory comes back
// the same way under a name of its own.
//
// A tree is stored as a deterministic tar (sorted paths, a file's mode
// reduced to 0644 or 0755, no times, owners or directories; regular files
// first, then symbolic links) compressed with zstd. Its digest is the
// revision pkg/task gives a task of the same files (task.Manifest), so a
// task's object name is its revision. Extraction never writes outside its
// directory: paths are relative and clean, files are written through an
// os.Root, links are made last and only when their target stays inside.
package trees

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ErrDigest is the error of a tree whose files do not have the digest it
// was stored or named under (a tampered or corrupted object).
var ErrDigest = errors.New("trees: digest mismatch")

// ErrUnsafe is the error of a tree that would leave its directory: an
// absolute or dot-dot path, or a symbolic link whose target leaves it.
var ErrUnsafe = errors.New("trees: path leaves the tree")

// walkFunc lists a directory's entries (task.WalkTree's shape).
type walkFunc func(dir string) ([]task.TreeEntry, error)

// inputWalk walks an input tree with a task revision's rules, following
// links inside root.
func inputWalk(root string) walkFunc {
	return func(dir string) ([]task.TreeEntry, error) {
		if root == "" {
			return task.WalkTree(dir, dir)
		}
		return task.WalkTree(dir, root)
	}
}

// Digest is the digest of the tree at dir with a task revision's rules
// (task.WalkTree with dir as its own root): the name Put stores it under.
func Digest(dir string) (string, error) {
	entries, err := task.WalkTree(dir, dir)
	if err != nil {
		return "", err
	}
	return digestOf(dir, entries)
}

// digestOf hashes entries (files read from their Path).
func digestOf(dir string, entries []task.TreeEntry) (string, error) {
	return writeTar(io.Discard, dir, entries, false)
}

// Put stores the tree at dir (its own root: links are followed only
// inside it) in store, the bucket of b, under its digest, unless the
// store already holds that name, and returns the digest. A tree already
// there is touched (Touch), which keeps it from a collection for the
// grace (PlanSweep): call Put for every tree a run reads before the run's
// CellPlanned events name it.
func Put(ctx context.Context, b *bus.Bus, store jetstream.ObjectStore, dir string) (string, error) {
	return PutWithin(ctx, b, store, dir, dir)
}

// PutWithin is Put for a directory inside root whose links may reach
// anywhere inside root (a task inside its tasks root: its digest is then
// its revision). A tree holding a link that leaves it is refused
// (ErrUnsafe), as a task holding one is blocked.
func PutWithin(ctx context.Context, b *bus.Bus, store jetstream.ObjectStore, dir, root string) (string, error) {
	entries, err := task.WalkTree(dir, root)
	if err != nil {
		return "", fmt.Errorf("trees: %w", err)
	}
	for _, e := range entries {
		if e.Path == "" && !linkInside(e.Rel, e.Link) {
			return "", fmt.Errorf("%w: %s: %s is a symlink to %s", ErrUnsafe, dir, e.Rel, e.Link)
		}
	}
	digest, err := digestOf(dir, entries)
	if err != nil {
		return "", err
	}
	if found, err := Touch(ctx, b, digest); err != nil {
		return "", err
	} else if found {
		return digest, nil
	}
	got, err := upload(ctx, store, jetstream.ObjectMeta{Name: digest, Metadata: declare(entries)}, dir, entries, false)
	if err != nil {
		return "", err
	}
	if got != digest {
		// A file changed between the two passes: the object is not
		// the tree it is named after.
		_ = store.Delete(ctx, digest)
		return "", fmt.Errorf("%w: %s changed while it was stored", ErrDigest, dir)
	}
	return digest, nil
}

// upload streams the tar of entries into the object meta names and
// returns the digest of what it wrote.
func upload(ctx context.Context, store jetstream.ObjectStore, meta jetstream.ObjectMeta, dir string, entries []task.TreeEntry, skipUnsafe bool) (string, error) {
	name := meta.Name
	pr, pw := io.Pipe()
	done := make(chan string, 1)
	go func() {
		defer close(done)
		zw, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		digest, err := writeTar(zw, dir, entries, skipUnsafe)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err)
		done <- digest
	}()
	_, err := store.Put(ctx, meta, pr)
	pr.CloseWithError(errors.New("trees: upload ended"))
	digest := <-done
	if err != nil {
		return "", fmt.Errorf("trees: put %s: %w", name, err)
	}
	return digest, nil
}

// writeTar writes the tar of entries (files read from their Path) to w
// and returns the digest of what it wrote. With skipUnsafe, a link that
// leaves the tree is left out (an output tree); without, it is written.
func writeTar(w io.Writer, dir string, entries []task.TreeEntry, skipUnsafe bool) (string, error) {
	var tw *tar.Writer
	if w != io.Discard {
		tw = tar.NewWriter(w)
	}
	h := sha256.New()
	buf := make([]byte, 64*1024)
	sums := make([][sha256.Size]byte, len(entries))
	for i, e := range entries {
		if e.Path == "" {
			continue
		}
		f, err := os.Open(e.Path)
		if err != nil {
			return "", fmt.Errorf("trees: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return "", fmt.Errorf("trees: %w", err)
		}
		h.Reset()
		var dst io.Writer = h
		if tw != nil {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.Rel, Mode: fileMode(fi.Mode()), Size: fi.Size(), Format: tar.FormatPAX}); err != nil {
				f.Close()
				return "", fmt.Errorf("trees: %s: %w", e.Rel, err)
			}
			dst = io.MultiWriter(h, tw)
		}
		// A file that grows while it is read is cut at its size; one
		// that shrinks is an error (the tar header is written).
		n, err := io.CopyBuffer(dst, io.LimitReader(f, fi.Size()), buf)
		f.Close()
		if err == nil && n != fi.Size() {
			err = fmt.Errorf("%s shrank while it was read", e.Rel)
		}
		if err != nil {
			return "", fmt.Errorf("trees: %s: %w", filepath.Join(dir, e.Rel), err)
		}
		h.Sum(sums[i][:0])
	}
	for _, e := range entries {
		if e.Path != "" {
			continue
		}
		if skipUnsafe && !linkInside(e.Rel, e.Link) {
			continue
		}
		if tw != nil {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: e.Rel, Linkname: e.Link, Mode: 0o777, Format: tar.FormatPAX}); err != nil {
				return "", fmt.Errorf("trees: %s: %w", e.Rel, err)
			}
		}
	}
	if tw != nil {
		if err := tw.Close(); err != nil {
			return "", err
		}
	}
	// The tar holds files before links; the manifest, like a task's
	// revision, lists both in path order.
	m := task.NewManifest()
	for i, e := range entries {
		switch {
		case e.Path != "":
			m.File(e.Rel, sums[i][:])
		case !skipUnsafe || linkInside(e.Rel, e.Link):
			m.Link(e.Rel, e.Link)
		}
	}
	return m.Sum(), nil
}

// fileMode is a tar mode: 0755 when any execute bit is set, else 0644.
func fileMode(m fs.FileMode) int64 {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// linkInside reports whether the link at rel with text target stays
// inside its tree when resolved lexically.
func linkInside(rel, target string) bool {
	if target == "" || path.IsAbs(target) || strings.HasPrefix(target, "/") {
		return false
	}
	p := path.Join(path.Dir(rel), target)
	return p != ".." && !strings.HasPrefix(p, "../")
}

// safeRel reports whether name is a clean relative slash path inside its
// tree.
func safeRel(name string) bool {
	if name == "" || path.IsAbs(name) || strings.Contains(name, "\\") || strings.Contains(name, "\x00") {
		return false
	}
	c := path.Clean(name)
	return c == name && c != "." && c != ".." && !strings.HasPrefix(c, "../")
}

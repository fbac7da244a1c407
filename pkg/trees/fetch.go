package trees

import (
	"archive/tar"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ErrTooLarge is the error of a tree whose extraction passes the size or
// the number of entries its object declares, or the Limits of the
// extraction (a hostile archive: a few bytes that expand to fill the
// disk). Nothing of it is kept.
var ErrTooLarge = errors.New("trees: tree too large")

// Limits bound one extraction. A zero field is DefaultLimits' value.
type Limits struct {
	// Bytes is the most bytes of regular files one tree may hold.
	Bytes int64
	// Entries is the most entries (files, links, directories) one tree
	// may hold.
	Entries int
}

// DefaultLimits bound an extraction when the caller sets none: 8 GiB of
// files, one million entries.
var DefaultLimits = Limits{Bytes: 8 << 30, Entries: 1_000_000}

func (l Limits) orDefault() Limits {
	if l.Bytes <= 0 {
		l.Bytes = DefaultLimits.Bytes
	}
	if l.Entries <= 0 {
		l.Entries = DefaultLimits.Entries
	}
	return l
}

// Object metadata Put records with an input tree: the bytes of its files
// and its number of entries, which its extraction may not pass.
const (
	metaBytes   = "proctor-tree-bytes"
	metaEntries = "proctor-tree-entries"
)

// declare is the metadata of an input tree of entries.
func declare(entries []task.TreeEntry) map[string]string {
	var n int64
	for _, e := range entries {
		if e.Path == "" {
			continue
		}
		if fi, err := os.Stat(e.Path); err == nil {
			n += fi.Size()
		}
	}
	return map[string]string{metaBytes: strconv.FormatInt(n, 10), metaEntries: strconv.Itoa(len(entries))}
}

// Fetch returns the directory cacheDir/<digest> holding the tree stored
// under digest, fetching it on a miss (Cache.Fetch with no size bound
// and DefaultLimits). The tree is not held: a bounded cache in another
// process may remove it; a cell that reads it holds it with Cache.Fetch.
func Fetch(ctx context.Context, store jetstream.ObjectStore, digest, cacheDir string) (string, error) {
	dir, release, err := Cache{Dir: cacheDir}.Fetch(ctx, store, digest)
	if err != nil {
		return "", err
	}
	release()
	return dir, nil
}

// validDigest reports whether s is a hex SHA-256 (a tree's digest).
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// download extracts the object name into the empty directory dir, within
// lim and within the size and entries the object declares.
func download(ctx context.Context, store jetstream.ObjectStore, name, dir string, lim Limits) error {
	obj, err := store.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("trees: get %s: %w", name, err)
	}
	defer obj.Close()
	lim = lim.orDefault()
	if info, err := obj.Info(); err == nil && info != nil {
		if n, err := strconv.ParseInt(info.Metadata[metaBytes], 10, 64); err == nil && n >= 0 && n < lim.Bytes {
			lim.Bytes = n
		}
		if n, err := strconv.Atoi(info.Metadata[metaEntries]); err == nil && n >= 0 && n < lim.Entries {
			lim.Entries = n
		}
	}
	// A window over 64 MiB is refused: the encoder writes far less, and a
	// hostile frame must not make the decoder allocate gigabytes.
	zr, err := zstd.NewReader(obj, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return fmt.Errorf("trees: %s: %w", name, err)
	}
	defer zr.Close()
	if err := ExtractWithin(zr, dir, lim); err != nil {
		return fmt.Errorf("trees: %s: %w", name, err)
	}
	// Read to the end so the object store checks its own digest of the
	// bytes it sent.
	if _, err := io.Copy(io.Discard, obj); err != nil {
		return fmt.Errorf("trees: %s: %w", name, err)
	}
	return nil
}

// Extract is ExtractWithin under DefaultLimits.
func Extract(r io.Reader, dir string) error { return ExtractWithin(r, dir, DefaultLimits) }

// ExtractWithin writes the tar read from r into the existing directory
// dir. It refuses (ErrUnsafe) an entry whose path is absolute, not clean
// or leaves dir, a link whose target leaves dir, a path given twice and
// any entry that is neither a regular file, a directory nor a symbolic
// link; and (ErrTooLarge) a tree whose files pass lim.Bytes or whose
// entries pass lim.Entries, checked from each header before its file is
// written. Files are written through an os.Root of dir and links are
// made after every file, so no write follows a link.
func ExtractWithin(r io.Reader, dir string, lim Limits) error {
	lim = lim.orDefault()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type link struct{ name, target string }
	var links []link
	seen := map[string]bool{}
	var total int64
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if !safeRel(h.Name) {
			return fmt.Errorf("%w: entry %q", ErrUnsafe, h.Name)
		}
		if seen[h.Name] {
			return fmt.Errorf("%w: entry %q given twice", ErrUnsafe, h.Name)
		}
		seen[h.Name] = true
		if len(seen) > lim.Entries {
			return fmt.Errorf("%w: entry %q is past the tree's %d entries", ErrTooLarge, h.Name, lim.Entries)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(h.Name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size < 0 || h.Size > lim.Bytes-total {
				return fmt.Errorf("%w: entry %q (%d bytes) takes the tree past its %d bytes", ErrTooLarge, h.Name, h.Size, lim.Bytes)
			}
			total += h.Size
			if d := path.Dir(h.Name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			f, err := root.OpenFile(h.Name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(fileMode(os.FileMode(h.Mode))))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			if !linkInside(h.Name, h.Linkname) {
				return fmt.Errorf("%w: %s is a symlink to %s", ErrUnsafe, h.Name, h.Linkname)
			}
			links = append(links, link{h.Name, h.Linkname})
		default:
			return fmt.Errorf("%w: entry %q has type %q", ErrUnsafe, h.Name, h.Typeflag)
		}
	}
	for _, l := range links {
		if d := path.Dir(l.name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := root.Symlink(l.target, l.name); err != nil {
			return err
		}
	}
	return nil
}

// fetchInto extracts the tree stored under digest into a temporary
// directory of cacheDir, checks its digest (ErrDigest: nothing is kept)
// and renames it to dst; a dst another fetch renamed first is kept.
func fetchInto(ctx context.Context, store jetstream.ObjectStore, digest, cacheDir, dst string, lim Limits) error {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fmt.Errorf("trees: cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, tmpFetch+digest[:12]+"-")
	if err != nil {
		return fmt.Errorf("trees: cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := download(ctx, store, digest, tmp, lim); err != nil {
		return err
	}
	got, err := Digest(tmp)
	if err != nil {
		return fmt.Errorf("trees: %s: %w", digest, err)
	}
	if got != digest {
		return fmt.Errorf("%w: object %s holds a tree of digest %s", ErrDigest, digest, got)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if fi, serr := os.Stat(dst); serr == nil && fi.IsDir() {
			return nil // another fetch of the same digest won
		}
		return fmt.Errorf("trees: cache: %w", err)
	}
	return nil
}

// tmpFetch and tmpEvict prefix the cache's temporary directories: a tree
// being extracted, a tree being removed.
const (
	tmpFetch = ".fetch-"
	tmpEvict = ".evict-"
)

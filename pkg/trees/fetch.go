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
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"
)

// Fetch returns the directory cacheDir/<digest> holding the tree stored
// under digest, fetching it on a miss: the object is extracted into a
// temporary directory beside it, the digest of what was extracted is
// checked (ErrDigest when it differs: the tree is not kept) and the
// directory is renamed into place, so a half-extracted or tampered tree is
// never seen there. Concurrent fetches of one digest, in one process or
// several, are safe: the first rename wins and the others use its tree.
func Fetch(ctx context.Context, store jetstream.ObjectStore, digest, cacheDir string) (string, error) {
	if !validDigest(digest) {
		return "", fmt.Errorf("trees: %q is not a digest", digest)
	}
	dst := filepath.Join(cacheDir, digest)
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		return dst, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("trees: cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-"+digest[:12]+"-")
	if err != nil {
		return "", fmt.Errorf("trees: cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := download(ctx, store, digest, tmp); err != nil {
		return "", err
	}
	got, err := Digest(tmp)
	if err != nil {
		return "", fmt.Errorf("trees: %s: %w", digest, err)
	}
	if got != digest {
		return "", fmt.Errorf("%w: object %s holds a tree of digest %s", ErrDigest, digest, got)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if fi, serr := os.Stat(dst); serr == nil && fi.IsDir() {
			return dst, nil // another fetch of the same digest won
		}
		return "", fmt.Errorf("trees: cache: %w", err)
	}
	return dst, nil
}

// validDigest reports whether s is a hex SHA-256 (a tree's digest).
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// download extracts the object name into the empty directory dir.
func download(ctx context.Context, store jetstream.ObjectStore, name, dir string) error {
	obj, err := store.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("trees: get %s: %w", name, err)
	}
	defer obj.Close()
	zr, err := zstd.NewReader(obj, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("trees: %s: %w", name, err)
	}
	defer zr.Close()
	if err := Extract(zr, dir); err != nil {
		return fmt.Errorf("trees: %s: %w", name, err)
	}
	// Read to the end so the object store checks its own digest of the
	// bytes it sent.
	if _, err := io.Copy(io.Discard, obj); err != nil {
		return fmt.Errorf("trees: %s: %w", name, err)
	}
	return nil
}

// Extract writes the tar read from r into the existing directory dir. It
// refuses (ErrUnsafe) an entry whose path is absolute, not clean or
// leaves dir, a link whose target leaves dir, a path given twice and any
// entry that is neither a regular file, a directory nor a symbolic link.
// Files are written through an os.Root of dir and links are made after
// every file, so no write follows a link.
func Extract(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type link struct{ name, target string }
	var links []link
	seen := map[string]bool{}
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
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(h.Name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
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

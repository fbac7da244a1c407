package trees

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Cache is a node's directory of fetched trees, each at Dir/<digest>.
//
// A tree a caller holds (Fetch's release not yet called) is never
// removed: Fetch takes a shared lock on the tree's directory, eviction
// an exclusive one it does not wait for, so the rule holds across the
// processes of one node (a launcher and a verifier sharing
// $PROCTOR_HOME). On systems without flock(2) eviction never runs.
type Cache struct {
	// Dir is the cache's directory.
	Dir string
	// MaxBytes bounds the bytes of the files of the trees kept; 0 is no
	// bound. Once a fetch has added a tree, the trees used least
	// recently (each Fetch marks its tree used) are removed until the
	// rest fit, except trees held; while they are held the cache may
	// pass the bound.
	MaxBytes int64
	// Limits bound one tree's extraction (zero: DefaultLimits).
	Limits Limits
}

// Fetch returns the directory holding the tree stored under digest,
// fetching it on a miss: the object is extracted into a temporary
// directory beside it, within the size and entries its object declares
// and c.Limits (ErrTooLarge), the digest of what was extracted is
// checked (ErrDigest) and the directory is renamed into place, so a
// half-extracted, oversized or tampered tree is never seen there.
// Concurrent fetches of one digest, in one process or several, are safe:
// the first rename wins and the others use its tree. The tree is held
// until release is called (once, after the caller's last read of it);
// release is never nil.
func (c Cache) Fetch(ctx context.Context, store jetstream.ObjectStore, digest string) (dir string, release func(), err error) {
	if !validDigest(digest) {
		return "", func() {}, fmt.Errorf("trees: %q is not a digest", digest)
	}
	dst := filepath.Join(c.Dir, digest)
	fetched := false
	// A tree an evictor removes between the fetch and the hold is
	// fetched again; more than a few rounds is a cache fighting itself.
	for range 4 {
		rel, err := hold(dst)
		if err == nil {
			now := time.Now()
			_ = os.Chtimes(dst, now, now) // its last use, for the LRU order
			if fetched {
				c.evict(digest)
			}
			return dst, rel, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", func() {}, fmt.Errorf("trees: cache: %w", err)
		}
		if err := fetchInto(ctx, store, digest, c.Dir, dst, c.Limits); err != nil {
			return "", func() {}, err
		}
		fetched = true
	}
	return "", func() {}, fmt.Errorf("trees: cache: the tree %s was removed each time it was fetched (a cache bound smaller than the trees in use?)", digest)
}

// hold opens the directory dst and takes a shared lock on it, checking
// that dst is still that directory once the lock is held (an evictor
// renames a tree away under its exclusive lock). fs.ErrNotExist when
// there is no tree at dst.
func hold(dst string) (func(), error) {
	f, err := holdFile(dst)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// entry is one tree of the cache.
type entry struct {
	name  string
	bytes int64
	used  time.Time
}

// evict removes the trees used least recently, except keep and the
// trees held, until the cache's trees fit c.MaxBytes; and the temporary
// directories of fetches and removals a killed process left (older than
// an hour).
func (c Cache) evict(keep string) {
	if c.MaxBytes <= 0 || !canEvict {
		return
	}
	des, err := os.ReadDir(c.Dir)
	if err != nil {
		return
	}
	var trees []entry
	var total int64
	for _, de := range des {
		p := filepath.Join(c.Dir, de.Name())
		fi, err := de.Info()
		if err != nil || !fi.IsDir() {
			continue
		}
		if strings.HasPrefix(de.Name(), tmpFetch) || strings.HasPrefix(de.Name(), tmpEvict) {
			if time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(p)
			}
			continue
		}
		if !validDigest(de.Name()) {
			continue
		}
		n := treeBytes(p)
		trees = append(trees, entry{name: de.Name(), bytes: n, used: fi.ModTime()})
		total += n
	}
	if total <= c.MaxBytes {
		return
	}
	sort.Slice(trees, func(i, j int) bool { return trees[i].used.Before(trees[j].used) })
	for _, e := range trees {
		if total <= c.MaxBytes {
			return
		}
		if e.name == keep {
			continue
		}
		tmp := filepath.Join(c.Dir, fmt.Sprintf("%s%s-%d-%d", tmpEvict, e.name, os.Getpid(), time.Now().UnixNano()))
		if remove(filepath.Join(c.Dir, e.name), tmp) {
			total -= e.bytes
		}
	}
}

// remove takes the tree at p away unless it is held: under an exclusive
// lock it does not wait for, p is renamed to tmp (a hold that was
// waiting then finds p gone), then tmp is removed.
func remove(p, tmp string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	ok, err := tryLockExclusive(f)
	if err != nil || !ok {
		f.Close()
		return false
	}
	err = os.Rename(p, tmp)
	f.Close()
	if err != nil {
		return false
	}
	_ = os.RemoveAll(tmp)
	return true
}

// treeBytes is the bytes of the regular files under dir.
func treeBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

package trees

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// HeldDir is a directory of a node that a process is using: a shared
// lock (flock(2)) on it, the lock the tree cache's holds take, keeps
// RemoveUnheld of any process of the node away from it.
type HeldDir struct {
	f    *os.File
	path string
}

// HoldDir holds the directory dir, making it (and its parents) first
// when mk is set; without mk a missing dir is not held (nil, nil). A
// directory removed between its making and the lock (a RemoveUnheld in
// between) is made again, so the holder never writes into a directory on
// its way out.
func HoldDir(dir string, mk bool) (*HeldDir, error) {
	var err error
	for range 4 {
		if !mk {
			f, err := holdFile(dir)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil
			}
			if err != nil {
				return nil, fmt.Errorf("trees: hold %s: %w", dir, err)
			}
			return &HeldDir{f: f, path: dir}, nil
		}
		if err = os.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // a parent removed meanwhile
			}
			return nil, fmt.Errorf("trees: hold %s: %w", dir, err)
		}
		var f *os.File
		if f, err = holdFile(dir); err == nil {
			return &HeldDir{f: f, path: dir}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("trees: hold %s: %w", dir, err)
		}
	}
	return nil, fmt.Errorf("trees: hold %s: removed each time it was made: %w", dir, err)
}

// Release lets the directory go. With removeEmpty, a directory left
// empty that no one else holds is removed (a job dropped before it wrote
// anything leaves nothing).
func (h *HeldDir) Release(removeEmpty bool) {
	if h == nil || h.f == nil {
		return
	}
	defer func() { h.f.Close(); h.f = nil }()
	if !removeEmpty {
		return
	}
	fi, err := h.f.Stat()
	if err != nil {
		return
	}
	now, err := os.Lstat(h.path)
	if err != nil || !os.SameFile(fi, now) {
		return
	}
	if _, err := h.f.Readdirnames(1); !errors.Is(err, io.EOF) {
		return
	}
	if ok, err := tryLockExclusive(h.f); err == nil && ok {
		_ = os.Remove(h.path)
	}
}

// holdFile opens dir and takes a shared lock on it, checking that dir is
// still that directory once the lock is held. fs.ErrNotExist when there
// is no directory at dir.
func holdFile(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := lockShared(f); err != nil {
		f.Close()
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	now, err := os.Stat(dir)
	if err != nil || !os.SameFile(fi, now) || !fi.IsDir() {
		f.Close()
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// CanRemoveUnheld reports whether RemoveUnheld can tell a held directory
// (flock(2)); without, it removes nothing.
const CanRemoveUnheld = canEvict

// RemoveUnheld removes the directory p unless a process holds it
// (HoldDir, or a cached tree's hold): under an exclusive lock it does not
// wait for, p is renamed to tmp (a holder waiting for its lock then finds
// p gone and makes it again), then tmp is removed. It reports whether p
// was removed.
func RemoveUnheld(p, tmp string) bool {
	if !canEvict {
		return false
	}
	return remove(p, tmp)
}

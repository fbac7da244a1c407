//go:build unix

package trees_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/proctor-eval/proctor/pkg/trees"
)

// TestHeldDirNeverRemoved: RemoveUnheld leaves a held directory alone
// and removes it once released; a holder that waits while a remover
// takes the directory away (the remover's exclusive lock, its rename)
// holds a directory made again at the path, never the one removed.
func TestHeldDirNeverRemoved(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "run", "cell", "1")
	h, err := trees.HoldDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.log"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if trees.RemoveUnheld(dir, filepath.Join(root, "gone")) {
		t.Fatal("a held directory was removed")
	}
	h.Release(true) // not empty: kept
	if _, err := os.Stat(filepath.Join(dir, "run.log")); err != nil {
		t.Fatalf("a released directory with files: %v", err)
	}
	if !trees.RemoveUnheld(dir, filepath.Join(root, "gone")) {
		t.Fatal("a released directory was not removed")
	}

	// A remover holds the exclusive lock; the holder waits for it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	old, _ := f.Stat()
	got := make(chan *trees.HeldDir, 1)
	go func() {
		h, err := trees.HoldDir(dir, true)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	moved := filepath.Join(root, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	f.Close() // the remover is done
	h = <-got
	now, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("the holder's directory: %v", err)
	}
	if os.SameFile(old, now) {
		t.Fatal("the holder holds the directory taken away")
	}
	if trees.RemoveUnheld(dir, filepath.Join(root, "gone2")) {
		t.Fatal("the directory made again is not held")
	}
	h.Release(true) // empty: removed
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("an empty released directory: %v", err)
	}
}

package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f.json")
	if err := WriteBytes(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("stat %v %v", fi, err)
	}
	boom := errors.New("boom")
	if err := Write(p, func(w io.Writer) error { w.Write([]byte("partial")); return boom }); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	left, _ := os.ReadDir(filepath.Dir(p))
	if len(left) != 1 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestWriteSpecialFileInPlace: a path that is a fifo (as /dev/null or
// /dev/stdout are devices) is written through, never renamed over: it is
// still a fifo afterwards and its reader got the bytes. (/dev/null itself
// is not used: a regression would replace the machine's /dev/null.)
func TestWriteSpecialFileInPlace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(p) // opens for reading, so the writer's open returns
		got <- b
	}()
	if err := WriteBytes(p, []byte("through")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("after Write the fifo is %v (%v)", fi.Mode(), err)
	}
	if b := <-got; string(b) != "through" {
		t.Fatalf("reader got %q", b)
	}
}

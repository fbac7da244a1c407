package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// hostAndAPI returns a driver that takes the host path where it can and
// one that uses the copy API only, each with a started container.
func hostAndAPI(t *testing.T) (host, api *Driver, hh, ha *sandbox.Handle) {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, testImage)
	host, err := New(Options{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	api, err = New(Options{Client: cli, CopyAPIOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []struct {
		d *Driver
		h **sandbox.Handle
	}{{host, &hh}, {api, &ha}} {
		h, err := p.d.Start(ctx, sandbox.Spec{Image: testImage, Lifetime: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.d.Destroy(context.Background(), h) })
		*p.h = h
	}
	return host, api, hh, ha
}

// requireHostPath fails the test when the host path was not taken on a
// machine where it should be (root, the engine local, overlay2).
func requireHostPath(t *testing.T, d *Driver, before int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: the host path is not taken here")
		return
	}
	if d.hostOps.Load() == before {
		t.Fatal("the copies went through the copy API, not the container's root directory")
	}
}

// TestHostCopyInMatchesCopyAPI: CopyIn through the container's root
// directory leaves what the engine's copy API leaves: the same entries,
// types, modes (setuid kept), owners (root, also under a setgid
// directory), link targets, sizes and file times; a directory entry kept
// over an existing directory takes the copy's mode and owner, a file or
// symlink in the way of a file is replaced, and what the copy does not
// name stays. A copy that would put a directory over a symlink, or a file
// over a directory, fails in both.
func TestHostCopyInMatchesCopyAPI(t *testing.T) {
	t.Parallel()
	host, api, hh, ha := hostAndAPI(t)
	ctx := context.Background()
	src := t.TempDir()
	past := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	writeFile(t, filepath.Join(src, "a.txt"), "hello\n", 0o644)
	writeFile(t, filepath.Join(src, "bin", "run.sh"), "#!/bin/sh\necho run\n", 0o755)
	writeFile(t, filepath.Join(src, "ro"), "read only\n", 0o400)
	writeFile(t, filepath.Join(src, "suid"), "s\n", 0o755)
	writeFile(t, filepath.Join(src, "keepdir", "in.txt"), "in\n", 0o644)
	writeFile(t, filepath.Join(src, "wasfile"), "now a file\n", 0o600)
	writeFile(t, filepath.Join(src, "waslink"), "now a file\n", 0o600)
	for _, c := range []struct {
		p    string
		mode fs.FileMode
	}{{"suid", 0o4755 | fs.ModeSetuid}, {"keepdir", 0o750}} {
		if err := os.Chmod(filepath.Join(src, c.p), c.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "suid"), 0o755|fs.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "abslink")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.Type()&fs.ModeSymlink == 0 {
			_ = os.Chtimes(p, past, past)
		}
		return nil
	})
	emptySrc := t.TempDir()
	if err := os.Chmod(emptySrc, 0o711); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(emptySrc, past, past)

	prepare := `set -e
mkdir -p /dst/keepdir /sgid /emp/ty /c1/wasdir
chmod 0711 /dst/keepdir && chown 5:5 /dst/keepdir
echo old > /dst/keepdir/old.txt
echo old > /dst/wasfile
ln -s /etc/passwd /dst/waslink
ln -s /etc /c2
mkdir -p /c3 && ln -s /etc /c3/wasdir
echo old > /dst/keep.txt
touch -d @1000000000 /dst/keep.txt /dst/keepdir/old.txt
chmod 2775 /sgid && chown 0:5 /sgid
chown 7:7 /emp/ty`
	list := `find /dst /sgid /emp /c1 /c3 \( -type l -printf '%p l %m %U %G %l\n' \) -o \( -type d -printf '%p d %m %U %G\n' \) -o -printf '%p %y %m %U %G %s %T@\n' | sort
stat -c '%n %Y' /dst/bin /dst/empty /dst/keepdir /emp/ty`
	var got [2]string
	for i, p := range []struct {
		d *Driver
		h *sandbox.Handle
	}{{host, hh}, {api, ha}} {
		before := p.d.hostOps.Load()
		execOK(t, p.d, p.h, prepare)
		if err := p.d.CopyIn(ctx, p.h, src, "/dst"); err != nil {
			t.Fatalf("CopyIn dir: %v", err)
		}
		if err := p.d.CopyIn(ctx, p.h, filepath.Join(src, "a.txt"), "/sgid/deep/new"); err != nil {
			t.Fatalf("CopyIn file: %v", err)
		}
		if err := p.d.CopyIn(ctx, p.h, emptySrc, "/emp/ty"); err != nil {
			t.Fatalf("CopyIn empty dir: %v", err)
		}
		// A file over a directory, a directory over a symlink: refused.
		if err := p.d.CopyIn(ctx, p.h, filepath.Join(src, "a.txt"), "/c1/wasdir"); err != nil {
			t.Errorf("a file into an existing directory (not over it): %v", err)
		}
		conflict := t.TempDir()
		writeFile(t, filepath.Join(conflict, "wasdir", "x.txt"), "x\n", 0o644)
		if err := p.d.CopyIn(ctx, p.h, conflict, "/c3"); err == nil {
			t.Error("a directory was copied over a symlink")
		}
		got[i] = execOK(t, p.d, p.h, list)
		if i == 0 {
			requireHostPath(t, p.d, before)
		} else if p.d.hostOps.Load() != 0 {
			t.Fatal("CopyAPIOnly took the host path")
		}
	}
	if got[0] != got[1] {
		t.Fatalf("through the root directory:\n%s\nthrough the copy API:\n%s", got[0], got[1])
	}
	for _, want := range []string{"/dst/suid f 4755 0 0", "/dst/keepdir d 750 0 0", "/dst/keepdir/old.txt f",
		"/dst/wasfile f 600 0 0", "/dst/waslink f 600 0 0", "/dst/link l 777 0 0 a.txt", "/dst/abslink l 777 0 0 /etc/passwd", "/sgid/deep/new/a.txt f 644 0 0",
		"/emp/ty d 711 0 0", "/dst/keep.txt f"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("no %q in\n%s", want, got[0])
		}
	}
	if strings.Contains(got[0], "fifo") {
		t.Errorf("a fifo was copied in:\n%s", got[0])
	}
}

// TestHostCopyOutMatchesCopyAPI: CopyOutFiles through the container's
// root directory gives the host the tree the copy API's stream gives
// (types, modes, contents, links as links, a second name of a file as a
// hard link, no fifo or device) and the same result for every file asked
// for, error texts included.
func TestHostCopyOutMatchesCopyAPI(t *testing.T) {
	t.Parallel()
	host, api, hh, ha := hostAndAPI(t)
	ctx := context.Background()
	prepare := `set -e
mkdir -p /out/d/sub
echo hi > /out/d/f && chmod 0640 /out/d/f
ln /out/d/f /out/d/hard
ln -s /etc /out/d/etclink
ln -s f /out/d/rel
mkfifo /out/d/fifo
mknod /out/d/zero c 1 5
echo x > /out/d/sub/x && chmod 0500 /out/d/sub
head -c 70000 /dev/zero > /out/d/big
head -c 100 /dev/zero > /out/d/small`
	want := map[string]int64{"/out/d/f": 1000, "/out/d/hard": 1000, "/out/d/big": 65536, "/out/d/small": 100, "/out/d/etclink/hostname": 100,
		"/out/d/rel": 100, "/out/d/fifo": 100, "/out/d/zero": 100, "/out/d/sub": 100, "/out/d/sub/x": 100, "/out/d/missing": 10}
	var trees, results [2]string
	for i, p := range []struct {
		d *Driver
		h *sandbox.Handle
	}{{host, hh}, {api, ha}} {
		before := p.d.hostOps.Load()
		execOK(t, p.d, p.h, prepare)
		dst := t.TempDir()
		got, err := p.d.CopyOutFiles(ctx, p.h, "/out/d", dst, want)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range got {
				if !yield(k) {
					return
				}
			}
		}) {
			f := got[k]
			fmt.Fprintf(&sb, "%s data=%q err=%v\n", k, f.Data, f.Err)
		}
		results[i] = sb.String()
		trees[i] = hostTree(t, dst)
		if _, err := p.d.CopyOutFiles(ctx, p.h, "/out/none", dst, nil); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("a missing tree: %v, want ErrNotFound", err)
		}
		if i == 0 {
			requireHostPath(t, p.d, before)
		}
	}
	if trees[0] != trees[1] {
		t.Errorf("host tree through the root directory:\n%s\nthrough the copy API:\n%s", trees[0], trees[1])
	}
	if results[0] != results[1] {
		t.Errorf("files through the root directory:\n%s\nthrough the copy API:\n%s", results[0], results[1])
	}
	for _, w := range []string{`/out/d/f data="hi\n" err=<nil>`, "/out/d/hard data=\"\" err=sandbox: not a regular file: /out/d/hard is a hard link",
		"over the cap of 65536", "/out/d/etclink/hostname data=\"\" err=sandbox: not a regular file: /out/d/etclink/hostname is under /out/d/etclink"} {
		if !strings.Contains(results[0], w) {
			t.Errorf("no %q in\n%s", w, results[0])
		}
	}
}

// hostTree lists a host directory: each entry's path, type, permission
// bits, link target or content hash, and which entries share an inode.
func hostTree(t *testing.T, dir string) string {
	t.Helper()
	var sb strings.Builder
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&sb, "%s %v", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			fmt.Fprintf(&sb, " -> %s", l)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			fmt.Fprintf(&sb, " %d %s", len(b), hex.EncodeToString(h[:4]))
			ino := fi.Sys().(*syscall.Stat_t).Ino
			if first, ok := inodes[ino]; ok {
				fmt.Fprintf(&sb, " same file as %s", first)
			} else {
				inodes[ino] = rel
			}
		}
		sb.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// TestHostRootIsTheContainersRoot: the host path opens a container's root
// directory only when it is the container's root filesystem: the root of
// a process that chrooted inside the container (as a PID 1 made to
// chroot would be), or of a process outside it (a reused pid), is
// refused, so the copies then take the copy API.
func TestHostRootIsTheContainersRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the host path needs root")
	}
	d, _ := newTestDocker(t, nil)
	ctx := context.Background()
	h := startLong(t, d)
	cid := h.State["container"]
	hc, err := d.hostContainerOf(ctx, cid)
	if err != nil {
		t.Skipf("no host path to this engine's containers: %v", err)
	}
	r, err := openContainerRoot(hc)
	if err != nil {
		t.Fatalf("the container's own PID 1: %v", err)
	}
	r.Close()
	// A jail inside the container with a sleep in it, the same files
	// planted at the paths the verifier reads.
	execOK(t, d, h, `set -e
mkdir -p /jail/lib/x86_64-linux-gnu /jail/lib64 /jail/logs/verifier
cp /usr/bin/sleep /jail/sleep
cp /lib/x86_64-linux-gnu/libc.so.6 /jail/lib/x86_64-linux-gnu/
cp /lib64/ld-linux-x86-64.so.2 /jail/lib64/
echo 1 > /jail/logs/verifier/reward.txt
mkdir -p /logs/verifier && echo 0 > /logs/verifier/reward.txt
chroot /jail /sleep 777 > /dev/null 2>&1 &`)
	var jailed int
	for _, dir := range hostCgroupDirs(d.cgroupRoot, cid) {
		b, err := os.ReadFile(filepath.Join(dir.path, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			var pid int
			fmt.Sscan(f, &pid)
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Equal(cmd, []byte("/sleep\x00777\x00")) {
				jailed = pid
			}
		}
	}
	if jailed == 0 {
		t.Skip("the jailed process is not visible in the container's cgroup from here")
	}
	for name, pid := range map[string]int{"a chrooted process of the container": jailed, "this test's own process": os.Getpid()} {
		other := hc
		other.pid = pid
		if r, err := openContainerRoot(other); err == nil {
			r.Close()
			t.Errorf("%s: its root was taken for the container's", name)
		}
	}
	// Through the driver, the reward read is the container's own.
	if b, err := d.ReadFile(ctx, h, "/logs/verifier/reward.txt", 10); err != nil || string(b) != "0\n" {
		t.Fatalf("reward %q %v, want the container's 0", b, err)
	}
}

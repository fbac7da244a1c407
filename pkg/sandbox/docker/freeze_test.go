package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/proctor-eval/proctor/internal/testutil"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// execOK runs a root shell command in h and fails the test unless it
// exits 0; it returns the output.
func execOK(t *testing.T, d *Driver, h *sandbox.Handle, script string) string {
	t.Helper()
	var out testutil.SyncBuffer
	res, err := d.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %+v %v\n%s", script, res, err, out.String())
	}
	return out.String()
}

// TestDockerFreeze: Freeze counts the processes still alive beside PID 1
// (zombies not counted), nothing runs after it (a writer planted in the
// background writes nothing more), files are still readable, Exec is
// refused and Destroy removes the frozen container.
func TestDockerFreeze(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	run := "run-" + randomHex(4)
	h, err := d.Start(ctx, sandbox.Spec{RunID: run, Image: testImage, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	// Three live processes: two sleeps and a writer that appends a line
	// every 10 ms; and one zombie (a child of a process that never waits).
	execOK(t, d, h, `sleep 1000 >/dev/null 2>&1 &
sleep 1000 >/dev/null 2>&1 &
sh -c 'while :; do echo x >> /tmp/w; sleep 0.01; done' >/dev/null 2>&1 &
sh -c 'true & exec sleep 1000' >/dev/null 2>&1 &`)
	// Wait (with a deadline) until the zombie exists and the writer wrote.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := execOK(t, d, h, `grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l; test -s /tmp/w && echo written`)
		if strings.HasPrefix(out, "1\n") && strings.Contains(out, "written") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no zombie or no writes after 30 s: %q", out)
		}
	}
	alive, err := d.Freeze(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	// The two sleeps, the writer, the sleep that holds the zombie; the
	// writer's own `sleep 0.01` may or may not be alive at the freeze.
	if alive < 4 || alive > 5 {
		t.Errorf("Freeze counted %d processes alive, want 4 or 5 (zombies and PID 1 not counted)", alive)
	}
	ins, err := cli.ContainerInspect(ctx, h.ID)
	if err != nil || !ins.State.Paused {
		t.Fatalf("after Freeze: paused %v (%v)", ins.State != nil && ins.State.Paused, err)
	}
	first, err := d.ReadFile(ctx, h, "/tmp/w", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The writer would have written at least 10 more lines in 200 ms; the
	// file must be the same after three times that.
	end := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(end) {
		again, err := d.ReadFile(ctx, h, "/tmp/w", 1<<20)
		if err != nil || !bytes.Equal(again, first) {
			t.Fatalf("the file changed after Freeze: %d bytes, then %d (%v)", len(first), len(again), err)
		}
	}
	if again, err := d.Freeze(ctx, h); err != nil || again != alive {
		t.Errorf("Freeze of a frozen container: %d %v, want %d", again, err, alive)
	}
	// The count from the host's cgroup (when the engine runs here) is
	// the engine's top's.
	cid, _ := d.container(h)
	if n, ok := hostAlive(d.cgroupRoot, cid, ins.State.Pid); ok != (hostOOMFile(d.cgroupRoot, cid) != "") || ok && n != alive {
		t.Errorf("the host's cgroup of the container: processes read %v (%d), OOM counter found %v", ok, n, !ok)
	}
	byTop, err := New(Options{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	byTop.cgroupRoot = ""
	if again, err := byTop.Freeze(ctx, h); err != nil || again != alive {
		t.Errorf("Freeze counted by the engine's top: %d %v, want %d", again, err, alive)
	}
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}}); err == nil {
		t.Error("Exec ran in a frozen container")
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after Destroy of a frozen container: %d containers, %d networks", c, n)
	}
	if _, err := d.Freeze(ctx, h); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("Freeze after Destroy: %v, want ErrDestroyed", err)
	}
}

func TestCountAlive(t *testing.T) {
	rows := [][]string{{"10", "Ss"}, {"11", "S"}, {"12", "Z"}, {"13", "D"}, {"14", "Z+"}}
	if n, err := countAlive([]string{"PID", "STAT"}, rows, 10); err != nil || n != 2 {
		t.Fatalf("got %d %v, want 2", n, err)
	}
	if _, err := countAlive([]string{"UID", "CMD"}, rows, 10); err == nil {
		t.Fatal("no PID column accepted")
	}
}

// TestDockerReadFile: only a regular file under the cap is read; a
// symlink (to a file that exists on the host too, to /dev/zero), a
// device, a fifo, a directory and an oversized file are refused with the
// reason, and nothing is resolved on the host. A symlinked parent
// directory is resolved inside the container. Both ways to the files are
// tried: through the container's root directory where this machine
// allows it, and through the copy API only.
func TestDockerReadFile(t *testing.T) {
	t.Parallel()
	for _, apiOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("CopyAPIOnly=%v", apiOnly), func(t *testing.T) {
			t.Parallel()
			cli := testutil.Docker(t)
			testutil.RequireImage(t, cli, testImage)
			d, err := New(Options{Client: cli, CopyAPIOnly: apiOnly})
			if err != nil {
				t.Fatal(err)
			}
			testDockerReadFile(t, d)
			if !apiOnly {
				requireHostPath(t, d, 0)
			}
		})
	}
}

func testDockerReadFile(t *testing.T, d *Driver) {
	ctx := context.Background()
	h := startLong(t, d)
	// A host file with a secret, and a link to its path inside the
	// container (where the path does not exist) as an agent would plant it.
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "secret.txt")
	if err := os.WriteFile(secret, []byte("host-secret-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	execOK(t, d, h, `set -e
mkdir -p /r && cd /r
printf 1 > ok
ln -s /etc/hostname hostname-link
ln -s /dev/zero zero-link
ln -s '`+secret+`' host-link
mknod zero c 1 5
mkfifo fifo
mkdir dir
head -c 65536 /dev/zero > at-cap
head -c 65537 /dev/zero > over-cap
ln -s /etc /r/etc-link`)
	if b, err := d.ReadFile(ctx, h, "/r/ok", 64<<10); err != nil || string(b) != "1" {
		t.Fatalf("regular file: %q %v", b, err)
	}
	if b, err := d.ReadFile(ctx, h, "/r/at-cap", 64<<10); err != nil || len(b) != 64<<10 {
		t.Fatalf("file at the cap: %d bytes %v", len(b), err)
	}
	hostName, _ := os.Hostname()
	for _, c := range []struct {
		path string
		want error
		says string
	}{
		{"/r/hostname-link", sandbox.ErrNotRegular, `symlink to "/etc/hostname"`},
		{"/r/zero-link", sandbox.ErrNotRegular, `symlink to "/dev/zero"`},
		{"/r/host-link", sandbox.ErrNotRegular, "symlink"},
		{"/r/zero", sandbox.ErrNotRegular, "character device"},
		{"/r/fifo", sandbox.ErrNotRegular, "fifo"},
		{"/r/dir", sandbox.ErrNotRegular, "directory"},
		{"/r/over-cap", sandbox.ErrTooLarge, "65537 bytes, over the cap of 65536"},
		{"/r/missing", sandbox.ErrNotFound, "/r/missing"},
	} {
		b, err := d.ReadFile(ctx, h, c.path, 64<<10)
		if !errors.Is(err, c.want) || b != nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %q %v, want %v saying %q", c.path, b, err, c.want, c.says)
			continue
		}
		if strings.Contains(err.Error(), "host-secret") || (hostName != "" && strings.Contains(err.Error(), hostName)) {
			t.Errorf("%s: the error holds host data: %v", c.path, err)
		}
	}
	// A parent that is a link resolves in the container's filesystem: the
	// container's hostname, not the host's.
	want := execOK(t, d, h, "cat /etc/hostname")
	if b, err := d.ReadFile(ctx, h, "/r/etc-link/hostname", 64<<10); err != nil || string(b) != want {
		t.Errorf("through a linked parent: %q %v, want the container's %q", b, err, want)
	}
	// CopyOutFiles reads the same way from the stream it extracts, and
	// CopyOut stores links as links and never reads through them.
	dst := t.TempDir()
	got, err := d.CopyOutFiles(ctx, h, "/r", dst, map[string]int64{
		"/r/ok": 64 << 10, "/r/hostname-link": 64 << 10, "/r/zero": 64 << 10, "/r/over-cap": 64 << 10,
		"/r/missing": 64 << 10, "/r/etc-link/hostname": 64 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := got["/r/ok"]; f.Err != nil || string(f.Data) != "1" {
		t.Errorf("CopyOutFiles of a regular file: %+v", f)
	}
	for p, want := range map[string]error{"/r/hostname-link": sandbox.ErrNotRegular, "/r/zero": sandbox.ErrNotRegular, "/r/over-cap": sandbox.ErrTooLarge, "/r/etc-link/hostname": sandbox.ErrNotRegular} {
		if f := got[p]; !errors.Is(f.Err, want) || f.Data != nil {
			t.Errorf("CopyOutFiles %s: %+v, want %v", p, f, want)
		}
	}
	if f, ok := got["/r/missing"]; ok {
		t.Errorf("CopyOutFiles of a missing file: %+v", f)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "r", "ok")); err != nil || string(b) != "1" {
		t.Errorf("a captured file on the host: %q %v", b, err)
	}
	if _, err := d.CopyOutFiles(ctx, h, "/r", dst, map[string]int64{"/etc/passwd": 1}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("CopyOutFiles of a path outside the tree: %v", err)
	}
	for link, target := range map[string]string{"hostname-link": "/etc/hostname", "zero-link": "/dev/zero", "host-link": secret} {
		fi, err := os.Lstat(filepath.Join(dst, "r", link))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("CopyOut %s: %v %v, want a symlink", link, fi, err)
			continue
		}
		if got, _ := os.Readlink(filepath.Join(dst, "r", link)); got != target {
			t.Errorf("CopyOut %s -> %q, want %q", link, got, target)
		}
	}
	for _, name := range []string{"zero", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, "r", name)); err == nil {
			t.Errorf("CopyOut made the device or fifo %s on the host", name)
		}
	}
}

// TestDockerThaw: after Freeze and a SIGSTOP of every process (the
// verifier's exit hook), Thaw makes Exec work again and a background
// writer of before the freeze writes again, as a multi-step task's next
// step needs.
func TestDockerThaw(t *testing.T) {
	t.Parallel()
	d, _ := newTestDocker(t, nil)
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{RunID: "run-" + randomHex(4), Image: testImage, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	// The writer has written once before the stop: a stop that came
	// first left no /tmp/tick to read after the thaw.
	execOK(t, d, h, `sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/tick; sleep 0.05; done' >/dev/null 2>&1 &
until [ -s /tmp/tick ]; do sleep 0.05; done`)
	execOK(t, d, h, `kill -STOP -1 2>/dev/null; true`)
	if _, err := d.Freeze(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := d.Thaw(ctx, h); err != nil {
		t.Fatal(err)
	}
	first := execOK(t, d, h, "cat /tmp/tick")
	deadline := time.Now().Add(30 * time.Second)
	for execOK(t, d, h, "cat /tmp/tick") == first {
		if time.Now().After(deadline) {
			t.Fatalf("the writer stayed stopped after Thaw (tick %q)", first)
		}
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := d.Thaw(ctx, h); err == nil {
		t.Error("Thaw of a destroyed sandbox succeeded")
	}
}

// TestThawSettlesThePausedFlag: once Thaw returns, the engine never
// reports the container paused again. A verifier whose exit hook stops a
// background process that still holds its output makes the engine handle
// the exec's exit only after 2 s, and the container's "paused" event
// waits behind it in the engine's per-container queue; handled after the
// unpause, it marked the running container paused again (a "pause" event
// after Thaw) and refused the next step's exec for that moment.
func TestThawSettlesThePausedFlag(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	h := startLong(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	msgs, errc := cli.Events(ctx, events.ListOptions{Filters: filters.NewArgs(filters.Arg("container", h.ID))})
	execOK(t, d, h, `trap 'kill -STOP -1 2>/dev/null' EXIT; sleep 1000 &`)
	t.Logf("%d exec returned", time.Now().UnixNano())
	if _, err := d.Freeze(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := d.Thaw(ctx, h); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d thawed", time.Now().UnixNano())
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true", "after-thaw"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The marker exec's exit is handled after every event the engine
	// had queued before it: read up to its exec_die.
	late := 0
	marker := ""
	for {
		select {
		case m := <-msgs:
			a := string(m.Action)
			t.Logf("%d %s", m.TimeNano, a)
			switch {
			case a == "exec_create: true after-thaw":
				marker = m.Actor.Attributes["execID"]
			case marker != "" && a == "pause":
				late++
			case marker != "" && a == "exec_die" && m.Actor.Attributes["execID"] == marker:
				if late > 0 {
					t.Fatalf("the engine reported the container paused %d time(s) after Thaw returned", late)
				}
				return
			}
		case err := <-errc:
			t.Fatal(err)
		}
	}
}

// TestFreezeAsksAgainWhenTheRuntimeCouldNotFreeze: the cgroup v1 freezer
// can stay FREEZING while the container's processes fork, and runc then
// thaws the container and fails the pause ("unable to freeze"); on a
// loaded machine `runs pause --now` failed so on a solve that forks a
// `sleep` every 0.2 s. Freeze asks for the pause again: after two such
// refusals (the engine's own words, through a proxy) the container is
// paused; a refusal every time is an error with the runtime's words after
// pauseTries pauses; another error of the engine is not asked again.
func TestFreezeAsksAgainWhenTheRuntimeCouldNotFreeze(t *testing.T) {
	t.Parallel()
	const refusal = "Cannot pause container 0123: OCI runtime pause failed: unable to freeze: unknown"
	for _, c := range []struct {
		name          string
		status, fails int
		msg           string
		hits          int
	}{
		{"twice", http.StatusInternalServerError, 2, refusal, 3},
		{"always", http.StatusInternalServerError, 100, refusal, pauseTries},
		{"other", http.StatusConflict, 100, "Container 0123 is restarting, wait until the container is running", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, p := proxiedDocker(t, 0)
			h := startLong(t, d)
			rule := p.Fail("POST /containers/*/pause", c.status, c.msg, c.fails)
			alive, err := d.Freeze(context.Background(), h)
			if got := rule.Hits(); got != c.hits {
				t.Errorf("%d pauses asked for, want %d", got, c.hits)
			}
			paused := d.paused(context.Background(), h.State["container"])
			if c.fails < c.hits {
				if err != nil || !paused || alive != 0 {
					t.Fatalf("Freeze after %d refusals: %d alive, %v, paused %v; want the container paused", c.fails, alive, err, paused)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.msg) || paused {
				t.Fatalf("Freeze refused every time: %v, paused %v; want the engine's error %q", err, paused, c.msg)
			}
		})
	}
}

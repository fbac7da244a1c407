package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Users the ability checks run processes as: the agent's uid, and two
// others whose processes a KillAll of the agent must not reach.
const (
	AgentUser = "10001"
	otherUser = "10002"
	nextUser  = "10003"
)

// Entry is one file a Fixture plants: a regular file (Data, or Size zero
// bytes when Size > 0), a symlink to Link, or a Kind: "dir", "fifo" or
// "device" (a character device, /dev/zero's 1:5).
type Entry struct {
	Path string
	Data string
	Size int64
	Link string
	Kind string
}

// Fixture makes, inside a sandbox, the state the ability checks start
// from. Run uses one that runs sh commands through Exec (sh, mkdir, ln,
// mknod, mkfifo, head, sleep, stat, grep and a /proc); a driver that
// cannot run a shell (sandboxfake) passes its own to Abilities.
type Fixture interface {
	// Plant makes each entry, as root, creating parent directories.
	Plant(ctx context.Context, h *sandbox.Handle, entries []Entry) error
	// Spawn starts up to n processes of user that run until killed,
	// without waiting for them, and returns how many it started: fewer
	// when the sandbox's pids limit stopped it.
	Spawn(ctx context.Context, h *sandbox.Handle, user string, n int) (started int, err error)
	// Running returns how many processes of user (a uid, never root)
	// run in the sandbox; zombies do not count.
	Running(ctx context.Context, h *sandbox.Handle, user string) (int, error)
	// Writer starts a process of user that appends a line to file every
	// few milliseconds until it is stopped.
	Writer(ctx context.Context, h *sandbox.Handle, user, file string) error
}

// Abilities runs the checks of the abilities d declares, as parallel
// subtests of t, each in sandboxes started from spec and destroyed when
// it ends, their state made by fx; Run calls it with a Fixture of shell
// commands. It checks:
//
//   - Declared: d declares (sandbox.Capable) exactly the abilities it
//     implements;
//   - ProcessKiller: KillAll of the agent gets through a fork bomb held at
//     the pids limit (LimitReporter's, when d reports one: the bomb
//     started fewer processes than the limit), leaves other users'
//     processes running, gives the next phase its pids budget back, and
//     KillAll of root ends every process;
//   - Freezer: nothing runs after Freeze (a writer planted as the agent
//     rewriting the reward file leaves it unchanged while it is read),
//     the processes alive are counted, Exec is refused, a second Freeze
//     counts the same, and after Destroy it is ErrDestroyed; with Thawer,
//     Thaw makes Exec work and the writer write again;
//   - FileReader: ReadFile never follows a link (to a file, to a device,
//     to a host path holding a secret), refuses a device, a fifo and a
//     directory (ErrNotRegular) and a file over its cap (ErrTooLarge),
//     reads one at the cap, says nothing of the host, and resolves a
//     linked parent directory inside the sandbox;
//   - FileCopier: CopyOutFiles reads the same way from the tree it copies
//     out (a file under a linked directory is ErrNotRegular; a name
//     outside the tree ErrInvalidSpec), and the copy keeps links as
//     links and makes no device or fifo on the host;
//   - TreeCopier: CopyOutTree keeps links as links (to /etc, to a host
//     path, to a directory: never followed), makes no device or fifo,
//     leaves out a file over what is left of the byte budget but copies
//     smaller ones after it, leaves out every entry past the entry cap,
//     and records what it left out;
//   - ExecPreparer: a prepared command has not run before Run (its
//     first act, a marker file, is absent) and runs at Run with its
//     exit code and output; its Timeout counts from Run (a command that
//     waited longer than its budget before Run ends on its own, one that
//     overruns it after Run is stopped with its processes); Discard and a
//     ctx ended before Run leave nothing run and no process behind, and a
//     second Run is ErrPreparedUsed (the commands are sh scripts);
//   - Collector: GC removes every sandbox of its run (Exec is then
//     ErrDestroyed, Destroy still nil), GCDead those of a dead run only,
//     and GC of no run is ErrInvalidSpec.
func Abilities(t *testing.T, d sandbox.Driver, spec sandbox.Spec, fx Fixture) {
	t.Helper()
	has := sandbox.AbilitiesOf(d)
	start := func(t *testing.T, spec sandbox.Spec) *sandbox.Handle {
		t.Helper()
		h, err := d.Start(context.Background(), spec)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() {
			if err := d.Destroy(context.Background(), h); err != nil {
				t.Errorf("Destroy: %v", err)
			}
		})
		return h
	}
	ability := func(name string, a sandbox.Ability, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if !slices.Contains(has, a) {
				t.Skipf("the driver does not declare %s", a)
			}
			t.Parallel()
			f(t)
		})
	}

	t.Run("Declared", func(t *testing.T) {
		declared, implemented := sandbox.AbilitiesOf(d), sandbox.Implemented(d)
		for _, a := range implemented {
			if !slices.Contains(declared, a) {
				t.Errorf("%T implements %s but does not declare it (Abilities)", d, a)
			}
		}
		if c, ok := d.(sandbox.Capable); ok {
			for _, a := range c.Abilities() {
				if !slices.Contains(implemented, a) {
					t.Errorf("%T declares %s but does not implement its interface", d, a)
				}
			}
		}
	})

	ability("PreparedExecRunsAtRun", sandbox.AbilityExecPreparer, func(t *testing.T) {
		preparedExecs(t, d, start(t, spec), fx)
	})

	ability("KillAllThroughForkBomb", sandbox.AbilityProcessKiller, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, spec)
		k := d.(sandbox.ProcessKiller)
		if n, err := fx.Spawn(ctx, h, otherUser, 1); err != nil || n != 1 {
			t.Fatalf("a process of another user: %d started, %v", n, err)
		}
		var limit int64
		if lr, ok := d.(sandbox.LimitReporter); ok && slices.Contains(has, sandbox.AbilityLimitReporter) {
			limit = lr.Limits(spec).PidsLimit
		}
		bomb := 40
		if limit > 0 {
			bomb = int(2 * limit)
		}
		forked, err := fx.Spawn(ctx, h, AgentUser, bomb)
		if err != nil {
			t.Fatalf("the agent's fork bomb: %v", err)
		}
		if forked == 0 || limit > 0 && int64(forked) >= limit || limit <= 0 && forked != bomb {
			t.Fatalf("the agent's fork bomb started %d of %d processes under a pids limit of %d", forked, bomb, limit)
		}
		// At the limit nothing can start; KillAll gets through anyway.
		if err := k.KillAll(ctx, h, AgentUser); err != nil {
			t.Fatalf("KillAll(%s) at the pids limit: %v", AgentUser, err)
		}
		waitRunning(t, fx, h, AgentUser, 0)
		if n, err := fx.Running(ctx, h, otherUser); err != nil || n != 1 {
			t.Errorf("KillAll(%s) reached another user's process: %d of 1 left (%v)", AgentUser, n, err)
		}
		// The next phase gets its budget back although the killed
		// processes may stay counted (zombies PID 1 does not reap).
		next := 20
		if limit > 0 {
			next = int(min(100, limit/2))
		}
		if n, err := fx.Spawn(ctx, h, nextUser, next); err != nil || n != next {
			t.Errorf("after KillAll the next phase started %d of %d processes (%v)", n, next, err)
		}
		if err := k.KillAll(ctx, h, ""); err != nil {
			t.Fatalf("KillAll of root: %v", err)
		}
		waitRunning(t, fx, h, otherUser, 0)
		waitRunning(t, fx, h, nextUser, 0)
		t.Logf("the bomb started %d of %d processes under a pids limit of %d", forked, bomb, limit)
	})

	ability("FreezeBeforeTheRewardIsRead", sandbox.AbilityFreezer, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, spec)
		fr := d.(sandbox.Freezer)
		const reward = "/tmp/sandboxtest-reward.txt"
		// An agent's process left behind rewrites the reward file.
		if err := fx.Writer(ctx, h, AgentUser, reward); err != nil {
			t.Fatal(err)
		}
		if n, err := fx.Spawn(ctx, h, AgentUser, 2); err != nil || n != 2 {
			t.Fatalf("spawn: %d %v", n, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if b, err := readBack(ctx, d, h, reward); err == nil && len(b) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the writer wrote nothing in 30 s")
			}
		}
		alive, err := fr.Freeze(ctx, h)
		if err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		if alive < 3 {
			t.Errorf("Freeze counted %d processes alive, want at least the writer and two others", alive)
		}
		first, err := readBack(ctx, d, h, reward)
		if err != nil {
			t.Fatalf("reading a frozen sandbox: %v", err)
		}
		// The writer appends every 10 ms: in 600 ms it would have written
		// dozens of lines.
		for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); {
			again, err := readBack(ctx, d, h, reward)
			if err != nil || string(again) != string(first) {
				t.Fatalf("the reward file changed after Freeze: %d bytes, then %d (%v)", len(first), len(again), err)
			}
		}
		if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}, Timeout: time.Minute}); err == nil {
			t.Error("Exec ran in a frozen sandbox")
		}
		if again, err := fr.Freeze(ctx, h); err != nil || again != alive {
			t.Errorf("a second Freeze: %d %v, want %d", again, err, alive)
		}
		if th, ok := d.(sandbox.Thawer); ok && slices.Contains(has, sandbox.AbilityThawer) {
			if err := th.Thaw(ctx, h); err != nil {
				t.Fatalf("Thaw: %v", err)
			}
			if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}, Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
				t.Fatalf("Exec after Thaw: %+v %v", res, err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				again, err := readBack(ctx, d, h, reward)
				if err == nil && string(again) != string(first) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the writer stayed stopped after Thaw (%v)", err)
				}
			}
		}
		if err := d.Destroy(ctx, h); err != nil {
			t.Fatal(err)
		}
		if _, err := fr.Freeze(ctx, h); !errors.Is(err, sandbox.ErrDestroyed) {
			t.Errorf("Freeze after Destroy: %v, want ErrDestroyed", err)
		}
		if th, ok := d.(sandbox.Thawer); ok && slices.Contains(has, sandbox.AbilityThawer) {
			if err := th.Thaw(ctx, h); err == nil {
				t.Error("Thaw of a destroyed sandbox succeeded")
			}
		}
	})

	// hostile plants, under /r, what an agent leaves for a reader: links
	// to a file, to a device and to a host path holding a secret, a
	// device, a fifo, a directory, files at and over a 64 KiB cap, and a
	// link to a directory of the sandbox.
	hostile := func(t *testing.T, h *sandbox.Handle) (secret string) {
		t.Helper()
		secret = filepath.Join(t.TempDir(), "secret.txt")
		if err := os.WriteFile(secret, []byte("host-secret-1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := fx.Plant(context.Background(), h, []Entry{
			{Path: "/r/ok", Data: "1"},
			{Path: "/r2/name", Data: "inside"},
			{Path: "/r/file-link", Link: "/r2/name"},
			{Path: "/r/zero-link", Link: "/dev/zero"},
			{Path: "/r/host-link", Link: secret},
			{Path: "/r/zero", Kind: "device"},
			{Path: "/r/fifo", Kind: "fifo"},
			{Path: "/r/dir", Kind: "dir"},
			{Path: "/r/at-cap", Size: 64 << 10},
			{Path: "/r/over-cap", Size: 64<<10 + 1},
			{Path: "/r/dir-link", Link: "/r2"},
		}); err != nil {
			t.Fatalf("plant: %v", err)
		}
		return secret
	}

	ability("ReadFileNeverFollowsLinks", sandbox.AbilityFileReader, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, spec)
		hostile(t, h)
		r := d.(sandbox.FileReader)
		if b, err := r.ReadFile(ctx, h, "/r/ok", 64<<10); err != nil || string(b) != "1" {
			t.Fatalf("a regular file: %q %v", b, err)
		}
		if b, err := r.ReadFile(ctx, h, "/r/at-cap", 64<<10); err != nil || len(b) != 64<<10 {
			t.Fatalf("a file at the cap: %d bytes %v", len(b), err)
		}
		hostName, _ := os.Hostname()
		for _, c := range []struct {
			path string
			want error
			says string
		}{
			{"/r/file-link", sandbox.ErrNotRegular, `symlink`},
			{"/r/zero-link", sandbox.ErrNotRegular, `symlink`},
			{"/r/host-link", sandbox.ErrNotRegular, "symlink"},
			{"/r/zero", sandbox.ErrNotRegular, "device"},
			{"/r/fifo", sandbox.ErrNotRegular, "fifo"},
			{"/r/dir", sandbox.ErrNotRegular, "directory"},
			{"/r/over-cap", sandbox.ErrTooLarge, "65537"},
			{"/r/missing", sandbox.ErrNotFound, "/r/missing"},
		} {
			b, err := r.ReadFile(ctx, h, c.path, 64<<10)
			if !errors.Is(err, c.want) || b != nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("ReadFile %s: %q %v, want %v saying %q", c.path, b, err, c.want, c.says)
				continue
			}
			if strings.Contains(err.Error(), "host-secret") || hostName != "" && strings.Contains(err.Error(), hostName) {
				t.Errorf("ReadFile %s: the error holds host data: %v", c.path, err)
			}
		}
		if b, err := r.ReadFile(ctx, h, "/r/dir-link/name", 64<<10); err != nil || string(b) != "inside" {
			t.Errorf("through a linked parent directory: %q %v, want the sandbox's file", b, err)
		}
	})

	ability("CopyOutFilesRefusesLinksAndOversized", sandbox.AbilityFileCopier, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, spec)
		secret := hostile(t, h)
		fc := d.(sandbox.FileCopier)
		dst := t.TempDir()
		const cap = 64 << 10
		got, err := fc.CopyOutFiles(ctx, h, "/r", dst, map[string]int64{
			"/r/ok": cap, "/r/at-cap": cap, "/r/file-link": cap, "/r/host-link": cap, "/r/zero": cap,
			"/r/fifo": cap, "/r/over-cap": cap, "/r/missing": cap, "/r/dir-link/name": cap,
		})
		if err != nil {
			t.Fatal(err)
		}
		if f := got["/r/ok"]; f.Err != nil || string(f.Data) != "1" {
			t.Errorf("a regular file: %+v", f)
		}
		if f := got["/r/at-cap"]; f.Err != nil || len(f.Data) != cap {
			t.Errorf("a file at the cap: %d bytes %v", len(f.Data), f.Err)
		}
		for p, want := range map[string]error{
			"/r/file-link": sandbox.ErrNotRegular, "/r/host-link": sandbox.ErrNotRegular, "/r/zero": sandbox.ErrNotRegular,
			"/r/fifo": sandbox.ErrNotRegular, "/r/over-cap": sandbox.ErrTooLarge, "/r/dir-link/name": sandbox.ErrNotRegular,
		} {
			if f := got[p]; !errors.Is(f.Err, want) || f.Data != nil || strings.Contains(f.Err.Error(), "host-secret") {
				t.Errorf("CopyOutFiles %s: %+v, want %v", p, f, want)
			}
		}
		if f, ok := got["/r/missing"]; ok {
			t.Errorf("a missing file is in the result: %+v", f)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "r", "ok")); err != nil || string(b) != "1" {
			t.Errorf("the copy of a regular file: %q %v", b, err)
		}
		for link, target := range map[string]string{"file-link": "/r2/name", "zero-link": "/dev/zero", "host-link": secret, "dir-link": "/r2"} {
			p := filepath.Join(dst, "r", link)
			fi, err := os.Lstat(p)
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the copy of %s: %v %v, want a symlink", link, fi, err)
				continue
			}
			if got, _ := os.Readlink(p); got != target {
				t.Errorf("the copy of %s points at %q, want %q", link, got, target)
			}
		}
		for _, name := range []string{"zero", "fifo"} {
			if _, err := os.Lstat(filepath.Join(dst, "r", name)); err == nil {
				t.Errorf("CopyOutFiles made the device or fifo %s on the host", name)
			}
		}
		if _, err := fc.CopyOutFiles(ctx, h, "/r", t.TempDir(), map[string]int64{"/etc/passwd": 1}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("CopyOutFiles of a file outside the tree: %v, want ErrInvalidSpec", err)
		}
	})

	ability("CopyOutTreeBoundedKeepsLinks", sandbox.AbilityTreeCopier, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, spec)
		secret := hostile(t, h)
		if err := fx.Plant(ctx, h, []Entry{
			{Path: "/r/etc-link", Link: "/etc"},
			{Path: "/r/tests-link", Link: "/tests/test.sh"},
			{Path: "/r/zz-small", Data: "tail"},
		}); err != nil {
			t.Fatal(err)
		}
		tc := d.(sandbox.TreeCopier)
		dst := t.TempDir()
		// at-cap (64 KiB) fits; over-cap (one byte more) does not fit
		// what is left; the small files after it still do.
		got, err := tc.CopyOutTree(ctx, h, "/r", dst, sandbox.TreeLimits{MaxBytes: 64<<10 + 100, MaxEntries: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Truncated || got.SkippedBytes != 64<<10+1 || len(got.Skipped) == 0 || !strings.HasPrefix(got.Skipped[0], "/r/over-cap (") {
			t.Errorf("the cut: %+v, want /r/over-cap left out", got)
		}
		if got.Bytes > 64<<10+100 {
			t.Errorf("copied %d bytes, over the cap", got.Bytes)
		}
		if fi, err := os.Stat(filepath.Join(dst, "r", "over-cap")); err == nil {
			t.Errorf("the file over the budget was copied (%d bytes)", fi.Size())
		}
		for name, want := range map[string]string{"ok": "1", "zz-small": "tail"} {
			if b, err := os.ReadFile(filepath.Join(dst, "r", name)); err != nil || string(b) != want {
				t.Errorf("the copy of %s: %q %v, want %q", name, b, err, want)
			}
		}
		for link, target := range map[string]string{"etc-link": "/etc", "tests-link": "/tests/test.sh", "host-link": secret, "dir-link": "/r2", "zero-link": "/dev/zero"} {
			p := filepath.Join(dst, "r", link)
			fi, err := os.Lstat(p)
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the copy of %s: %v %v, want a symlink", link, fi, err)
				continue
			}
			if got, _ := os.Readlink(p); got != target {
				t.Errorf("the copy of %s points at %q, want %q", link, got, target)
			}
		}
		for _, name := range []string{"zero", "fifo"} {
			if _, err := os.Lstat(filepath.Join(dst, "r", name)); err == nil {
				t.Errorf("CopyOutTree made %s on the host", name)
			}
		}
		if got.Links < 5 || got.Files < 3 {
			t.Errorf("counts: %+v", got)
		}
		// The entry cap: three entries, the rest left out and counted.
		few, err := tc.CopyOutTree(ctx, h, "/r", t.TempDir(), sandbox.TreeLimits{MaxBytes: 1 << 30, MaxEntries: 3})
		if err != nil {
			t.Fatal(err)
		}
		if n := few.Files + few.Dirs + few.Links; n > 3 || !few.Truncated || few.SkippedEntries == 0 {
			t.Errorf("the entry cap of 3: %+v", few)
		}
		if _, err := tc.CopyOutTree(ctx, h, "/no-such-dir", t.TempDir(), sandbox.TreeLimits{MaxBytes: 1, MaxEntries: 1}); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("CopyOutTree of a missing path: %v, want ErrNotFound", err)
		}
		if _, err := tc.CopyOutTree(ctx, h, "/r", t.TempDir(), sandbox.TreeLimits{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("CopyOutTree without limits: %v, want ErrInvalidSpec", err)
		}
	})

	ability("GC", sandbox.AbilityCollector, func(t *testing.T) {
		ctx := context.Background()
		gc := d.(sandbox.Collector)
		one, dead := spec, spec
		one.RunID, dead.RunID = spec.RunID+"-gc", spec.RunID+"-gcdead"
		keep := start(t, spec)
		hs := []*sandbox.Handle{start(t, one), start(t, one)}
		if nc, _, err := gc.GC(ctx, one.RunID); err != nil || nc < 2 {
			t.Fatalf("GC(%s): %d sandboxes removed, %v; want 2", one.RunID, nc, err)
		}
		for _, h := range hs {
			if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrDestroyed) {
				t.Errorf("Exec in a collected sandbox: %v, want ErrDestroyed", err)
			}
		}
		hd := start(t, dead)
		nc, _, err := gc.GCDead(ctx, func(run string) bool { return run != dead.RunID })
		if err != nil || nc < 1 {
			t.Fatalf("GCDead: %d removed, %v", nc, err)
		}
		if _, err := d.Exec(ctx, hd, sandbox.ExecSpec{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrDestroyed) {
			t.Errorf("Exec in a sandbox of a dead run: %v, want ErrDestroyed", err)
		}
		if res, err := d.Exec(ctx, keep, sandbox.ExecSpec{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Errorf("a sandbox of a live run after GC and GCDead: %+v %v", res, err)
		}
		if _, _, err := gc.GC(ctx, ""); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("GC of no run: %v, want ErrInvalidSpec", err)
		}
	})
}

// preparedExecs checks an ExecPreparer (see Abilities).
func preparedExecs(t *testing.T, d sandbox.Driver, h *sandbox.Handle, fx Fixture) {
	ctx := context.Background()
	p := d.(sandbox.ExecPreparer)
	prep := func(script string, timeout time.Duration, out *syncBuffer) sandbox.PreparedExec {
		t.Helper()
		pe, err := p.PrepareExec(ctx, h, sandbox.ExecSpec{
			Cmd: []string{"sh", "-c", script}, User: AgentUser, Timeout: timeout, Stdout: out, Stderr: out,
		})
		if err != nil {
			t.Fatalf("PrepareExec: %v", err)
		}
		return pe
	}
	absent := func(f, when string) {
		t.Helper()
		if b, err := readBack(ctx, d, h, f); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s: %s exists (%q, %v): the prepared command ran", when, f, b, err)
		}
	}
	var ranOut, lateOut, overOut syncBuffer
	ran := prep(`echo ran > /tmp/prep-ran; cat; echo "out $(cat /tmp/prep-ran)"; exit 3`, 0, &ranOut)
	// Budget 3 s, run 0.2 s: it must not count the wait before Run (3.5 s).
	// The budget leaves a loaded engine room to report the exit; a budget
	// counted from the preparation has run out before Run.
	const lateBudget = 3 * time.Second
	late := prep(`sleep 0.2; exit 4`, lateBudget, &lateOut)
	over := prep(`sleep 100 & sleep 100`, time.Second, &overOut)
	discarded := prep(`echo x > /tmp/prep-discarded`, 0, nil)
	cancelled := prep(`echo x > /tmp/prep-cancelled`, 0, nil)
	// The passing of time is what is checked here (the budget of late
	// must not run before Run), not a synchronisation.
	time.Sleep(lateBudget + 500*time.Millisecond)
	absent("/tmp/prep-ran", "before Run")

	discarded.Discard()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if res, err := cancelled.Run(cctx); err != nil || !res.TimedOut {
		t.Errorf("Run with its ctx ended: %+v %v, want TimedOut", res, err)
	}
	if res, err := ran.Run(ctx); err != nil || res.ExitCode != 3 || res.TimedOut || strings.TrimSpace(ranOut.String()) != "out ran" {
		t.Errorf("Run: %+v %v, output %q; want exit 3 and \"out ran\" (stdin empty)", res, err, ranOut.String())
	}
	if res, err := late.Run(ctx); err != nil || res.ExitCode != 4 || res.TimedOut || res.Duration >= lateBudget {
		t.Errorf("Run of a command prepared longer ago than its budget: %+v %v; want exit 4 within its budget counted from Run", res, err)
	}
	if res, err := over.Run(ctx); err != nil || !res.TimedOut || res.ExitCode != sandbox.TimeoutExitCode {
		t.Errorf("Run of a command over its budget: %+v %v; want TimedOut", res, err)
	}
	waitRunning(t, fx, h, AgentUser, 0)
	absent("/tmp/prep-discarded", "after Discard")
	absent("/tmp/prep-cancelled", "after a Run whose ctx had ended")
	if _, err := discarded.Run(ctx); !errors.Is(err, sandbox.ErrPreparedUsed) {
		t.Errorf("Run after Discard: %v, want ErrPreparedUsed", err)
	}
	if _, err := ran.Run(ctx); !errors.Is(err, sandbox.ErrPreparedUsed) {
		t.Errorf("a second Run: %v, want ErrPreparedUsed", err)
	}
}

// waitRunning polls until want processes of user run.
func waitRunning(t *testing.T, fx Fixture, h *sandbox.Handle, user string, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := fx.Running(context.Background(), h, user)
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of %s running (%v), want %d", n, user, err, want)
		}
	}
}

// readBack reads a file of the sandbox without an Exec: with ReadFile
// when d has it, else through CopyOut.
func readBack(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, p string) ([]byte, error) {
	if r, ok := d.(sandbox.FileReader); ok && slices.Contains(sandbox.AbilitiesOf(d), sandbox.AbilityFileReader) {
		return r.ReadFile(ctx, h, p, 1<<20)
	}
	dir, err := os.MkdirTemp("", "sandboxtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := d.CopyOut(ctx, h, p, dir); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, filepath.Base(p)))
}

// Shell is the Fixture of a driver whose sandboxes have a POSIX shell:
// each method is one Exec of sh (root's, or user's for Spawn and
// Writer).
type Shell struct{ D sandbox.Driver }

func (s Shell) sh(ctx context.Context, h *sandbox.Handle, user, script string, args ...string) (sandbox.ExecResult, string, error) {
	var out syncBuffer
	res, err := s.D.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: append([]string{"sh", "-c", script, "sh"}, args...), User: user, Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute,
	})
	return res, out.String(), err
}

// Plant implements Fixture.
func (s Shell) Plant(ctx context.Context, h *sandbox.Handle, entries []Entry) error {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, e := range entries {
		p := shq(e.Path)
		fmt.Fprintf(&b, "mkdir -p \"$(dirname %s)\"\n", p)
		switch {
		case e.Link != "":
			fmt.Fprintf(&b, "ln -s %s %s\n", shq(e.Link), p)
		case e.Kind == "dir":
			fmt.Fprintf(&b, "mkdir %s\n", p)
		case e.Kind == "fifo":
			fmt.Fprintf(&b, "mkfifo %s\n", p)
		case e.Kind == "device":
			fmt.Fprintf(&b, "mknod %s c 1 5\n", p)
		case e.Size > 0:
			fmt.Fprintf(&b, "head -c %d /dev/zero > %s\n", e.Size, p)
		default:
			fmt.Fprintf(&b, "printf '%%s' %s > %s\n", shq(e.Data), p)
		}
	}
	res, out, err := s.sh(ctx, h, "", b.String())
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("plant: %+v %v: %s", res, err, out)
	}
	return nil
}

// Spawn implements Fixture: a loop of `sleep` in the background that
// counts each start in a file, read back with CopyOut once a fork fails
// or all are started.
func (s Shell) Spawn(ctx context.Context, h *sandbox.Handle, user string, n int) (int, error) {
	f := fmt.Sprintf("/tmp/.sandboxtest-spawned-%s-%d", user, time.Now().UnixNano())
	_, out, err := s.sh(ctx, h, user, `i=0; echo 0 > "$2"
while [ $i -lt "$1" ]; do sleep 100000 </dev/null >/dev/null 2>&1 & i=$((i+1)); echo $i > "$2"; done`, strconv.Itoa(n), f)
	if err != nil {
		return 0, err
	}
	b, err := readBack(ctx, s.D, h, f)
	if err != nil {
		return 0, fmt.Errorf("read the count back: %v (%s)", err, out)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Running implements Fixture.
func (s Shell) Running(ctx context.Context, h *sandbox.Handle, user string) (int, error) {
	res, out, err := s.sh(ctx, h, "", `n=0
for p in /proc/[0-9]*; do
  [ "$(stat -c %u "$p" 2>/dev/null)" = "$1" ] || continue
  grep -q '^State:[[:space:]]*Z' "$p/status" 2>/dev/null && continue
  [ -r "$p/status" ] && n=$((n+1))
done
echo $n`, user)
	if err != nil || res.ExitCode != 0 {
		return 0, fmt.Errorf("count the processes of %s: %+v %v: %s", user, res, err, out)
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// Writer implements Fixture.
func (s Shell) Writer(ctx context.Context, h *sandbox.Handle, user, file string) error {
	res, out, err := s.sh(ctx, h, user, `sh -c 'i=0; while :; do i=$((i+1)); echo $i >> "$1"; sleep 0.01; done' sh "$1" </dev/null >/dev/null 2>&1 &`, file)
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("start a writer: %+v %v: %s", res, err, out)
	}
	return nil
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

package docker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// requireHostSignals skips unless this process can signal the containers'
// processes from here (root, the engine on this machine), and fails in CI
// when it cannot, where it always can.
func requireHostSignals(t *testing.T, d *Driver, h *sandbox.Handle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("signals from the host need root")
	}
	if _, ok := hostProcs(d.cgroupRoot, h.State["container"], mustPid1(t, d, h)); !ok {
		if os.Getenv("CI") != "" {
			t.Fatal("the container's cgroup is not readable here")
		}
		t.Skip("the container's cgroup is not on this machine")
	}
}

func mustPid1(t *testing.T, d *Driver, h *sandbox.Handle) int {
	t.Helper()
	hc, err := d.hostContainerOf(context.Background(), h.State["container"])
	if err != nil {
		t.Fatal(err)
	}
	return hc.pid
}

// TestHostSignalsPassAStopper: a root process that stops every other
// process again and again (what the verifier's exit hook does once, when
// the test script ends while a signal's exec starts) stopped that exec's
// runc init, and the engine then waited on it for good: an interrupted
// run hung and left its containers running. Signals sent from this
// machine need no exec: the timeout's SIGTERM and SIGKILL reach the
// stopper, the exec ends within its grace, and the container is removed.
func TestHostSignalsPassAStopper(t *testing.T) {
	t.Parallel()
	d, _ := newTestDocker(t, nil)
	ctx := context.Background()
	h := startLong(t, d)
	requireHostSignals(t, d, h)
	script := `sh -c "trap '' TERM; while :; do kill -STOP -1 2>/dev/null; done" & sleep 100000`
	start := time.Now()
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Timeout: time.Second, Grace: time.Second})
	if err != nil || !res.TimedOut || res.ExitCode != sandbox.TimeoutExitCode {
		t.Fatalf("got %+v %v, want the timeout result", res, err)
	}
	// A stopped signal exec holds Exec to its housekeeping bound,
	// DestroyTimeout + Grace (61 s, TestDockerTimeoutWhenSignalExecIsStopped);
	// signals from this machine end it within the grace and the engine's
	// calls (5-8 s on a loaded machine). 30 s sits far from both.
	el := time.Since(start)
	t.Logf("Exec returned after %v", el.Round(time.Millisecond))
	if el > 30*time.Second {
		t.Fatalf("Exec returned %v after its 1 s timeout and 1 s grace", el.Round(time.Millisecond))
	}
	if n, ok := hostAlive(d.cgroupRoot, h.State["container"], mustPid1(t, d, h)); !ok || n != 0 {
		t.Fatalf("%d processes alive after the timeout's SIGKILL (ok %v)", n, ok)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.Destroy(dctx, h); err != nil {
		t.Fatalf("Destroy after the stopper: %v", err)
	}
}

// TestKillAllAsUserBothWays: KillAll for uid 10001 ends that user's
// processes (a child of one among them) and leaves root's, from this
// machine as through the exec's `kill -KILL -1`.
func TestKillAllAsUserBothWays(t *testing.T) {
	t.Parallel()
	for _, way := range []string{"host", "exec"} {
		t.Run(way, func(t *testing.T) {
			t.Parallel()
			var d *Driver
			if way == "host" {
				d, _ = newTestDocker(t, nil)
			} else {
				d = execPathDocker(t)
			}
			ctx := context.Background()
			h := startLong(t, d)
			if way == "host" {
				requireHostSignals(t, d, h)
			}
			execOK(t, d, h, `sleep 1001 >/dev/null 2>&1 &`)
			if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "sleep 1002 >/dev/null 2>&1 & sh -c 'sleep 1003' >/dev/null 2>&1 &"}, User: "10001"}); err != nil || res.ExitCode != 0 {
				t.Fatal(res, err)
			}
			if err := d.KillAll(ctx, h, "10001"); err != nil {
				t.Fatal(err)
			}
			out := execOK(t, d, h, `for p in /proc/[0-9]*; do grep -q '^State:.*Z' $p/status 2>/dev/null && continue; tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`)
			if !strings.Contains(out, "sleep 1001") {
				t.Errorf("root's process was killed too:\n%s", out)
			}
			if strings.Contains(out, "sleep 1002") || strings.Contains(out, "sleep 1003") {
				t.Errorf("a process of uid 10001 survived KillAll:\n%s", out)
			}
		})
	}
}

// TestHostSignalSkipsWhatItCannotCheck: a user name, not a uid, and a
// container id that names no cgroup here leave the signal to the exec.
func TestHostSignalSkipsWhatItCannotCheck(t *testing.T) {
	d, _ := newTestDocker(t, nil)
	ctx := context.Background()
	if ok, _ := d.hostSignal(ctx, strings.Repeat("0", 64), "0", unix.SIGKILL); ok {
		t.Error("a container that is not there was signalled from the host")
	}
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(ctx, h) })
	if ok, _ := d.hostSignal(ctx, h.State["container"], "nobody", unix.SIGKILL); ok {
		t.Error("a user name was taken for a uid")
	}
}

// Package sandboxtest is the conformance suite every sandbox.Driver must
// pass (DESIGN §4), exported so that a driver in any package runs it in one
// line, as watermill's pubsub/tests and Nomad's driver test utilities do:
//
//	func TestConformance(t *testing.T) {
//		sandboxtest.Run(t, func(t *testing.T) (sandbox.Driver, sandbox.Spec) {
//			return &mydriver.Driver{}, sandbox.Spec{Image: "debian:bookworm-slim"}
//		})
//	}
//
// It checks exit codes (128+N for a signal), stdout and stderr apart,
// output without a final newline, a timeout and a context cancellation
// that kill the whole process tree (a grandchild included) and report
// exit 124, a process that ignores SIGTERM getting its grace, a background
// process holding stdout that does not keep Exec waiting, a 3 MB line,
// invalid UTF-8 passed through, Spec.Env and ExecSpec.Env, the default and
// per-command working directory, a CopyIn/CopyOut round trip (modes,
// symlinks, empty directories, ErrNotFound) and an idempotent Destroy
// (also from a Handle rebuilt from its State, then ErrDestroyed). The
// commands need a POSIX sh with head, tr, grep, cat, sleep, mkdir, pwd,
// readlink and test, and a /proc.
//
// Run then checks the optional abilities the driver declares (Abilities):
// that it declares exactly those it implements, and that the security
// abilities hold what the verifier and the agent arms rely on: KillAll
// through a fork bomb held at the pids limit, Freeze before the reward is
// read, CopyOutFiles refusing links and oversized files, ReadFile never
// following a link, GC of a run's sandboxes. Their state is made with
// shell commands too (Shell; ln, mknod, mkfifo and stat besides), as root
// and as the numeric users 10001 to 10003. A driver that cannot run a
// shell (sandboxfake) runs Abilities alone with a Fixture of its own.
package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Workdir is the Spec.Workdir the suite's sandboxes are started with (Run
// sets it, whatever the Spec newDriver returns says).
const Workdir = "/work"

// HostPather is implemented by a driver whose commands see a sandbox path
// under another name (the process driver: <work tree>/p). The suite uses it
// to know what `pwd` prints; a driver without it must show sandbox paths
// as they are (Docker).
type HostPather interface {
	HostPath(h *sandbox.Handle, sandboxPath string) (string, error)
}

// Run runs the conformance suite as parallel subtests of t. newDriver is
// called once, with t, and returns the driver under test and the Spec
// every subtest starts its sandbox from (RunID, CellID, Image, Lifetime,
// ...; its Workdir is replaced by Workdir). It may skip t (no engine) and
// register cleanups on it. Every sandbox a subtest starts is destroyed
// when the subtest ends; a Destroy error fails it. The checks of the
// abilities the driver declares follow (Abilities, with the Shell
// fixture).
func Run(t *testing.T, newDriver func(t *testing.T) (sandbox.Driver, sandbox.Spec)) {
	t.Helper()
	d, spec := newDriver(t)
	spec.Workdir = Workdir
	c := conformance{driver: d, spec: spec, hostPath: func(_ *sandbox.Handle, s string) string { return s }}
	if hp, ok := d.(HostPather); ok {
		c.hostPath = func(h *sandbox.Handle, s string) string {
			p, err := hp.HostPath(h, s)
			if err != nil {
				t.Errorf("HostPath(%q): %v", s, err)
			}
			return p
		}
	}
	runSuite(t, c)
	t.Run("Abilities", func(t *testing.T) { Abilities(t, d, spec, Shell{D: d}) })
}

// conformance describes one driver under the conformance suite.
type conformance struct {
	driver sandbox.Driver
	// spec is the Spec each subtest starts its sandbox with.
	spec sandbox.Spec
	// hostPath maps a sandbox path to what the sandbox's commands see as
	// that path (`pwd` output): identity for Docker, <root>/p for process.
	hostPath func(h *sandbox.Handle, p string) string
}

func runSuite(t *testing.T, c conformance) {
	start := func(t *testing.T) *sandbox.Handle {
		t.Helper()
		h, err := c.driver.Start(context.Background(), c.spec)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() {
			if err := c.driver.Destroy(context.Background(), h); err != nil {
				t.Errorf("Destroy: %v", err)
			}
		})
		return h
	}
	// run runs a shell script and returns the result and its stdout and
	// stderr.
	run := func(t *testing.T, h *sandbox.Handle, es sandbox.ExecSpec, script string) (sandbox.ExecResult, string, string) {
		t.Helper()
		var out, errb syncBuffer
		if es.Stdout == nil {
			es.Stdout = &out
		}
		if es.Stderr == nil {
			es.Stderr = &errb
		}
		es.Cmd = []string{"sh", "-c", script}
		res, err := c.driver.Exec(context.Background(), h, es)
		if err != nil {
			t.Fatalf("Exec %q: %v", script, err)
		}
		return res, out.String(), errb.String()
	}
	// aliveFiles returns the pids, read from pid files in the workdir, of
	// processes that still run (zombies count as gone).
	aliveFiles := func(t *testing.T, h *sandbox.Handle, pidfiles ...string) string {
		t.Helper()
		var out syncBuffer
		res, err := c.driver.Exec(context.Background(), h, sandbox.ExecSpec{
			Cmd: append([]string{"sh", "-c", `for f in "$@"; do p=$(cat "$f"); ` +
				`if [ -r /proc/$p/status ] && ! grep -q '^State:[[:space:]]*Z' /proc/$p/status; then echo "$f=$p"; fi; done`, "sh"}, pidfiles...),
			Stdout: &out, Stderr: &out,
		})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("checking pids: %v %+v %s", err, res, out.String())
		}
		return out.String()
	}
	// waitGone polls until none of the processes in the pid files runs.
	waitGone := func(t *testing.T, h *sandbox.Handle, pidfiles ...string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			left := aliveFiles(t, h, pidfiles...)
			if left == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes still running after the exec ended: %s", left)
			}
		}
	}

	t.Run("ExitCodes", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		for _, tc := range []struct {
			script string
			want   int
		}{{"exit 0", 0}, {"exit 3", 3}, {"kill -9 $$", 137}} {
			res, _, _ := run(t, h, sandbox.ExecSpec{}, tc.script)
			if res.ExitCode != tc.want || res.TimedOut {
				t.Errorf("%q: got %+v, want exit %d", tc.script, res, tc.want)
			}
		}
	})

	t.Run("StdoutStderr", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		res, out, errs := run(t, h, sandbox.ExecSpec{}, "echo out; echo err >&2; printf 'no newline'")
		if res.ExitCode != 0 || out != "out\nno newline" || errs != "err\n" {
			t.Fatalf("got %+v stdout %q stderr %q", res, out, errs)
		}
	})

	t.Run("NoFinalNewline", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		var got []string
		lines := sandbox.NewLines(func(l string, _ bool) { got = append(got, l) }, 0)
		res, _, _ := run(t, h, sandbox.ExecSpec{Stdout: lines}, "printf 'first\\nlast'")
		lines.Close()
		if res.ExitCode != 0 || strings.Join(got, "|") != "first|last" {
			t.Fatalf("got %+v lines %q", res, got)
		}
	})

	t.Run("TimeoutKillsTree", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		// main -> child sh -> grandchild sleep; all write their pids.
		script := `echo $$ > main.pid
sh -c 'sh -c "echo \$\$ > grandchild.pid; exec sleep 100000" & echo $$ > child.pid; wait' &
while [ ! -s child.pid ] || [ ! -s grandchild.pid ]; do sleep 0.05; done
echo ready
sleep 100000`
		// The timeout leaves a loaded engine time to start the command
		// and print ready; the kill is what is tested.
		res, out, _ := run(t, h, sandbox.ExecSpec{Timeout: 8 * time.Second}, script)
		if !res.TimedOut || res.ExitCode != sandbox.TimeoutExitCode {
			t.Fatalf("want a timeout with exit 124, got %+v", res)
		}
		if out != "ready\n" {
			t.Fatalf("stdout %q, want the output before the timeout", out)
		}
		waitGone(t, h, "main.pid", "child.pid", "grandchild.pid")
	})

	t.Run("IgnoresSIGTERM", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		// As in TimeoutKillsTree, room for a loaded engine to start it.
		const timeout, grace = 8 * time.Second, time.Second
		script := `trap '' TERM; echo $$ > stubborn.pid; echo ready; while :; do sleep 0.2; done`
		res, out, _ := run(t, h, sandbox.ExecSpec{Timeout: timeout, Grace: grace}, script)
		if !res.TimedOut || res.ExitCode != sandbox.TimeoutExitCode || out != "ready\n" {
			t.Fatalf("got %+v stdout %q", res, out)
		}
		if res.Duration < timeout+grace {
			t.Fatalf("killed after %v, before timeout+grace %v: SIGTERM was not ignored or grace not given", res.Duration, timeout+grace)
		}
		waitGone(t, h, "stubborn.pid")
	})

	t.Run("ContextCancel", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Cancel as soon as the command says it is running.
		w := &watchWriter{want: "ready", fn: cancel}
		res, err := c.driver.Exec(ctx, h, sandbox.ExecSpec{
			Cmd:    []string{"sh", "-c", "echo $$ > cancelled.pid; echo ready; sleep 100000"},
			Stdout: w,
		})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if !res.TimedOut || res.ExitCode != sandbox.TimeoutExitCode {
			t.Fatalf("want a cancelled exec reported as a timeout, got %+v", res)
		}
		waitGone(t, h, "cancelled.pid")
	})

	t.Run("BackgroundChildHoldsStdout", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		// If Exec waited for the background sleep, the 60 s timeout
		// would report TimedOut.
		res, out, _ := run(t, h, sandbox.ExecSpec{Timeout: 60 * time.Second}, "sleep 100000 & echo started")
		if res.TimedOut || res.ExitCode != 0 || out != "started\n" {
			t.Fatalf("got %+v stdout %q", res, out)
		}
		// The sandbox still works.
		res, out, _ = run(t, h, sandbox.ExecSpec{}, "echo next")
		if res.ExitCode != 0 || out != "next\n" {
			t.Fatalf("next exec: %+v %q", res, out)
		}
	})

	t.Run("MultiMegabyteLine", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		const n = 3_000_000
		tail := sandbox.NewTail(0)
		var count countWriter
		var lines []string
		var truncated []bool
		lw := sandbox.NewLines(func(l string, tr bool) { lines = append(lines, l); truncated = append(truncated, tr) }, 0)
		res, _, _ := run(t, h, sandbox.ExecSpec{Stdout: io.MultiWriter(tail, lw, &count)},
			"head -c 3000000 /dev/zero | tr '\\000' a; echo; echo end")
		lw.Close()
		if res.ExitCode != 0 {
			t.Fatalf("exit %+v", res)
		}
		if want := int64(n + 1 + 4); count.n != want || tail.Total() != want {
			t.Fatalf("captured %d bytes (tail total %d), want %d", count.n, tail.Total(), want)
		}
		if len(lines) != 2 || len(lines[0]) != sandbox.DefaultMaxLine || !truncated[0] || lines[1] != "end" || truncated[1] {
			t.Fatalf("lines: %d, first %d bytes truncated=%v, rest %q", len(lines), len(lines[0]), truncated, lines[1:])
		}
		if s := tail.String(); !strings.HasSuffix(s, "a\nend\n") || len(s) != sandbox.DefaultTailSize {
			t.Fatalf("tail ends %q, %d bytes", s[max(0, len(s)-10):], len(s))
		}
	})

	t.Run("InvalidUTF8", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		tail := sandbox.NewTail(0)
		var raw syncBuffer
		res, _, _ := run(t, h, sandbox.ExecSpec{Stdout: io.MultiWriter(tail, &raw)}, `printf 'ok \377\376 bytes\n'`)
		if res.ExitCode != 0 {
			t.Fatalf("exit %+v", res)
		}
		if !bytes.Equal(raw.Bytes(), []byte("ok \xff\xfe bytes\n")) {
			t.Fatalf("raw bytes %q were not passed through", raw.Bytes())
		}
		if s := tail.String(); !utf8.ValidString(s) || s != "ok \uFFFD bytes\n" {
			t.Fatalf("tail %q", s)
		}
	})

	t.Run("Env", func(t *testing.T) {
		t.Parallel()
		spec := c.spec
		spec.Env = map[string]string{"PROCTOR_A": "spec-a", "PROCTOR_B": "spec-b"}
		h, err := c.driver.Start(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		defer c.driver.Destroy(context.Background(), h)
		_, out, _ := run(t, h, sandbox.ExecSpec{Env: map[string]string{"PROCTOR_B": "exec-b", "PROCTOR_C": "c d"}},
			`echo "$PROCTOR_A|$PROCTOR_B|$PROCTOR_C"`)
		if out != "spec-a|exec-b|c d\n" {
			t.Fatalf("env: %q", out)
		}
	})

	t.Run("Workdir", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		_, out, _ := run(t, h, sandbox.ExecSpec{}, "pwd")
		if want := c.hostPath(h, Workdir) + "\n"; out != want {
			t.Fatalf("default workdir %q, want %q", out, want)
		}
		run(t, h, sandbox.ExecSpec{}, "mkdir -p sub/dir")
		_, out, _ = run(t, h, sandbox.ExecSpec{Workdir: Workdir + "/sub/dir"}, "pwd")
		if want := c.hostPath(h, Workdir+"/sub/dir") + "\n"; out != want {
			t.Fatalf("exec workdir %q, want %q", out, want)
		}
	})

	t.Run("CopyRoundTrip", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		src := t.TempDir()
		writeFile(t, filepath.Join(src, "a.txt"), "hello\n", 0o644)
		writeFile(t, filepath.Join(src, "bin", "run.sh"), "#!/bin/sh\necho run\n", 0o755)
		writeFile(t, filepath.Join(src, "ro.txt"), "read only\n", 0o400)
		if err := os.MkdirAll(filepath.Join(src, "empty"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.driver.CopyIn(ctx, h, src, "/in/deep"); err != nil {
			t.Fatalf("CopyIn dir: %v", err)
		}
		if err := c.driver.CopyIn(ctx, h, filepath.Join(src, "a.txt"), "/files"); err != nil {
			t.Fatalf("CopyIn file: %v", err)
		}
		res, out, errs := run(t, h, sandbox.ExecSpec{Workdir: "/in/deep"},
			`cat a.txt link ../../files/a.txt && test -x bin/run.sh && test -d empty && [ "$(readlink link)" = a.txt ]`)
		if res.ExitCode != 0 || out != "hello\nhello\nhello\n" {
			t.Fatalf("inside the sandbox: %+v %q %q", res, out, errs)
		}
		run(t, h, sandbox.ExecSpec{Workdir: "/in/deep"}, "echo new > made-inside.txt")

		dst := t.TempDir()
		if err := c.driver.CopyOut(ctx, h, "/in/deep", dst); err != nil {
			t.Fatalf("CopyOut: %v", err)
		}
		got := filepath.Join(dst, "deep")
		for name, want := range map[string]string{"a.txt": "hello\n", "bin/run.sh": "#!/bin/sh\necho run\n", "ro.txt": "read only\n", "made-inside.txt": "new\n"} {
			b, err := os.ReadFile(filepath.Join(got, name))
			if err != nil || string(b) != want {
				t.Errorf("%s: %q, %v", name, b, err)
			}
		}
		for name, want := range map[string]os.FileMode{"a.txt": 0o644, "bin/run.sh": 0o755, "ro.txt": 0o400, "empty": 0o700 | os.ModeDir} {
			fi, err := os.Lstat(filepath.Join(got, name))
			if err != nil || fi.Mode() != want {
				t.Errorf("%s: mode %v, want %v (%v)", name, fi.Mode(), want, err)
			}
		}
		if l, err := os.Readlink(filepath.Join(got, "link")); err != nil || l != "a.txt" {
			t.Errorf("link: %q %v", l, err)
		}
		if err := c.driver.CopyOut(ctx, h, "/files/a.txt", dst); err != nil {
			t.Fatalf("CopyOut file: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(b) != "hello\n" {
			t.Errorf("copied out file: %q", b)
		}
		if err := c.driver.CopyOut(ctx, h, "/no/such/path", dst); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("CopyOut of a missing path: %v, want ErrNotFound", err)
		}
		if err := c.driver.CopyIn(ctx, h, filepath.Join(src, "missing"), "/x"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("CopyIn of a missing path: %v, want ErrNotFound", err)
		}
	})

	t.Run("DestroyIdempotent", func(t *testing.T) {
		t.Parallel()
		h, err := c.driver.Start(context.Background(), c.spec)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := c.driver.Destroy(context.Background(), h); err != nil {
				t.Fatalf("Destroy #%d: %v", i+1, err)
			}
		}
		_, err = c.driver.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"true"}})
		if !errors.Is(err, sandbox.ErrDestroyed) {
			t.Fatalf("Exec after Destroy: %v, want ErrDestroyed", err)
		}
		if err := c.driver.Destroy(context.Background(), &sandbox.Handle{Driver: h.Driver, State: h.State}); err != nil {
			t.Fatalf("Destroy of a handle rebuilt from its state: %v", err)
		}
	})
}

func writeFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// watchWriter calls fn once when the text written so far contains want.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	fn   func()
	done bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		w.fn()
	}
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe for concurrent writers (a command's
// stdout and stderr) and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

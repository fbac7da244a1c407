package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

func startProcess(t *testing.T, spec sandbox.Spec) (*Driver, *sandbox.Handle) {
	t.Helper()
	p := &Driver{BaseDir: t.TempDir()}
	h, err := p.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), h) })
	return p, h
}

func runSh(t *testing.T, p *Driver, h *sandbox.Handle, es sandbox.ExecSpec, script string) (sandbox.ExecResult, string) {
	t.Helper()
	var out testutil.SyncBuffer
	es.Cmd = []string{"sh", "-c", script}
	es.Stdout, es.Stderr = &out, &out
	res, err := p.Exec(context.Background(), h, es)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	return res, out.String()
}

func TestProcessEnvironmentAllowlist(t *testing.T) {
	t.Setenv("PROCTOR_TEST_SECRET", "leak")
	t.Setenv("LANG", "C.UTF-8")
	p, h := startProcess(t, sandbox.Spec{Env: map[string]string{"FROM_SPEC": "1"}})
	_, out := runSh(t, p, h, sandbox.ExecSpec{}, "env")
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if _, ok := env["PROCTOR_TEST_SECRET"]; ok {
		t.Error("a host variable outside the allowlist leaked in")
	}
	if env["LANG"] != "C.UTF-8" || env["PATH"] == "" || env["FROM_SPEC"] != "1" {
		t.Errorf("env %v", env)
	}
	if env["HOME"] != h.State["home"] || !strings.HasPrefix(env["HOME"], h.State["root"]) {
		t.Errorf("HOME %q, want the scratch dir %q", env["HOME"], h.State["home"])
	}
	if entries, err := os.ReadDir(h.State["home"]); err != nil || len(entries) != 0 {
		t.Errorf("HOME is not an empty dir: %v %v", entries, err)
	}
	if _, ok := h.State["env.FROM_SPEC"]; ok {
		t.Error("Spec.Env recorded in the handle state")
	}
}

func TestProcessStdinClosed(t *testing.T) {
	p, h := startProcess(t, sandbox.Spec{})
	// cat would block forever on an open stdin.
	res, out := runSh(t, p, h, sandbox.ExecSpec{Timeout: 60 * time.Second}, "cat; echo eof")
	if res.TimedOut || out != "eof\n" {
		t.Fatalf("%+v %q", res, out)
	}
}

func TestProcessKillsLeftoversAtExit(t *testing.T) {
	p, h := startProcess(t, sandbox.Spec{})
	res, out := runSh(t, p, h, sandbox.ExecSpec{Timeout: 60 * time.Second},
		`sh -c 'echo $$ > left.pid; exec sleep 100000' & while [ ! -s left.pid ]; do sleep 0.01; done; echo main done`)
	if res.TimedOut || res.ExitCode != 0 || out != "main done\n" {
		t.Fatalf("%+v %q", res, out)
	}
	pid := readPid(t, filepath.Join(h.State["workdir"], "left.pid"))
	waitProcessGone(t, pid)
}

func TestProcessEscapedGrandchildDoesNotBlock(t *testing.T) {
	p, h := startProcess(t, sandbox.Spec{})
	// setsid leaves the process group, so the group kill misses it; it
	// keeps the output pipe open, and Exec must still return.
	res, out := runSh(t, p, h, sandbox.ExecSpec{Timeout: 60 * time.Second},
		`setsid sh -c 'echo $$ > esc.pid; exec sleep 100000' & while [ ! -s esc.pid ]; do sleep 0.01; done; echo main done`)
	pid := readPid(t, filepath.Join(h.State["workdir"], "esc.pid"))
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if res.TimedOut || res.ExitCode != 0 || out != "main done\n" {
		t.Fatalf("%+v %q", res, out)
	}
}

func TestProcessPathsStayInTree(t *testing.T) {
	p, h := startProcess(t, sandbox.Spec{Workdir: "app"})
	root := h.State["root"]
	if h.State["workdir"] != filepath.Join(root, "app") {
		t.Fatalf("workdir %q", h.State["workdir"])
	}
	if hp, _ := p.HostPath(h, "/../../etc"); hp != filepath.Join(root, "etc") {
		t.Fatalf("HostPath escaped the tree: %q", hp)
	}
	// A user name is not the host's to resolve; a numeric uid needs root.
	if _, err := p.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"true"}, User: "agent"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("a user name on the process driver: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := p.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"true"}, User: "10001"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Fatalf("another uid without root: %v", err)
		}
	}
	if _, err := p.Exec(context.Background(), h, sandbox.ExecSpec{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("empty command: %v", err)
	}
	if _, err := p.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"/no/such/binary"}}); err == nil {
		t.Fatal("a missing binary ran")
	}
	// A read-only dir made inside is still removed by Destroy.
	runSh(t, p, h, sandbox.ExecSpec{}, "mkdir -p ro/sub && touch ro/sub/f && chmod 0555 ro/sub ro")
	if err := p.Destroy(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("work tree left after Destroy: %v", err)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitProcessGone polls until the host process pid is gone or a zombie.
func waitProcessGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil || strings.Contains(string(b), "State:\tZ") {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still runs after the exec ended", pid)
		}
	}
}

package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/versions"
)

// recorder is a testing.TB that records Skip and Fatal instead of acting on
// them, so the helpers' decisions can be checked. Skip and Fatal end the
// calling goroutine, as in testing.T, so callers run helpers in their own
// goroutine.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper()          {}
func (r *recorder) Cleanup(f func()) { r.TB.Cleanup(f) }
func (r *recorder) Skipf(format string, a ...any) {
	r.skipped = true
	r.msg = fmt.Sprintf(format, a...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

// unsetCI removes CI from the environment for the rest of the test and
// restores it afterwards.
func unsetCI(t *testing.T) {
	t.Setenv("CI", "")
	os.Unsetenv("CI")
}

// run calls f with a recorder in a fresh goroutine and waits for it.
func run(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestDockerPingsEngine(t *testing.T) {
	cli := Docker(t)
	v, err := cli.ServerVersion(context.Background())
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.APIVersion == "" {
		t.Fatalf("engine reported no API version: %+v", v)
	}
	if got := cli.ClientVersion(); versions.GreaterThan(got, v.APIVersion) {
		t.Errorf("negotiated client API %s is newer than the engine's %s", got, v.APIVersion)
	}
}

func TestDockerUnreachableEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no.sock")

	unsetCI(t)
	r := run(t, func(tb testing.TB) { Docker(tb) })
	if !r.skipped || r.failed {
		t.Errorf("without CI: skipped=%v failed=%v, want a skip", r.skipped, r.failed)
	}
	if !strings.Contains(r.msg, "make setup") {
		t.Errorf("skip reason %q does not name the fix `make setup`", r.msg)
	}

	t.Setenv("CI", "true")
	if r := run(t, func(tb testing.TB) { Docker(tb) }); !r.failed || r.skipped {
		t.Errorf("with CI: skipped=%v failed=%v, want a failure", r.skipped, r.failed)
	}
}

func TestRequireImage(t *testing.T) {
	cli := Docker(t)
	RequireImage(t, cli, "debian:bookworm-slim")

	missing := "proctor-testutil-absent:does-not-exist"
	unsetCI(t)
	r := run(t, func(tb testing.TB) { RequireImage(tb, cli, missing) })
	if !r.skipped {
		t.Fatalf("missing image without CI: skipped=%v failed=%v, want a skip", r.skipped, r.failed)
	}
	if !strings.Contains(r.msg, missing) || !strings.Contains(r.msg, "make setup") {
		t.Errorf("skip reason %q names neither the image nor `make setup`", r.msg)
	}
	t.Setenv("CI", "1")
	r = run(t, func(tb testing.TB) { RequireImage(tb, cli, missing) })
	if !r.failed {
		t.Fatalf("missing image with CI: skipped=%v failed=%v, want a failure", r.skipped, r.failed)
	}
}

func TestClaudeFindsPinnedCLI(t *testing.T) {
	bin := Claude(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) != ClaudeVersion+" (Claude Code)" {
		t.Fatalf("%s --version = %q, %v", bin, out, err)
	}
}

func TestClaudeMissingSkipsOrFails(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	unsetCI(t)
	if r := run(t, func(tb testing.TB) { Claude(tb) }); !r.skipped || !strings.Contains(r.msg, "make setup-claude") {
		t.Fatalf("without CI: skipped=%v msg=%q, want a skip naming make setup-claude", r.skipped, r.msg)
	}
	t.Setenv("CI", "1")
	if r := run(t, func(tb testing.TB) { Claude(tb) }); !r.failed {
		t.Fatalf("with CI set: failed=%v, want a failure", r.failed)
	}
}

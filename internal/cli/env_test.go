package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/harness"
)

// testEnvs holds, by test name, the variables a test gives the in-process
// command line (mainEnv) instead of setting them in the process with
// t.Setenv, which a parallel test cannot call.
var testEnvs sync.Map // test name -> map[string]string

// setenv gives the command lines t runs (runMain, mainT) the variable k,
// and those of t's subtests; a variable set so shadows the process's ("":
// unset). It is for every variable the command line and its arms read
// through mainEnv's getenv (PROCTOR_HOME, the sandbox's PROCTOR_*, a
// model's address and key, a CLI's path); what the process itself must
// hold (PATH for a child's lookup, DOCKER_HOST, TMPDIR) still needs
// t.Setenv.
func setenv(t testing.TB, k, v string) {
	t.Helper()
	m := map[string]string{}
	if old, ok := testEnvs.Load(t.Name()); ok {
		for k0, v0 := range old.(map[string]string) {
			m[k0] = v0
		}
	} else {
		name := t.Name()
		t.Cleanup(func() { testEnvs.Delete(name) })
	}
	m[k] = v
	testEnvs.Store(t.Name(), m)
}

// envOf is the getenv of t's command lines: the variables setenv gave t
// or the tests it is a subtest of (the nearest first), else the process's.
func envOf(t testing.TB) func(string) string {
	name := t.Name()
	return func(k string) string {
		for n := name; ; {
			if m, ok := testEnvs.Load(n); ok {
				if v, ok := m.(map[string]string)[k]; ok {
					return v
				}
			}
			i := strings.LastIndex(n, "/")
			if i < 0 {
				return os.Getenv(k)
			}
			n = n[:i]
		}
	}
}

// testGlobals is the globals of a command line with t's environment,
// for tests that call a command's function.
func testGlobals(t testing.TB, stdout, stderr io.Writer) *globals {
	getenv := envOf(t)
	return &globals{stdout: stdout, stderr: stderr, getenv: getenv, home: bus.HomeFrom(getenv)}
}

// mainT is Main with t's environment (setenv).
func mainT(t testing.TB, args []string, stdout, stderr io.Writer) int {
	return mainEnv(args, stdout, stderr, envOf(t))
}

// TestMainEnvStore: the command line opens the store under the
// PROCTOR_HOME its getenv gives, not the process's, so two commands on
// two stores run at once in one process.
func TestMainEnvStore(t *testing.T) {
	t.Parallel()
	homes := []string{t.TempDir(), t.TempDir()}
	codes := make(chan int, len(homes))
	var outs [2]bytes.Buffer
	for i, home := range homes {
		getenv := func(k string) string {
			if k == "PROCTOR_HOME" {
				return home
			}
			return os.Getenv(k)
		}
		go func() { codes <- mainEnv([]string{"runs", "list"}, io.Discard, &outs[i], getenv) }()
	}
	for range homes {
		if code := <-codes; code != 0 {
			t.Errorf("runs list exited %d: %s | %s", code, outs[0].String(), outs[1].String())
		}
	}
	for _, home := range homes {
		if _, err := os.Stat(filepath.Join(home, "jetstream")); err != nil {
			t.Errorf("no store under %s: %v", home, err)
		}
	}
}

var probeOnce sync.Once

// staticProbe points the isolation probe at the static proctor
// (harness.ProbeBinaryEnv, which the arm reads from the process): the test
// binary is not static. Every test that runs the probe wants the same
// file, so the variable is set once for the process and never unset,
// instead of by each test with t.Setenv, which a parallel test cannot
// call.
func staticProbe(t *testing.T) {
	t.Helper()
	bin := testutil.ProctorBinary(t)
	probeOnce.Do(func() {
		if err := os.Setenv(harness.ProbeBinaryEnv, bin); err != nil {
			t.Fatal(err)
		}
	})
}

// TestArmsReadMainEnv: the arms read their variables (a CLI's path, a
// provider's key) through the command line's getenv, not the process's
// environment: two dry runs of docker-claude at once in one process, one
// given the CLI and a key, one given a CLI path that does not exist, each
// plan as their own environment says.
func TestArmsReadMainEnv(t *testing.T) {
	t.Parallel()
	root := writeRoot(t, harborTask("ok", "version = \"1.0\"\n", nil))
	bin := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(bin, []byte("a CLI"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir() // no Claude settings
	envs := []map[string]string{
		{harness.ClaudeBinEnv: bin, "ANTHROPIC_API_KEY": "sk-given", "HOME": empty, "CLAUDE_CONFIG_DIR": empty},
		{harness.ClaudeBinEnv: "/nonexistent/claude", "ANTHROPIC_API_KEY": "sk-given", "HOME": empty, "CLAUDE_CONFIG_DIR": empty},
	}
	type result struct {
		code           int
		stdout, stderr string
	}
	results := make([]chan result, len(envs))
	for i, vars := range envs {
		vars["PROCTOR_HOME"] = t.TempDir()
		results[i] = make(chan result, 1)
		getenv := func(k string) string {
			if v, ok := vars[k]; ok {
				return v
			}
			return os.Getenv(k)
		}
		go func() {
			var stdout, stderr bytes.Buffer
			code := mainEnv([]string{"tasks", "run", "--tasks-root", root, "--all", "--dry-run", "--output-dir", t.TempDir(),
				"--harnesses", "docker-claude"}, &stdout, &stderr, getenv)
			results[i] <- result{code, stdout.String(), stderr.String()}
		}()
	}
	if r := <-results[0]; r.code != 0 || !strings.Contains(r.stdout, "ok/docker-claude/default/1\trun") {
		t.Errorf("given the CLI and a key: exit %d\n%s", r.code, r.stdout)
	}
	// The cell says it is refused; the arm's reason, naming the path, is
	// the error the dry run ends with.
	if r := <-results[1]; r.code == 0 || !strings.Contains(r.stdout, "ok/docker-claude/default/1\terrored (refused)") ||
		!strings.Contains(r.stderr, "/nonexistent/claude") {
		t.Errorf("given a CLI path that does not exist: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

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
// and those of t's subtests; a variable set so shadows the process's. It
// is for the variables mainEnv reads (PROCTOR_HOME, the sandbox's
// PROCTOR_*); an arm's (a model's address) still needs t.Setenv.
func setenv(t *testing.T, k, v string) {
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
func envOf(t *testing.T) func(string) string {
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
func testGlobals(t *testing.T, stdout, stderr io.Writer) *globals {
	getenv := envOf(t)
	return &globals{stdout: stdout, stderr: stderr, getenv: getenv, home: bus.HomeFrom(getenv)}
}

// mainT is Main with t's environment (setenv).
func mainT(t *testing.T, args []string, stdout, stderr io.Writer) int {
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

package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The directory and environment a Binary is built with, fixed when the
// package is initialised, before any test runs: a test that sets TMPDIR,
// HOME or XDG_CACHE_HOME with t.Setenv, and the t.TempDir cleanup of the
// test that happened to build first, never reach a program every test of
// the binary shares.
var (
	binRoot = initBinRoot()
	binEnv  = os.Environ()
)

// A built program stays in binRoot while a test used it in the last
// binIdle, or while it is among the binNewest last used of its name; any
// other is removed when a program is built.
const (
	binIdle   = time.Hour
	binNewest = 3
)

// initBinRoot returns <user cache dir>/proctor-test/bin, or
// <TMPDIR>/proctor-test-bin when there is no user cache dir.
func initBinRoot() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "proctor-test", "bin")
	}
	return filepath.Join(os.TempDir(), "proctor-test-bin")
}

// moduleRoot is the directory holding go.mod.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Binary is a Go program a test binary builds once, on the first call of
// Path, and shares among its tests. The zero value is not usable: Pkg
// names what to build.
type Binary struct {
	// Pkg is the package go build builds: a directory relative to the
	// module root ("./cmd/proctor") or an import path the module requires.
	Pkg string
	// Env is added to the build's environment ("CGO_ENABLED=0").
	Env []string

	once sync.Once
	path string
	err  error
}

// Path builds the program the first time it is called and returns the
// path of the executable; every later call, from any goroutine, returns
// the same path. The file is named by its content under the user's cache
// directory (<cache>/proctor-test/bin/<name>-<sha256 prefix>), outside
// every test's TMPDIR and t.TempDir, so it outlives the test that built
// it; test binaries built from the same sources share it. Each call marks
// the file used; a build removes the programs of binRoot no test used in
// the last hour beyond the 3 last used of each name. The build runs in the
// module root with the environment the process started with plus Env.
// The test fails when the build does.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() { b.path, b.err = buildBinary(b.Pkg, b.Env) })
	if b.err != nil {
		t.Fatalf("build %s: %v", b.Pkg, b.err)
	}
	now := time.Now()
	_ = os.Chtimes(b.path, now, now) // in use: not pruned under a long run
	return b.path
}

// buildBinary runs go build into a scratch directory of binRoot, then renames
// the result to its content's name (atomic: a test binary running beside
// this one sees the old file or the new one, never half of one).
func buildBinary(pkg string, env []string) (string, error) {
	if err := os.MkdirAll(binRoot, 0o755); err != nil {
		return "", err
	}
	scratch, err := os.MkdirTemp(binRoot, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	name := filepath.Base(strings.TrimSuffix(pkg, "/v2"))
	out := filepath.Join(scratch, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleRoot()
	cmd.Env = append(append([]string(nil), binEnv...), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v\n%s", err, msg)
	}
	sum, err := fileSHA256(out)
	if err != nil {
		return "", err
	}
	final := filepath.Join(binRoot, name+"-"+sum[:16])
	if err := os.Rename(out, final); err != nil {
		return "", err
	}
	now := time.Now()
	_ = os.Chtimes(final, now, now) // the rename kept the build's time; pruning goes by last use
	pruneBinRoot(now)
	return final, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pruneBinRoot removes the programs of binRoot last used more than
// binIdle before now, beyond the binNewest last used of each name, and the
// scratch directories of builds that died. Best effort: a file another
// test binary removes first is not an error.
func pruneBinRoot(now time.Time) {
	entries, err := os.ReadDir(binRoot)
	if err != nil {
		return
	}
	type used struct {
		path string
		at   time.Time
	}
	byName := map[string][]used{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(binRoot, e.Name())
		if e.IsDir() {
			if now.Sub(info.ModTime()) > binIdle {
				_ = os.RemoveAll(p)
			}
			continue
		}
		name := e.Name()
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		byName[name] = append(byName[name], used{p, info.ModTime()})
	}
	for _, us := range byName {
		sort.Slice(us, func(i, j int) bool { return us[i].at.After(us[j].at) })
		for i, u := range us {
			if i >= binNewest && now.Sub(u.at) > binIdle {
				_ = os.Remove(u.path)
			}
		}
	}
}

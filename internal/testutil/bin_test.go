package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBinaryOutlivesItsBuilder builds a shared program from inside a test
// that points TMPDIR, HOME and XDG_CACHE_HOME at its own t.TempDir, as a
// test of a staging root does, and runs the program after that test and
// its directory are gone: a program shared by every test of a binary must
// not live in the directory of the one that happened to build it first.
func TestBinaryOutlivesItsBuilder(t *testing.T) {
	b := &Binary{Pkg: "./internal/testutil/testdata/hello"}
	var path, tmp string
	t.Run("builder", func(t *testing.T) {
		tmp = t.TempDir()
		for _, k := range []string{"TMPDIR", "HOME", "XDG_CACHE_HOME"} {
			t.Setenv(k, tmp)
		}
		path = b.Path(t)
		if strings.HasPrefix(path, tmp) {
			t.Errorf("the shared program %s is in the building test's directory %s", path, tmp)
		}
	})
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the builder's directory %s is still there (%v): the test proves nothing", tmp, err)
	}
	out, err := exec.Command(path).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("run %s after its builder ended: %q, %v", path, out, err)
	}
	if again := b.Path(t); again != path {
		t.Errorf("second Path = %s, want the first build's %s", again, path)
	}
}

// TestPruneKeepsWhatIsInUse: a build removes the programs no test used in
// the last hour beyond the three last used of their name, and the scratch
// directory of a build that died; a program used within the hour stays,
// however many newer ones there are.
func TestPruneKeepsWhatIsInUse(t *testing.T) {
	old := binRoot
	binRoot = t.TempDir()
	t.Cleanup(func() { binRoot = old })
	now := time.Now()
	ages := map[string]time.Duration{
		"proctor-01": 0, "proctor-02": 2 * time.Hour, "proctor-03": 3 * time.Hour,
		"proctor-04": 4 * time.Hour, "proctor-05": 5 * time.Hour, // the fourth and fifth last used, idle: removed
		"hello-01": 30 * time.Minute, "hello-02": 40 * time.Minute, "hello-03": 50 * time.Minute,
		"hello-04":    55 * time.Minute, // the fourth, used within the hour: kept
		".build-dead": 2 * time.Hour, ".build-live": time.Minute,
	}
	for name, age := range ages {
		p := filepath.Join(binRoot, name)
		var err error
		if strings.HasPrefix(name, ".build-") {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	pruneBinRoot(now)
	var left []string
	entries, err := os.ReadDir(binRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".build-live", "hello-01", "hello-02", "hello-03", "hello-04", "proctor-01", "proctor-02", "proctor-03"}
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

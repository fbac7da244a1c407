package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGCStaging: the staging directories of dead runs go, those of live
// runs and anything else under the root stay; StageDir's directories are
// private (0700).
func TestGCStaging(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dead, err := StageDir("01DEADRUN")
	if err != nil {
		t.Fatal(err)
	}
	live, err := StageDir("01LIVERUN")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dead); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("staging directory %s: %v %v", dead, fi.Mode(), err)
	}
	stray := filepath.Join(StagingRoot(), "notes.txt")
	os.WriteFile(stray, []byte("x"), 0o600)
	n, err := GCStaging(func(id string) bool { return id == "01DEADRUN" })
	if err != nil || n != 1 {
		t.Fatalf("removed %d: %v", n, err)
	}
	for p, want := range map[string]bool{dead: false, live: true, stray: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", p, err == nil, want)
		}
	}
	if _, err := StageDir("../x"); err == nil {
		t.Error("a run id with a path separator was accepted")
	}
}

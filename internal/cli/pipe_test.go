package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReaderGoneEndsQuietly is `proctor report A --out-md - | head -0`:
// the reader closed the pipe before proctor wrote, so the write fails with
// EPIPE; the command ends with exit 0 and says nothing (no "proctor: write
// /dev/stdout: broken pipe"). A failing write elsewhere is still an error:
// --out-md under a regular file exits 1 naming the path.
func TestReaderGoneEndsQuietly(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_ = r.Close()
	var stderr bytes.Buffer
	art := "../../pkg/projection/testdata/golden.artifact.json"
	if code := mainEnv([]string{"report", art, "--out-md", "-"}, w, &stderr, func(string) string { return "" }); code != ExitOK || stderr.Len() > 0 {
		t.Errorf("report into a closed pipe: exit %d, stderr %q; want 0 and nothing said", code, stderr.String())
	}
	stderr.Reset()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := mainEnv([]string{"report", art, "--out-md", filepath.Join(file, "r.md")}, w, &stderr, func(string) string { return "" }); code != ExitError || !bytes.Contains(stderr.Bytes(), []byte("a-file")) {
		t.Errorf("report under a regular file: exit %d, stderr %q; want 1 naming it", code, stderr.String())
	}
}

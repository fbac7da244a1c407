package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIReference fails when docs/cli.md differs from what the command tree
// prints (`make docs` rewrites it): a flag, command or help text changed
// without the reference. A variable of the environment that a flag default
// is read from is cleared first, as `proctor docs cli` does.
func TestCLIReference(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); docEnvVar(k) {
			t.Setenv(k, "")
		}
	}
	var got bytes.Buffer
	if err := writeCLIReference(&got); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "cli.md")
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s is out of date (run make docs); first difference at line %d:\n code: %q\n file: %q", path, i+1, g, w)
			}
		}
	}
}

// TestCLIReferenceIgnoresMachine: a flag default computed from the CPU
// count is written as its rule, so the reference is the same on every
// machine.
func TestCLIReferenceIgnoresMachine(t *testing.T) {
	var b bytes.Buffer
	if err := writeCLIReference(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(default 2 × CPUs)") {
		t.Error("the --concurrency default is not written as 2 × CPUs")
	}
}

package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A proctor built into a checkout's bin/ and run from a scratch directory
// finds the checkout's CLI cache, and the error of a missing CLI names
// each path once.
func TestCLIDirsFindTheBinarysCheckout(t *testing.T) {
	root := t.TempDir()
	checkout := filepath.Join(root, "checkout")
	scratch := filepath.Join(root, "scratch")
	for _, d := range []string{filepath.Join(checkout, "bin"), filepath.Join(checkout, filepath.Dir(ClaudeBinRel)), scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(checkout, "bin", "proctor")
	cli := filepath.Join(checkout, ClaudeBinRel)
	for _, f := range []string{exe, cli} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dirs := cliDirs(scratch, scratch, exe)
	want := []string{scratch, root, filepath.Dir(root)}
	if !reflect.DeepEqual(dirs[:3], want) {
		t.Fatalf("cliDirs starts %q, want %q", dirs[:3], want)
	}
	found := ""
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			t.Fatalf("cliDirs lists %s twice: %q", d, dirs)
		}
		seen[d] = true
		if p := filepath.Join(d, ClaudeBinRel); found == "" {
			if _, err := os.Stat(p); err == nil {
				found = p
			}
		}
	}
	if found != cli {
		t.Fatalf("the CLI found is %q, want the checkout's %s (dirs %q)", found, cli, dirs)
	}
}

package sandbox

import (
	"strings"
	"testing"
)

func TestImageTag(t *testing.T) {
	for _, tc := range []struct{ task, rev, want string }{
		{"hello", "0123456789abcdef", "proctor-task/hello:0123456789ab"},
		{"Nested/Task_Name.v2", "ABCDEF", "proctor-task/nested/task-name-v2:abcdef"},
		{"--weird--//x", "1", "proctor-task/weird/x:1"},
		{"", "1", "proctor-task/x:1"},
	} {
		if got := ImageTag(tc.task, tc.rev); got != tc.want {
			t.Errorf("ImageTag(%q, %q) = %q, want %q", tc.task, tc.rev, got, tc.want)
		}
	}
}

// TestBuildKey: a build without another Dockerfile, arguments or target
// keeps ImageKey's key (images built before stay cached); each of them
// makes another key.
func TestBuildKey(t *testing.T) {
	df, bases := []byte("FROM x\n"), []BaseImage{{Ref: "x", ID: "sha256:1"}}
	plain := ImageKey("rev", df, bases)
	if got := BuildKey(BuildSpec{Revision: "rev", Dockerfile: "Dockerfile"}, df, bases); got != plain {
		t.Errorf("the default build's key changed: %s, want %s", got, plain)
	}
	seen := map[string]string{plain: "plain"}
	for name, b := range map[string]BuildSpec{
		"dockerfile": {Revision: "rev", Dockerfile: "Dockerfile.api"},
		"arg":        {Revision: "rev", BuildArgs: map[string]string{"A": "1"}},
		"arg value":  {Revision: "rev", BuildArgs: map[string]string{"A": "2"}},
		"target":     {Revision: "rev", Target: "runtime"},
	} {
		k := BuildKey(b, df, bases)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s has the key of %s", name, prev)
		}
		seen[k] = name
	}
}

// TestScanBuild: build arguments decide a FROM with a variable, and the
// stages after the target are neither listed nor rewritten.
func TestScanBuild(t *testing.T) {
	m, err := ParseImageMap(strings.NewReader("python:* = mirror/python:*\nghost:* = mirror/ghost:*\n"), "map")
	if err != nil {
		t.Fatal(err)
	}
	src := []byte("ARG BASE=debian:bookworm-slim\nFROM ${BASE} AS build\nFROM build AS runtime\nFROM ghost:1 AS after\n")
	out, rw, bases := m.ScanBuild(src, map[string]string{"BASE": "python:3.11-slim"}, "runtime")
	if len(bases) != 1 || bases[0] != "mirror/python:3.11-slim" || len(rw) != 1 || strings.Contains(string(out), "mirror/ghost") {
		t.Errorf("bases %q, rewrites %+v, out:\n%s", bases, rw, out)
	}
	if _, _, bases := m.ScanBuild(src, nil, ""); len(bases) != 2 || bases[0] != "debian:bookworm-slim" || bases[1] != "mirror/ghost:1" {
		t.Errorf("without arguments or target: bases %q", bases)
	}
}

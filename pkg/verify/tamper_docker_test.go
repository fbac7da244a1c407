package verify

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
)

// TestShadowFindings plays a hostile solve against a real container: the
// image's own files (a conftest.py of the task, a module named like a
// standard one outside the import path) are not findings; every file the
// solve plants or changes that the verifier would run instead of its
// runner or a standard module is, and nothing else it writes is.
func TestShadowFindings(t *testing.T) {
	d, h := pythonSandbox(t)
	ctx := context.Background()
	sh := func(user, script string) {
		t.Helper()
		var out bytes.Buffer
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, User: user, Stdout: &out, Stderr: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d %v: %s", script, res.ExitCode, err, out.String())
		}
	}
	// The image: a task whose own tests dir has a conftest.py, a helper
	// named json.py deep in the tree (not on the import path), a
	// PATH directory in the work tree, and a site-packages of a venv.
	sh("", `mkdir -p /app/tests /app/lib/deep /app/bin /app/.venv/lib/python3.11/site-packages /pp &&
echo 'import pytest' > /app/tests/conftest.py && echo x > /app/lib/deep/json.py && echo ok > /app/notes.txt &&
echo '#!/bin/sh' > /app/bin/tool && chmod +x /app/bin/tool && chown -R 10001 /app /pp`)
	env := map[string]string{"PATH": "/app/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": "/pp"}
	snap, err := SnapshotShadows(ctx, d, h, "/app", env, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := snap.Findings(ctx, d, h); err != nil || len(got) != 0 {
		t.Fatalf("nothing changed: findings %+v, %v", got, err)
	}
	if snap.sys != nil {
		t.Errorf("a sealed solve's scan listed the system's directories (%d entries)", len(snap.sys))
	}
	// The solve, as uid 10001.
	sh("10001", `cd /app &&
printf 'print("Ran 1 test")\n' > unittest.py &&
echo 'import sys' > tests/conftest.py &&
echo 'pass' > conftest.py &&
mkdir -p pytest && : > pytest/__init__.py &&
echo 'import os' > .venv/lib/python3.11/site-packages/evil.pth &&
echo 'x = 1' > .venv/lib/python3.11/site-packages/typing.py &&
echo 'x = 1' > /pp/random.py &&
echo 'y' > lib/deep/helper.py && echo changed > notes.txt && echo 2 > lib/deep/json.py &&
printf '#!/bin/sh\nexit 0\n' > bin/python3 && chmod +x bin/python3 &&
printf '#!/bin/sh\n' > bin/mytool && chmod +x bin/mytool &&
mkdir -p web/node_modules/.bin && ln -s ../jest/bin/jest.js web/node_modules/.bin/jest && ln -s ../x/cli.js web/node_modules/.bin/x-cli &&
echo 'import os' > sitecustomize.py`)
	got, err := snap.Findings(ctx, d, h)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.TamperFinding{
		{Path: "/app/.venv/lib/python3.11/site-packages/evil.pth", Change: "created", Shadows: "python path hook"},
		{Path: "/app/.venv/lib/python3.11/site-packages/typing.py", Change: "created", Shadows: "python module typing"},
		{Path: "/app/bin/python3", Change: "created", Shadows: "runner python3 on PATH"},
		{Path: "/app/conftest.py", Change: "created", Shadows: "pytest conftest"},
		{Path: "/app/pytest/__init__.py", Change: "created", Shadows: "python package pytest"},
		{Path: "/app/sitecustomize.py", Change: "created", Shadows: "python start-up hook sitecustomize"},
		{Path: "/app/tests/conftest.py", Change: "changed", Shadows: "pytest conftest"},
		{Path: "/app/unittest.py", Change: "created", Shadows: "python module unittest"},
		{Path: "/app/web/node_modules/.bin/jest", Change: "created", Shadows: "runner jest"},
		{Path: "/pp/random.py", Change: "created", Shadows: "python module random"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("findings:\n got %+v\nwant %+v", got, want)
	}

	// A root agent (--agent-user task) writes outside the work tree: a
	// python3 planted in an earlier PATH directory, a runner replaced in
	// place and start-up hooks in the system's site directories are
	// findings; a command that is no runner and a module of no standard
	// name are not.
	snap, err = SnapshotShadows(ctx, d, h, "/app", env, false)
	if err != nil {
		t.Fatal(err)
	}
	sh("", `printf '#!/bin/sh\nexit 0\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3 &&
printf '#!/bin/sh\nexit 0\n' > /usr/local/bin/othertool && chmod +x /usr/local/bin/othertool &&
cp /usr/bin/true /tmp/t && cat /tmp/t > /usr/bin/diff &&
mkdir -p /usr/local/lib/python3.11/dist-packages && echo 'import os' > /usr/local/lib/python3.11/dist-packages/sitecustomize.py &&
echo 'import os' > /usr/lib/python3/dist-packages/zz-evil.pth && echo 'x = 1' > /usr/lib/python3/dist-packages/zz_helper.py`)
	got, err = snap.Findings(ctx, d, h)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path+" "+f.Change+" "+f.Shadows)
	}
	root := []string{"/usr/bin/diff changed runner diff on PATH", "/usr/local/bin/python3 created runner python3 on PATH",
		"/usr/local/lib/python3.11/dist-packages/sitecustomize.py created python start-up hook sitecustomize",
		"/usr/lib/python3/dist-packages/zz-evil.pth created python path hook"}
	for _, w := range root {
		if !slices.Contains(paths, w) {
			t.Errorf("the root solve's %q is not a finding: %q", w, paths)
		}
	}
	for _, p := range paths {
		if strings.Contains(p, "othertool") || strings.Contains(p, "zz_helper") {
			t.Errorf("a command that is no runner is a finding: %q", p)
		}
	}
}

// TestSystemTamperFindings plays a root solve (--agent-user task) against
// a real container: every file it creates or changes in the verifier's
// PATH directories (any name, a link named with its changed target), in
// the system's Python or among the shared libraries is a finding, a
// content change whose mtime was set back included (ctime gives it away,
// and the sandbox cannot set the clock); an honest root solve that runs
// Python (which writes bytecode caches there: they are removed, not
// reported) and installs a tool outside those directories has none. An
// image whose find cannot -printf has its system's directories unlisted,
// said so, and its work tree scanned as ever.
func TestSystemTamperFindings(t *testing.T) {
	d, h := pythonSandbox(t)
	ctx := context.Background()
	sh := func(script string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: exit %d %v: %s", script, res.ExitCode, err, out.String())
		}
		return out.String()
	}
	// The sandbox cannot set the clock, so it cannot set a ctime back:
	// CAP_SYS_TIME (bit 25) is not in root's bounding set.
	var bnd uint64
	if _, err := fmt.Sscanf(sh(`sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status`), "%x", &bnd); err != nil {
		t.Fatal(err)
	}
	if bnd&(1<<25) != 0 {
		t.Fatalf("the sandbox's root can set the clock (CapBnd %x has CAP_SYS_TIME)", bnd)
	}
	// The image: a work tree, and a standard package without its
	// bytecode (the official python images ship none).
	sh(`mkdir -p /app && echo ok > /app/notes.txt && rm -rf /usr/lib/python3.11/json/__pycache__`)
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	snapshot := func() *ShadowSnapshot {
		t.Helper()
		snap, err := SnapshotShadows(ctx, d, h, "/app", env, true)
		if err != nil {
			t.Fatal(err)
		}
		if snap.SystemUnavailable != "" {
			t.Fatalf("the system's directories were not listed: %s", snap.SystemUnavailable)
		}
		return snap
	}
	findings := func(snap *ShadowSnapshot) []string {
		t.Helper()
		got, err := snap.Findings(ctx, d, h)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, f := range got {
			s = append(s, f.Path+" "+f.Change+" "+f.Shadows)
		}
		return s
	}

	// A work tree the image lacks does not keep the system's directories
	// from being listed.
	if snap, err := SnapshotShadows(ctx, d, h, "/no-such-tree", env, true); err != nil || len(snap.sys) < 100 {
		t.Fatalf("without a work tree: %v, %v", snap, err)
	}

	// Honest: it runs Python as root (json's caches are written), unpacks
	// a tool into /opt and links it from its work tree, writes its answer.
	snap := snapshot()
	sh(`python3 -c 'import json; print(json.dumps(1))' >/dev/null && ls /usr/lib/python3.11/json/__pycache__/*.pyc >/dev/null &&
mkdir -p /opt/tool/bin /opt/tool/lib && printf '#!/bin/sh\necho tool\n' > /opt/tool/bin/tool && chmod +x /opt/tool/bin/tool &&
cp /usr/lib/x86_64-linux-gnu/libz.so.1 /opt/tool/lib/ && echo 42 > /app/answer.txt && echo changed > /app/notes.txt`)
	if got := findings(snap); len(got) != 0 {
		t.Errorf("an honest root solve has findings: %q", got)
	}
	if len(snap.RemovedCaches) == 0 || !slices.Contains(snap.RemovedCaches, "/usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc") {
		t.Errorf("removed caches %q, want json's", snap.RemovedCaches)
	}
	if out := sh(`ls /usr/lib/python3.11/json/__pycache__ | wc -l`); strings.TrimSpace(out) != "0" {
		t.Errorf("the solve's bytecode caches are still there: %s", out)
	}

	// The interpreter behind python3 replaced by a script that passes.
	snap = snapshot()
	sh(`cp -p /usr/bin/python3.11 /tmp/python3.11 && printf '#!/bin/sh\necho "Ran 1 test"; echo OK; exit 0\n' > /usr/bin/python3.11`)
	got := findings(snap)
	want := []string{
		"/usr/bin/python3 changed command python3 on PATH (its target /usr/bin/python3.11 changed)",
		"/usr/bin/python3.11 changed command python3.11 on PATH",
		"/usr/local/bin/python changed command python on PATH (its target /usr/bin/python3.11 changed)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("python3.11 replaced:\n got %q\nwant %q", got, want)
	}
	sh(`cat /tmp/python3.11 > /usr/bin/python3.11`)

	// A module of the system's Python edited, a library replaced, the
	// loader told to preload one, a tool the test calls replaced under a
	// name no runner has, a package installed in the system's site-packages.
	snap = snapshot()
	sh(`echo 'import sys; sys.exit(0)' >> /usr/lib/python3.11/unittest/main.py &&
cp /usr/lib/x86_64-linux-gnu/libz.so.1 /tmp/libz && cat /tmp/libz > /usr/lib/x86_64-linux-gnu/libz.so.1 &&
echo /tmp/evil.so > /etc/ld.so.preload &&
printf '#!/bin/sh\nexit 0\n' > /usr/bin/sha1sum &&
mkdir -p /usr/lib/python3/dist-packages/fakepkg/sub && touch /usr/lib/python3/dist-packages/fakepkg/__init__.py /usr/lib/python3/dist-packages/fakepkg/sub/a.py`)
	got = findings(snap)
	want = []string{
		"/etc/ld.so.preload created dynamic loader configuration",
		"/usr/bin/sha1sum changed command sha1sum on PATH",
		"/usr/lib/python3.11/unittest/main.py changed file of the system's Python",
		"/usr/lib/python3/dist-packages/fakepkg created directory of 2 files in the system's Python",
		"/usr/lib/x86_64-linux-gnu/libz.so.1.2.13 changed shared library",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("system files changed:\n got %q\nwant %q", got, want)
	}
	sh(`rm /etc/ld.so.preload`)

	// A content change with its mtime (and size) restored: ctime says so.
	snap = snapshot()
	sh(`f=/usr/lib/python3.11/json/encoder.py && cp -p $f /tmp/enc && sed -i 's/ensure_ascii/ensure_asciX/' $f && touch -d "@$(stat -c %Y /tmp/enc)" $f &&
[ "$(stat -c %s.%Y $f)" = "$(stat -c %s.%Y /tmp/enc)" ] && ! cmp -s $f /tmp/enc`)
	got = findings(snap)
	if want := []string{"/usr/lib/python3.11/json/encoder.py changed file of the system's Python"}; !reflect.DeepEqual(got, want) {
		t.Errorf("a change with its mtime restored:\n got %q\nwant %q", got, want)
	}

	// Past maxSystemFindings, one finding counts the rest.
	snap = snapshot()
	sh(`for i in $(seq 1000 1149); do : > /usr/local/bin/tool$i; done`)
	got = findings(snap)
	if len(got) != maxSystemFindings+1 || got[0] != "/usr/local/bin/tool1000 created command tool1000 on PATH" ||
		got[maxSystemFindings] != "/usr/local/bin/tool1100 changed and 50 more files created or changed in the system's directories, from this path on" {
		t.Errorf("150 commands created: %d findings, first %q, last %q", len(got), got[0], got[len(got)-1])
	}
	sh(`rm /usr/local/bin/tool1*`)

	// A find that cannot -printf (busybox's): the system's directories
	// are not listed, and the snapshot says why; the work tree's scan
	// still runs.
	sh(`printf '#!/bin/sh\nfor a; do [ "$a" = -printf ] && { echo "find: unrecognized: -printf" >&2; exit 1; }; done\nexec /usr/bin/find "$@"\n' > /usr/local/sbin/find && chmod +x /usr/local/sbin/find`)
	snap, err := SnapshotShadows(ctx, d, h, "/app", env, true)
	if err != nil || !strings.Contains(snap.SystemUnavailable, "-printf") || snap.sys != nil {
		t.Fatalf("without find -printf: %v, unavailable %q", err, snap.SystemUnavailable)
	}
	sh(`echo 'x = 1' > /app/unittest.py && printf '#!/bin/sh\nexit 0\n' > /usr/bin/sha224sum`)
	if got := findings(snap); !reflect.DeepEqual(got, []string{"/app/unittest.py created python module unittest"}) {
		t.Errorf("without find -printf: findings %q, want the work tree's only", got)
	}
}

// pythonSandbox starts a sandbox of python:3.11-slim on the engine,
// destroyed when the test ends.
func pythonSandbox(t *testing.T) (*docker.Driver, *sandbox.Handle) {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	d, err := docker.New(docker.Options{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Start(context.Background(), sandbox.Spec{Image: "python:3.11-slim", Lifetime: 5 * time.Minute, RunID: "test-" + events.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(context.Background(), h) })
	return d, h
}

package trees_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/trees"
)

func store(t testing.TB) (jetstream.ObjectStore, *bus.Bus) {
	t.Helper()
	b, _ := bustest.Bus(t)
	s, err := trees.Open(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// taskRoot is a tasks root with task t whose environment/ is a link to
// its sibling's, an executable solution and a dangling link.
func taskRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write(t, root, map[string]string{
		"t/task.toml":              "version = \"1.0\"\n",
		"t/instruction.md":         "Do it.\n",
		"t/solution/solve.sh":      "echo ok\n",
		"t/tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
		"t/tests/data/deep/x.txt":  "deep\n",
		"s/environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
	})
	if err := os.Chmod(filepath.Join(root, "t/solution/solve.sh"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../s/environment", filepath.Join(root, "t/environment")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing.txt", filepath.Join(root, "t/tests/gone")); err != nil {
		t.Fatal(err)
	}
	return root
}

// objects is the number of messages in the bucket's stream.
func objects(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), "OBJ_"+trees.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestRoundTrip: a task stored by the planner's side and fetched on a
// worker loads with the revision it was planned at, its files, modes and
// links intact, its sibling link materialised.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, b := store(t)
	root := taskRoot(t)
	dir := filepath.Join(root, "t")
	want, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := trees.PutWithin(ctx, b, s, dir, root)
	if err != nil {
		t.Fatal(err)
	}
	if digest != want.Revision {
		t.Fatalf("digest %s, task revision %s", digest, want.Revision)
	}
	cache := t.TempDir()
	got, err := trees.Fetch(ctx, s, digest, cache)
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(cache, digest) {
		t.Errorf("fetched into %s", got)
	}
	tk, err := task.Load(got)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Revision != digest {
		t.Errorf("fetched task has revision %s, want %s", tk.Revision, digest)
	}
	if b, err := os.ReadFile(filepath.Join(got, "environment/Dockerfile")); err != nil || !bytes.Contains(b, []byte("WORKDIR /app")) {
		t.Errorf("environment/Dockerfile: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(got, "solution/solve.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("solve.sh mode: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(got, "tests/gone")); err != nil || l != "missing.txt" {
		t.Errorf("dangling link: %q %v", l, err)
	}
	// A second fetch is the cache.
	if again, err := trees.Fetch(ctx, s, digest, cache); err != nil || again != got {
		t.Errorf("second fetch: %s %v", again, err)
	}
	// An agent directory is its own root.
	agent := t.TempDir()
	write(t, agent, map[string]string{"agent.toml": "name = \"a\"\n", "bin/run": "#!/bin/sh\n"})
	ad, err := trees.Put(ctx, b, s, agent)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := trees.Digest(agent); err != nil || d != ad {
		t.Errorf("Digest %s %v, Put %s", d, err, ad)
	}
	if p, err := trees.Fetch(ctx, s, ad, cache); err != nil {
		t.Fatal(err)
	} else if b, _ := os.ReadFile(filepath.Join(p, "agent.toml")); string(b) != "name = \"a\"\n" {
		t.Errorf("agent.toml %q", b)
	}
}

// TestPutDedupe: a tree the bucket holds is not uploaded again.
func TestPutDedupe(t *testing.T) {
	ctx := context.Background()
	s, b := store(t)
	root := taskRoot(t)
	d1, err := trees.PutWithin(ctx, b, s, filepath.Join(root, "t"), root)
	if err != nil {
		t.Fatal(err)
	}
	n := objects(t, b.JS)
	if n == 0 {
		t.Fatal("the first put stored nothing")
	}
	// The same files elsewhere: the same digest, nothing uploaded.
	copyRoot := taskRoot(t)
	d2, err := trees.PutWithin(ctx, b, s, filepath.Join(copyRoot, "t"), copyRoot)
	if err != nil {
		t.Fatal(err)
	}
	if d2 != d1 {
		t.Errorf("digests %s and %s of the same files", d1, d2)
	}
	if m := objects(t, b.JS); m != n {
		t.Errorf("second put: %d messages in the bucket, %d before", m, n)
	}
}

// tarOf is a zstd tar of hdrs, each regular file holding its name.
func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		body := []byte(h.Name)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(body)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestTamperedObjectRefused: an object whose files are not the tree its
// name says (someone with write access to the bucket replaced a task) is
// refused and leaves nothing in the cache.
func TestTamperedObjectRefused(t *testing.T) {
	ctx := context.Background()
	s, _ := store(t)
	root := taskRoot(t)
	digest, err := trees.Digest(filepath.Join(root, "t"))
	if err != nil {
		t.Fatal(err)
	}
	evil := tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: "tests/test.sh"})
	if _, err := s.PutBytes(ctx, digest, evil); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if _, err := trees.Fetch(ctx, s, digest, cache); !errors.Is(err, trees.ErrDigest) {
		t.Fatalf("fetch of a tampered object: %v, want ErrDigest", err)
	}
	if des, _ := os.ReadDir(cache); len(des) != 0 {
		t.Errorf("cache holds %v after a refused fetch", des)
	}
	if _, err := trees.Fetch(ctx, s, "../../etc", cache); err == nil {
		t.Error("a digest that is a path was fetched")
	}
}

// TestHostileTarRefused: a tar that would write outside its directory is
// refused, and nothing lands outside.
func TestHostileTarRefused(t *testing.T) {
	ctx := context.Background()
	s, b := store(t)
	cases := map[string][]*tar.Header{
		"dot-dot":       {{Typeflag: tar.TypeReg, Name: "../escaped"}},
		"inner dot-dot": {{Typeflag: tar.TypeReg, Name: "a/../../escaped"}},
		"absolute":      {{Typeflag: tar.TypeReg, Name: "/tmp/escaped"}},
		"link out":      {{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "../../escaped"}},
		"absolute link": {{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}},
		"link then file through it": {
			{Typeflag: tar.TypeSymlink, Name: "l", Linkname: ".."},
			{Typeflag: tar.TypeReg, Name: "l/escaped"},
		},
		"hard link": {{Typeflag: tar.TypeLink, Name: "h", Linkname: "/etc/passwd"}},
		"device":    {{Typeflag: tar.TypeChar, Name: "c"}},
		"twice":     {{Typeflag: tar.TypeReg, Name: "a"}, {Typeflag: tar.TypeReg, Name: "a"}},
	}
	for name, hdrs := range cases {
		t.Run(name, func(t *testing.T) {
			outer := t.TempDir()
			dir := filepath.Join(outer, "x", "tree")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			err := trees.Extract(zstdReader(t, tarOf(t, hdrs...)), dir)
			if err == nil {
				t.Fatal("extracted")
			}
			for _, p := range []string{"escaped", "x/escaped"} {
				if _, err := os.Lstat(filepath.Join(outer, p)); err == nil {
					t.Errorf("%s written outside the tree", p)
				}
			}
			// Through the bucket: the fetch fails and caches nothing.
			objName := "0000000000000000000000000000000000000000000000000000000000000000"
			if _, err := s.PutBytes(ctx, objName, tarOf(t, hdrs...)); err != nil {
				t.Fatal(err)
			}
			cache := filepath.Join(outer, "cache")
			if _, err := trees.Fetch(ctx, s, objName, cache); err == nil {
				t.Error("fetched")
			}
			if des, _ := os.ReadDir(cache); len(des) != 0 {
				t.Errorf("cache holds %v", des)
			}
		})
	}
	// Put refuses a tree with a link leaving it (such a task is blocked).
	dir := t.TempDir()
	write(t, dir, map[string]string{"a": "a"})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "p")); err != nil {
		t.Fatal(err)
	}
	if _, err := trees.Put(ctx, b, s, dir); !errors.Is(err, trees.ErrUnsafe) {
		t.Errorf("put of a tree with a link out: %v, want ErrUnsafe", err)
	}
}

func zstdReader(t *testing.T, b []byte) *zstd.Decoder {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zr.Close)
	return zr
}

// TestConcurrentFetch: fetches of one digest at once all get the one
// complete tree.
func TestConcurrentFetch(t *testing.T) {
	ctx := context.Background()
	s, b := store(t)
	root := taskRoot(t)
	digest, err := trees.PutWithin(ctx, b, s, filepath.Join(root, "t"), root)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			p, err := trees.Fetch(ctx, s, digest, cache)
			if err == nil {
				var tk *task.Task
				if tk, err = task.Load(p); err == nil && tk.Revision != digest {
					err = errors.New("revision " + tk.Revision)
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("fetch %d: %v", i, err)
		}
	}
	if des, _ := os.ReadDir(cache); len(des) != 1 {
		t.Errorf("cache holds %d entries, want the one tree", len(des))
	}
}

// TestOutputRoundTrip: a cell's output directory comes back whole,
// replacing what an earlier attempt left; a link out of it (an agent's
// work/ is hostile) is not stored; a digest that differs is refused.
func TestOutputRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := store(t)
	out := t.TempDir()
	write(t, out, map[string]string{"logs/verifier/reward.txt": "1\n", "work/a.go": "package a\n", "agent/stream.jsonl": "{}\n"})
	if err := os.Symlink("/etc/passwd", filepath.Join(out, "work/steal")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.go", filepath.Join(out, "work/alias")); err != nil {
		t.Fatal(err)
	}
	name := trees.OutputName("run1", "t/oracle/default/1", 2)
	o, err := trees.PutOutput(ctx, s, name, out)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "t", "oracle", "default", "1")
	write(t, dest, map[string]string{"stale-from-attempt-1": "x"})
	if err := trees.FetchOutput(ctx, s, o, dest); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "logs/verifier/reward.txt")); string(b) != "1\n" {
		t.Errorf("reward.txt %q", b)
	}
	if _, err := os.Stat(filepath.Join(dest, "stale-from-attempt-1")); err == nil {
		t.Error("an earlier attempt's file survived")
	}
	if _, err := os.Lstat(filepath.Join(dest, "work/steal")); err == nil {
		t.Error("a link out of the output was stored")
	}
	if l, err := os.Readlink(filepath.Join(dest, "work/alias")); err != nil || l != "a.go" {
		t.Errorf("work/alias: %q %v", l, err)
	}
	bad := o
	bad.Digest = "0" + o.Digest[1:]
	if err := trees.FetchOutput(ctx, s, bad, dest); !errors.Is(err, trees.ErrDigest) {
		t.Errorf("fetch with a wrong digest: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "logs/verifier/reward.txt")); err != nil {
		t.Error("a refused fetch removed the files already there")
	}
}

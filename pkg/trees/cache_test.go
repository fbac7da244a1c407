package trees_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// bomb is a zstd tar of files files of size bytes each, all zeros: a few
// kilobytes that expand to files × size.
func bomb(t *testing.T, files int, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	zero := make([]byte, 1<<20)
	for i := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f" + strings.Repeat("x", i), Mode: 0o644, Size: size}); err != nil {
			t.Fatal(err)
		}
		for left := size; left > 0; {
			n := min(left, int64(len(zero)))
			if _, err := tw.Write(zero[:n]); err != nil {
				t.Fatal(err)
			}
			left -= n
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestHostileObjectTooLarge: an object that declares a small tree (as Put
// records it) but expands to a large one, or expands past the cache's
// limits when it declares nothing, is refused with ErrTooLarge before
// the oversized file is written: the cache keeps nothing, not even a
// temporary directory.
func TestHostileObjectTooLarge(t *testing.T) {
	ctx := context.Background()
	s, _ := store(t)
	const name = "1111111111111111111111111111111111111111111111111111111111111111"
	cases := []struct {
		name  string
		obj   []byte
		meta  map[string]string
		limit trees.Limits
	}{
		{"declared 1 KB, expands to 64 MiB", bomb(t, 1, 64<<20), map[string]string{"proctor-tree-bytes": "1000", "proctor-tree-entries": "1"}, trees.Limits{}},
		{"declared 2 entries, holds 50", bomb(t, 50, 1), map[string]string{"proctor-tree-bytes": "1000", "proctor-tree-entries": "2"}, trees.Limits{}},
		{"undeclared, past the cache's byte limit", bomb(t, 1, 32<<20), nil, trees.Limits{Bytes: 1 << 20}},
		{"undeclared, past the cache's entry limit", bomb(t, 50, 1), nil, trees.Limits{Entries: 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.obj) > 1<<20 {
				t.Fatalf("the bomb is %d bytes compressed; it should be small", len(c.obj))
			}
			if _, err := s.Put(ctx, jetstream.ObjectMeta{Name: name, Metadata: c.meta}, bytes.NewReader(c.obj)); err != nil {
				t.Fatal(err)
			}
			cache := trees.Cache{Dir: filepath.Join(t.TempDir(), "trees"), Limits: c.limit}
			_, release, err := cache.Fetch(ctx, s, name)
			release()
			if !errors.Is(err, trees.ErrTooLarge) {
				t.Fatalf("fetch: %v, want ErrTooLarge", err)
			}
			if des, _ := os.ReadDir(cache.Dir); len(des) != 0 {
				t.Errorf("the cache holds %v", des)
			}
		})
	}
}

// treeOf stores a tree of one file of n bytes (content c repeated) and
// returns its digest.
func treeOf(t *testing.T, s jetstream.ObjectStore, b *bus.Bus, c byte, n int) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), bytes.Repeat([]byte{c}, n), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := trees.Put(context.Background(), b, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func cached(cache trees.Cache, digest string) bool {
	_, err := os.Stat(filepath.Join(cache.Dir, digest, "data"))
	return err == nil
}

// TestCacheEvictsLeastRecentlyUsed: over its bound, the cache removes the
// tree used least recently (a tree fetched again counts as used), and
// keeps the one just fetched.
func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	s, bb := store(t)
	a, b, c := treeOf(t, s, bb, 'a', 100_000), treeOf(t, s, bb, 'b', 100_000), treeOf(t, s, bb, 'c', 100_000)
	cache := trees.Cache{Dir: filepath.Join(t.TempDir(), "trees"), MaxBytes: 250_000}
	for _, d := range []string{a, b, a, c} {
		_, release, err := cache.Fetch(ctx, s, d)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	if !cached(cache, a) || !cached(cache, c) {
		t.Errorf("a cached %v, c cached %v: want both (a used after b, c just fetched)", cached(cache, a), cached(cache, c))
	}
	if cached(cache, b) {
		t.Error("b, the least recently used, is still cached over the bound")
	}
	if des, _ := os.ReadDir(cache.Dir); len(des) != 2 {
		t.Errorf("the cache holds %d entries, want 2 (no temporary directory left)", len(des))
	}
}

// TestCacheKeepsHeldTrees: a tree a cell holds is never removed, even
// when it is the least recently used and the cache is over its bound
// (the cache then stays over it); once released it goes first.
func TestCacheKeepsHeldTrees(t *testing.T) {
	ctx := context.Background()
	s, bb := store(t)
	a, b, c := treeOf(t, s, bb, 'a', 100_000), treeOf(t, s, bb, 'b', 100_000), treeOf(t, s, bb, 'c', 100_000)
	cache := trees.Cache{Dir: filepath.Join(t.TempDir(), "trees"), MaxBytes: 150_000}
	dirA, releaseA, err := cache.Fetch(ctx, s, a)
	if err != nil {
		t.Fatal(err)
	}
	_, releaseB, err := cache.Fetch(ctx, s, b)
	if err != nil {
		t.Fatal(err)
	}
	releaseB()
	if !cached(cache, a) || !cached(cache, b) {
		t.Fatalf("a cached %v (held), b cached %v (just fetched): want both", cached(cache, a), cached(cache, b))
	}
	if data, err := os.ReadFile(filepath.Join(dirA, "data")); err != nil || len(data) != 100_000 {
		t.Fatalf("the held tree: %d bytes, %v", len(data), err)
	}
	releaseA()
	_, releaseC, err := cache.Fetch(ctx, s, c)
	if err != nil {
		t.Fatal(err)
	}
	releaseC()
	if cached(cache, a) || cached(cache, b) || !cached(cache, c) {
		t.Errorf("cached: a %v, b %v, c %v; want only c", cached(cache, a), cached(cache, b), cached(cache, c))
	}
	if _, err := os.Stat(dirA); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a, released, is still there: %v", err)
	}
}

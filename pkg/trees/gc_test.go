package trees_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// find returns the object name of c's objects.
func find(t *testing.T, c trees.Contents, name string) trees.Stored {
	t.Helper()
	for _, o := range c.Objects {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("the bucket lists no object %s: %v", name, c.Objects)
	return trees.Stored{}
}

// TestGCRacesAPlanner drives by hand both orders of a collection
// removing a tree and a planner finding it (Put of a tree already
// stored): a planner that finds the tree after gc listed it keeps it
// (Remove fails with ErrInUse, the tree is still fetched whole), and a
// planner that comes after the removal stores it again. Within the grace
// a tree no run names is not planned for removal at all.
func TestGCRacesAPlanner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, _ := bustest.Bus(t)
	s, err := trees.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, dir, map[string]string{"task.toml": "x = 1\n", "tests/test.sh": "exit 0\n"})
	digest, err := trees.Put(ctx, b, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	never := func(string) bool { return false }
	fetchable := func(step string) {
		t.Helper()
		got, err := trees.Fetch(ctx, s, digest, t.TempDir())
		if err != nil {
			t.Fatalf("%s: the planned tree does not fetch: %v", step, err)
		}
		if data, err := os.ReadFile(filepath.Join(got, "tests/test.sh")); err != nil || string(data) != "exit 0\n" {
			t.Fatalf("%s: the fetched tree holds %q, %v", step, data, err)
		}
	}

	// Within the grace: no run names the tree, and it stays.
	c, err := trees.Scan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if sw := trees.PlanSweep(c.Objects, nil, never, true, time.Now().Add(-trees.DefaultGrace)); len(sw.Objects) != 0 {
		t.Fatalf("a tree stored just now is planned for removal: %v", sw.Objects)
	}
	// An hour later it would go.
	later := time.Now().Add(trees.DefaultGrace + time.Minute)
	sw := trees.PlanSweep(c.Objects, nil, never, true, later.Add(-trees.DefaultGrace))
	if len(sw.Objects) != 1 || sw.Objects[0].Name != digest {
		t.Fatalf("an unnamed tree past the grace is not planned for removal: %v", sw.Objects)
	}

	// gc listed it; a planner finds it (and will name it in the log);
	// gc's removal then keeps it.
	if d, err := trees.Put(ctx, b, s, dir); err != nil || d != digest {
		t.Fatalf("planner: %s, %v", d, err)
	}
	if err := trees.Remove(ctx, b, sw.Objects[0]); !errors.Is(err, trees.ErrInUse) {
		t.Fatalf("gc removed a tree a planner found after gc listed it: %v", err)
	}
	fetchable("planner first")
	if _, err := s.GetInfo(ctx, digest); err != nil {
		t.Fatalf("the tree after a removal that lost: %v", err)
	}

	// gc lists and removes it first; a planner then stores it again.
	c, err = trees.Scan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := trees.Remove(ctx, b, find(t, c, digest)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInfo(ctx, digest); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the tree after gc removed it: %v", err)
	}
	if found, err := trees.Touch(ctx, b, digest); found || err != nil {
		t.Fatalf("touch of a removed tree: %v, %v", found, err)
	}
	if d, err := trees.Put(ctx, b, s, dir); err != nil || d != digest {
		t.Fatalf("planner: %s, %v", d, err)
	}
	fetchable("gc first")

	// A removal that finds its listing current leaves nothing of the
	// object in the stream: no meta, no chunk.
	c, err = trees.Scan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := trees.Remove(ctx, b, find(t, c, digest)); err != nil {
		t.Fatal(err)
	}
	if n := objects(t, b.JS); n != 0 {
		t.Errorf("the stream holds %d messages after the last object went, want 0", n)
	}
}

// blockAfter yields n bytes of src, then blocks until release closes.
type blockAfter struct {
	src     io.Reader
	n       int
	release chan struct{}
}

func (r *blockAfter) Read(p []byte) (int, error) {
	if r.n <= 0 {
		<-r.release
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > r.n {
		p = p[:r.n]
	}
	k, err := r.src.Read(p)
	r.n -= k
	return k, err
}

// TestUnfinishedUploadsRemoved: an uploader whose connection dies after
// three chunks (a worker killed while it stores an output) leaves chunks
// that no object names. Storing the same name again does not remove
// them (the object store purges only the chunks of the object it
// replaces); Scan lists them with their count and age, and RemoveUpload
// purges them, leaving the completed object whole.
func TestUnfinishedUploadsRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, e := bustest.Bus(t)
	s, err := trees.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.JS.Stream(ctx, "OBJ_"+trees.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	const name = "cell/R/0123456789abcdef/1"
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := js.ObjectStore(ctx, trees.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 32<<10) // 512 KiB: 4 chunks
	r := &blockAfter{src: bytes.NewReader(data), n: 3 * 128 << 10, release: make(chan struct{})}
	put := make(chan error, 1)
	go func() {
		_, err := ks.Put(ctx, jetstream.ObjectMeta{Name: name}, r)
		put <- err
	}()
	// Wait until the server holds the three chunks, then cut the
	// uploader off as a kill would.
	for {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs >= 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the uploader stored %d chunks", info.State.Msgs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	nc.Close()
	close(r.release)
	if err := <-put; err == nil {
		t.Fatal("the cut-off upload succeeded")
	}
	if _, err := s.GetInfo(ctx, name); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("an object of the cut-off upload: %v", err)
	}

	// The same name stored whole does not take the chunks away.
	if _, err := s.PutBytes(ctx, name, data); err != nil {
		t.Fatal(err)
	}
	c, err := trees.Scan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Objects) != 1 || c.Objects[0].Name != name || c.Objects[0].Size != uint64(len(data)) {
		t.Fatalf("objects %+v, want the one stored whole", c.Objects)
	}
	if len(c.Uploads) != 1 || c.Uploads[0].Chunks != 3 {
		t.Fatalf("unfinished uploads %+v, want one of 3 chunks", c.Uploads)
	}
	if age := time.Since(c.Uploads[0].Last); age < 0 || age > time.Minute {
		t.Errorf("the upload's last chunk is %v old", age)
	}
	rm, err := trees.NewRemover(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.RemoveUpload(ctx, c.Uploads[0]); err != nil {
		t.Fatal(err)
	}
	if c, err = trees.Scan(ctx, b); err != nil || len(c.Uploads) != 0 {
		t.Fatalf("after the purge: %+v, %v", c.Uploads, err)
	}
	if got, err := s.GetBytes(ctx, name); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the stored object after the purge: %d bytes, %v", len(got), err)
	}
	if n := objects(t, b.JS); n != 5 {
		t.Errorf("the stream holds %d messages, want the object's 4 chunks and its meta", n)
	}
}

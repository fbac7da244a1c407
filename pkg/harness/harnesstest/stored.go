package harnesstest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// StoredRunLog materialises the stored output o (the object a terminal
// event names) from b's PROCTOR_TREES bucket and returns its run.log.
// The test fails when o is nil or the object cannot be fetched.
func StoredRunLog(t testing.TB, b *bus.Bus, o *events.OutputObject) string {
	t.Helper()
	if o == nil {
		t.Fatal("the terminal event names no stored output")
	}
	store, err := trees.Lookup(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "cell")
	if err := trees.FetchOutput(context.Background(), store, trees.Output{Name: o.Object, Digest: o.Digest}, dest); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(dest, "run.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(log)
}

// NodeCellsLeft lists what is left under the node's cells directory
// (cellrun.NodeOutputs), as paths relative to it.
func NodeCellsLeft() []string {
	root := cellrun.NodeOutputs()
	var left []string
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != root {
			left = append(left, strings.TrimPrefix(p, root))
		}
		return nil
	})
	return left
}

// StoreWatch sees the first chunk of any output reach b's PROCTOR_TREES
// bucket and counts, at that moment, how many sandboxes were destroyed.
type StoreWatch struct {
	once      sync.Once
	stored    chan struct{}
	destroyed int
}

// WatchStore creates bucket on b when it is not nil (a test's own
// configuration of PROCTOR_TREES, such as one that refuses every write),
// then watches the bucket's chunks; destroyed tells how many sandboxes
// the test's driver has destroyed so far.
func WatchStore(t testing.TB, b *bus.Bus, bucket *jetstream.ObjectStoreConfig, destroyed func() int) *StoreWatch {
	t.Helper()
	if bucket != nil {
		if _, err := b.JS.CreateObjectStore(context.Background(), *bucket); err != nil {
			t.Fatal(err)
		}
	}
	w := &StoreWatch{stored: make(chan struct{})}
	sub, err := b.NC.Subscribe("$O."+trees.Bucket+".C.>", func(*nats.Msg) {
		w.once.Do(func() {
			w.destroyed = destroyed()
			close(w.stored)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

// StoredAfterTeardown fails t unless an output was stored within 10 s,
// after exactly one sandbox had been destroyed (no line of the cell is
// written after the copy), and the node keeps no cell directory once the
// terminal event is published.
func (w *StoreWatch) StoredAfterTeardown(t testing.TB) {
	t.Helper()
	select {
	case <-w.stored:
	case <-time.After(10 * time.Second):
		t.Fatal("no chunk of the output was seen")
	}
	if w.destroyed != 1 {
		t.Errorf("%d sandboxes destroyed when the output was stored, want 1 (store after the teardown)", w.destroyed)
	}
	if left := NodeCellsLeft(); len(left) != 0 {
		t.Errorf("the node keeps %q after the terminal event was published", left)
	}
}

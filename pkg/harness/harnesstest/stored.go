package harnesstest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

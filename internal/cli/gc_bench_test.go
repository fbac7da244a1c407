package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// BenchmarkGC measures `proctor gc --run R` removing the 1,000 stored
// one-file outputs of an ended run from an in-process server (listing
// the bucket and the planned cells, one compare-and-set marker, a purge
// of the chunks and a purge of the marker per object) against its floor
// in the same run on the same server: ObjectStore.Delete of each of
// 1,000 objects of the same size, the object store's own removal, which
// does less (it leaves a delete marker per name in the stream).
// Reported: gc_s, floor_s and ratio (gc over floor; target <= 2: gc
// also lists the bucket and reads the planned cells, and removes each
// object by a compare-and-set, 16 at a time).
func BenchmarkGC(b *testing.B) {
	ctx := context.Background()
	bs, e := bustest.Bus(b)
	store, err := trees.Open(ctx, bs)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.log"), []byte("one line\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	const n = 1000
	fill := func(run string) []string {
		names := make([]string, n)
		for i := range names {
			o, err := trees.PutOutput(ctx, store, trees.OutputName(run, fmt.Sprintf("t/oracle/m/%d", i), 1), dir)
			if err != nil {
				b.Fatal(err)
			}
			names[i] = o.Name
		}
		return names
	}
	var gcSum, floorSum time.Duration
	for i := 0; i < b.N; i++ {
		run := fmt.Sprintf("R%d", i)
		fill(run)
		if err := bs.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusFinished}); err != nil {
			b.Fatal(err)
		}
		var stdout, stderr testutil.SyncBuffer
		g := testGlobals(b, &stdout, &stderr)
		g.natsURL = e.ClientURL()
		g.sandboxes = []sandboxDriver{fakeSandbox("fake", &sandboxfake.Driver{})}
		cmd := newGC(g)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs([]string{"--sandbox", "fake", "--run", run})
		t0 := time.Now()
		if err := cmd.ExecuteContext(ctx); err != nil {
			b.Fatal(err, stderr.String())
		}
		gcSum += time.Since(t0)
		if want := fmt.Sprintf("removed %d stored objects", n); !strings.Contains(stdout.String(), want) {
			b.Fatalf("gc said %q, want %q", stdout.String(), want)
		}

		names := fill("F" + run)
		t0 = time.Now()
		for _, name := range names {
			if err := store.Delete(ctx, name); err != nil {
				b.Fatal(err)
			}
		}
		floorSum += time.Since(t0)
	}
	gcS, floorS := gcSum.Seconds()/float64(b.N), floorSum.Seconds()/float64(b.N)
	b.ReportMetric(gcS, "gc_s")
	b.ReportMetric(floorS, "floor_s")
	b.ReportMetric(gcS/floorS, "ratio")
}

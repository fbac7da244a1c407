package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// TestServeSweepsDeadCellDirectories: `proctor serve launcher` on a node
// removes at start the cell directory under $PROCTOR_HOME/cells of a run
// that ended while the cell was there (its worker killed), and keeps the
// directory of a cell of a live run.
func TestServeSweepsDeadCellDirectories(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PROCTOR_HOME", home)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, e := bustest.Bus(t)
	for id, status := range map[string]string{"ended": bus.StatusFinished, "live": bus.StatusRunning} {
		if err := b.PutRun(ctx, bus.RunRecord{ID: id, Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	dead := cellrun.NodeDir(filepath.Join(home, "cells"), "ended", "t/oracle/m/1", 1)
	live := cellrun.NodeDir(filepath.Join(home, "cells"), "live", "t/oracle/m/1", 1)
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "run.log"), []byte("started\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var stdout, stderr testutil.SyncBuffer
	g := testGlobals(t, &stdout, &stderr)
	g.natsURL = e.ClientURL()
	g.sandboxes = []sandboxDriver{fakeSandbox("fake", &sandboxfake.Driver{})}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		cmd := newServe(g)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs([]string{"launcher", "--sandbox", "fake", "--node", "n1"})
		done <- cmd.ExecuteContext(sctx)
	}()
	// The sweep removes the cell's directory, then the parents it
	// emptied: wait for the last of them.
	for {
		if _, err := os.Stat(filepath.Join(home, "cells", "ended")); os.IsNotExist(err) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("the dead run's cell directory is still there; stderr:\n%s", stderr.String())
		case <-time.After(20 * time.Millisecond): // polling the directory
		}
	}
	if _, err := os.Stat(filepath.Join(live, "run.log")); err != nil {
		t.Errorf("the live cell's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "cells", "ended")); !os.IsNotExist(err) {
		t.Errorf("the dead run's emptied directory is left: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
}

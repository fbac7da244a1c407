package cli

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestConcurrencyBoundsContainers: at --concurrency 1, three cells whose
// verifier takes 2 s never hold two containers at once (each cell's
// container lives between its ImageBuilt and its Verdict, which is
// published after the container is destroyed, and those spans do not
// overlap), and a cell's elapsed_sec is its own time (its image phase,
// also reported as build_sec, its solve and its verify; they add up to
// the run's span): the wait for the slot is queue_sec, apart.
func TestConcurrencyBoundsContainers(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	home := t.TempDir()
	t.Setenv("PROCTOR_HOME", home)
	root := filepath.Join(t.TempDir(), "tasks")
	for _, name := range []string{"slot-a", "slot-b", "slot-c"} {
		writeTask(t, root, name, "FROM debian:bookworm-slim\nWORKDIR /app\n", "sleep 2\necho 1 > /logs/verifier/reward.txt\n")
	}
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--concurrency", "1")
	if len(a.Results) != 3 {
		t.Fatalf("%d rows, want 3", len(a.Results))
	}
	queued, sumElapsed := 0, 0.0
	for _, r := range a.Results {
		if !r.Passed {
			t.Errorf("%s: outcome %s (%s)", r.Task, r.Outcome, r.Error)
		}
		sumElapsed += r.ElapsedSec
		if q := r.Metrics.QueueSec; q != nil && *q >= 1.5 {
			queued++
		}
	}
	if queued < 2 {
		t.Errorf("%d cells with queue_sec >= 1.5 s, want 2 (they waited for the one slot)", queued)
	}

	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	type span struct{ from, to time.Time }
	spans := map[string]*span{}
	err = b.ReadRun(context.Background(), a.Run.ID, func(e events.Envelope) error {
		switch e.Type {
		case events.ImageBuilt:
			spans[e.CellID] = &span{from: e.At}
		case events.Verdict, events.CellErrored:
			if s := spans[e.CellID]; s != nil {
				s.to = e.At
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var all []span
	for id, s := range spans {
		if s.to.IsZero() {
			t.Fatalf("cell %s: no terminal event", id)
		}
		all = append(all, *s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].from.Before(all[j].from) })
	// The cells ran one after another, so their own times add up to the
	// span from the first image phase to the last verdict; a cell whose
	// elapsed_sec counted its wait would count another cell's time again.
	if span := all[len(all)-1].to.Sub(all[0].from).Seconds(); sumElapsed > span+0.5 {
		t.Errorf("elapsed_sec sums to %.3f s over a %.3f s span: a cell's elapsed counts its wait", sumElapsed, span)
	}
	for i := 1; i < len(all); i++ {
		if all[i].from.Before(all[i-1].to) {
			t.Errorf("two cells held a container at once: one from %s to %s, the next from %s",
				all[i-1].from.Format(time.StampMilli), all[i-1].to.Format(time.StampMilli), all[i].from.Format(time.StampMilli))
		}
	}
}

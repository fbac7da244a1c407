package cli

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/services/launcher"
)

// TestConcurrencyBoundsContainers: at --concurrency 1, three cells whose
// verifier takes 2 s never solve at once (each cell's solve, from Started
// for Finished's duration_sec, is apart from the others'), never hold more than 1 +
// launcher.Ahead(1) containers at once (a container lives between its
// SandboxStarted and its Verdict, which is published after the container
// is destroyed), and a cell's wait for its slots is queue_sec, apart
// from its elapsed_sec: a cell that waited for a sandbox while another's
// verifier ran has queue_sec >= 1.5 s and an elapsed_sec that is its
// span less that wait.
func TestConcurrencyBoundsContainers(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	home := t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	root := filepath.Join(t.TempDir(), "tasks")
	for _, name := range []string{"slot-a", "slot-b", "slot-c"} {
		writeTask(t, root, name, "FROM debian:bookworm-slim\nWORKDIR /app\n", "sleep 2\necho 1 > /logs/verifier/reward.txt\n")
	}
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--concurrency", "1")
	if len(a.Results) != 3 {
		t.Fatalf("%d rows, want 3", len(a.Results))
	}
	byCell := map[string]artifact.Result{}
	for _, r := range a.Results {
		if !r.Passed {
			t.Errorf("%s: outcome %s (%s)", r.Task, r.Outcome, r.Error)
		}
		byCell[r.CellID] = r
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
	solves, boxes, cells := map[string]*span{}, map[string]*span{}, map[string]*span{}
	err = b.ReadRun(context.Background(), a.Run.ID, func(e events.Envelope) error {
		switch e.Type {
		case events.ImageBuilt:
			var d events.ImageBuiltData
			_ = events.Into(e, &d)
			cells[e.CellID] = &span{from: e.At.Add(-time.Duration(d.BuildSec * float64(time.Second)))}
		case events.SandboxStarted:
			boxes[e.CellID] = &span{from: e.At}
		case events.Started:
			solves[e.CellID] = &span{from: e.At}
		case events.Finished:
			// The solve ends DurationSec after Started; Finished comes
			// after the egress log and the tamper scan, outside the slot.
			var d events.FinishedData
			if s := solves[e.CellID]; s != nil && events.Into(e, &d) == nil {
				s.to = s.from.Add(time.Duration(d.DurationSec * float64(time.Second)))
			}
		case events.Verdict, events.CellErrored:
			for _, m := range []map[string]*span{boxes, cells} {
				if s := m[e.CellID]; s != nil {
					s.to = e.At
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// peak is the most spans open at once.
	peak := func(m map[string]*span) int {
		type edge struct {
			at time.Time
			d  int
		}
		var es []edge
		for id, s := range m {
			if s.to.IsZero() {
				t.Fatalf("cell %s: a span with no end", id)
			}
			es = append(es, edge{s.from, 1}, edge{s.to, -1})
		}
		sort.Slice(es, func(i, j int) bool {
			if es[i].at.Equal(es[j].at) {
				return es[i].d < es[j].d
			}
			return es[i].at.Before(es[j].at)
		})
		n, most := 0, 0
		for _, e := range es {
			n += e.d
			most = max(most, n)
		}
		return most
	}
	if n := peak(solves); n != 1 {
		t.Errorf("%d solves ran at once, want 1", n)
	}
	if n, bound := peak(boxes), 1+launcher.Ahead(1); n > bound {
		t.Errorf("%d containers were alive at once, want at most %d", n, bound)
	}
	waited := 0
	for id, s := range cells {
		r := byCell[id]
		q := 0.0
		if r.Metrics.QueueSec != nil {
			q = *r.Metrics.QueueSec
		}
		if own := s.to.Sub(s.from).Seconds() - q; r.ElapsedSec > own+0.5 {
			t.Errorf("cell %s: elapsed_sec %.3f over its span less its wait (%.3f s): the wait is counted in it", id, r.ElapsedSec, own)
		}
		if q >= 1.5 {
			waited++
		}
	}
	if waited == 0 {
		t.Errorf("no cell has queue_sec >= 1.5 s, want the one that waited for a sandbox while a verifier ran")
	}
}

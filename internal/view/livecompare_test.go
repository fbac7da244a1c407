package view_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/view"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestViewLiveComparisonLeavesQueuedCellsOut: while a run goes, its page's
// comparison with the baseline is over the cells that ended, as its
// per-harness summary is; a queued or running cell is not missing data
// yet, so it is neither an excluded pair nor an errored cell of either arm.
func TestViewLiveComparisonLeavesQueuedCellsOut(t *testing.T) {
	t.Parallel()
	_, b := startNATS(t)
	ctx := context.Background()
	runID, cells := publishRun(t, b, 3, 2, filepath.Join(t.TempDir(), "out"), false)
	if err := b.PutRun(ctx, bus.RunRecord{ID: runID, Status: bus.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	// task-00000 ended in both arms (the baseline failed, the other
	// passed); task-00001 runs in the baseline; the rest is queued.
	zero, one := 0.0, 1.0
	if err := b.PublishAll(ctx,
		events.Must(events.Verdict, runID, cells[0], 1, "test", events.VerdictData{Reward: &zero, DurationSec: 0.1}),
		events.Must(events.Verdict, runID, cells[1], 1, "test", events.VerdictData{Reward: &one, DurationSec: 0.1}),
		events.Must(events.Started, runID, cells[2], 1, "test", events.StartedData{Harness: "agent:h0", Model: "m"}),
	); err != nil {
		t.Fatal(err)
	}
	srv := startView(t, b, view.Config{Version: "test"})
	var page view.RunPage
	deadline := time.Now().Add(30 * time.Second)
	for {
		getJSON(t, srv.URL+"/runs/"+runID+".json", &page)
		if c := page.Comparisons["agent:h1"]; !page.SummaryPending && c != nil && c.McNemar.N+c.McNemar.NExcluded >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no comparison built: %+v", page)
		}
		time.Sleep(50 * time.Millisecond) // polling the page while its background build runs
	}
	c := page.Comparisons["agent:h1"]
	m := c.McNemar
	if m.N != 1 || m.NGained != 1 || m.NExcluded != 0 || c.Errored != 0 || c.BaselineErrored != 0 {
		t.Errorf("live comparison: pairs %d gained %d excluded %d, errored %d, baseline errored %d; want 1 pair gained, nothing excluded or errored",
			m.N, m.NGained, m.NExcluded, c.Errored, c.BaselineErrored)
	}
	if s := page.Summary["agent:h0"]; s == nil || s.N != 1 || s.Errored != 0 {
		t.Errorf("live summary of the baseline: %+v", s)
	}
}

package projection

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// foldRetained folds n events over cells cells (8 running at a time, each
// a CellPlanned, a telemetry stream of Usage, ToolCall, Command and
// Message events, then a Verdict) into a Projector without a bus and
// returns the heap in use after a GC with the projector still alive
// (bytes): what the projection keeps, which must not grow with n.
// Operation events are left out: the artifact lists every one of them
// (artifact.Result.Operations), so they are output, not state.
func foldRetained(t testing.TB, cells, n int) uint64 {
	t.Helper()
	runID := events.NewID()
	p := NewProjector(runID)
	at := time.Date(2025, 1, 15, 10, 0, 0, 0, time.UTC)
	apply := func(typ events.Type, cell string, data any) {
		e := events.Must(typ, runID, cell, 1, "bench", data)
		at = at.Add(time.Millisecond)
		e.At = at
		// Through the wire form, as from the log.
		b, err := events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if e, err = events.Decode(b); err != nil {
			t.Fatal(err)
		}
		p.Apply(e)
	}
	apply(events.RunPlanned, "", events.RunPlannedData{Cells: cells})
	perCell := n / cells
	cost, exit0, r := 0.001, 0, 1.0
	id := func(i int) string { return events.CellID(fmt.Sprintf("task-%04d", i), "oracle", "m", 1) }
	for lo := 0; lo < cells; lo += 8 {
		hi := min(lo+8, cells)
		for i := lo; i < hi; i++ {
			apply(events.CellPlanned, id(i), events.CellPlannedData{Task: fmt.Sprintf("task-%04d", i), Harness: "oracle", Model: "m", Repeat: 1})
		}
		for k := 0; k < perCell-2; k++ {
			for i := lo; i < hi; i++ {
				switch k % 4 {
				case 0:
					apply(events.Usage, id(i), events.UsageData{PromptTokens: events.Count(100), CostUSD: &cost})
				case 1:
					apply(events.ToolCall, id(i), events.ToolCallData{Name: "bash"})
				case 2:
					apply(events.Command, id(i), events.CommandData{Command: "pytest", ExitCode: &exit0})
				default:
					apply(events.Message, id(i), events.MessageData{Role: "assistant", Text: "again"})
				}
			}
		}
		for i := lo; i < hi; i++ {
			apply(events.Verdict, id(i), events.VerdictData{Reward: &r})
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if got := p.DoneCells(); got != cells {
		t.Fatalf("%d cells done, want %d", got, cells)
	}
	runtime.KeepAlive(p)
	return ms.HeapInuse
}

// TestProjectionMemoryBoundedByCells projects 1000 cells from 1e5 and
// from 1e6 events (the 1e6 vs 1e7, sized for a test) and requires
// the heap the projection keeps to grow by at most 1.2×.
func TestProjectionMemoryBoundedByCells(t *testing.T) {
	if testing.Short() {
		t.Skip("folds 1.1e6 events")
	}
	small := foldRetained(t, 1000, 100_000)
	large := foldRetained(t, 1000, 1_000_000)
	t.Logf("heap kept: %.1f MB for 1e5 events, %.1f MB for 1e6, ratio %.2f", float64(small)/1e6, float64(large)/1e6, float64(large)/float64(small))
	if float64(large) > 1.2*float64(small) {
		t.Errorf("heap kept grows with events: %d bytes for 1e5, %d for 1e6 over 1000 cells (> 1.2×)", small, large)
	}
}

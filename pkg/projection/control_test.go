package projection

import (
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestControlEventString: a control action reads as one line, its cells
// counted in words ("1 cell", "2 cells").
func TestControlEventString(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 4, 5, 0, time.UTC)
	for n, want := range map[int]string{
		1: "2026-12-02 12:04:05 cancel 1 cell by alice@h pid 7: broken task",
		2: "2026-12-02 12:04:05 cancel 2 cells by alice@h pid 7: broken task",
	} {
		c := ControlEvent{At: at, RunControlData: events.RunControlData{Action: events.ControlCancel, By: "alice@h pid 7", Why: "broken task"}}
		for i := range n {
			c.Cells = append(c.Cells, "t/h/m/"+string(rune('1'+i)))
		}
		if got := c.String(); got != want {
			t.Errorf("%d cells: %q, want %q", n, got, want)
		}
	}
}

package cli

import (
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/bus"
)

// A run paused while its last cells ended is shown paused with why, and
// without the continue or cancel it can no longer take; a live paused run
// keeps both.
func TestRunShowPausedRunThatEnded(t *testing.T) {
	for _, c := range []struct {
		status    string
		want, not string
	}{
		{bus.StatusFinished, "paused     by me: look; the run ended finished while paused\n", "runs continue"},
		{bus.StatusRunning, "paused     by me: look; `proctor runs continue R1` or `proctor runs cancel R1`\n", "ended"},
	} {
		v := runView{RunRecord: bus.RunRecord{ID: "R1", Status: c.status}}
		v.Control.Paused, v.Control.PausedBy, v.Control.PausedWhy = true, "me", "look"
		var b strings.Builder
		writeRunView(&b, v)
		if got := b.String(); !strings.Contains(got, c.want) || strings.Contains(got, c.not) {
			t.Errorf("runs show of a paused %s run:\n%s\nwant %q, not %q", c.status, got, c.want, c.not)
		}
	}
}

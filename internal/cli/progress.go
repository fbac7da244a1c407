package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// progress follows the run's events on stderr until RunFinished or ctx
// ends: a progress bar on a terminal, one plain line per finished cell
// otherwise. The plan comes first: the planner publishes the refusals of a
// run (CellRefused) before RunPlanned, so their lines wait for it and are
// printed as [i/N] after "planned N cells".
func (g *globals) progress(ctx context.Context, b *bus.Bus, runID string) {
	total, done := 0, 0
	planned := false
	var early []string // cell lines seen before RunPlanned
	ended := map[string]bool{}
	var bar *progressbar.ProgressBar
	tty := false
	if f, ok := g.stderr.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		tty = true
	}
	_ = b.Follow(ctx, []string{events.RunFilter(runID)}, func(e events.Envelope) error {
		switch e.Type {
		case events.RunPlanned:
			var d events.RunPlannedData
			_ = events.Into(e, &d)
			total, planned = d.Cells, true
			switch {
			case d.Error != "":
				fmt.Fprintf(g.stderr, "planning failed: %s\n", d.Error)
			case tty:
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(g.stderr),
					progressbar.OptionSetDescription("cells"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
				_ = bar.Set(done)
			default:
				fmt.Fprintf(g.stderr, "planned %d cells\n", total)
				for i, l := range early {
					fmt.Fprintf(g.stderr, "[%d/%d] %s\n", i+1, total, l)
				}
			}
			early = nil
		case events.CellSuperseded:
			if ended[e.CellID] {
				ended[e.CellID] = false
				done--
			}
		case events.Verdict, events.CellErrored, events.CellRefused:
			if ended[e.CellID] {
				return nil
			}
			ended[e.CellID] = true
			done++
			switch {
			case !planned:
				early = append(early, e.CellID+" "+describe(e))
			case bar != nil:
				_ = bar.Set(done)
			default:
				fmt.Fprintf(g.stderr, "[%d/%d] %s %s\n", done, total, e.CellID, describe(e))
			}
		case events.RunFinished:
			if bar != nil {
				_ = bar.Finish()
			}
			return bus.ErrStop
		}
		return nil
	})
}

func describe(e events.Envelope) string {
	switch e.Type {
	case events.Verdict:
		var v events.VerdictData
		_ = events.Into(e, &v)
		switch {
		case v.TimedOut:
			return "verifier timeout (reward 0)"
		case v.Reward == nil:
			return "verifier error: " + v.Error
		}
		return fmt.Sprintf("reward %g", *v.Reward)
	case events.CellErrored:
		var d events.CellErroredData
		_ = events.Into(e, &d)
		return "errored (" + d.ErrorClass + "): " + d.Error
	case events.CellRefused:
		var d events.CellRefusedData
		_ = events.Into(e, &d)
		return "errored (" + d.ErrorClass + "): " + d.Reason
	}
	return string(e.Type)
}

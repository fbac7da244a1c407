package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// progress follows the run's events on stderr until the run ends or ctx
// ends: a progress bar on a terminal, one plain line per finished cell
// otherwise. The events are folded by a projection.Projector, so a cell is
// done exactly when the artifact will count it done (its current attempt
// has its terminal event; a superseded attempt's cell counts again only
// when its new attempt ends), and its line says what its row will say. The
// plan comes first: the planner publishes the refusals of a run
// (CellRefused) before RunPlanned, so their lines wait for it and are
// printed as [i/N] after "planned N cells". It stops at the RunFinished
// of epoch or a later one (projection.Follow: a resumed run's log holds
// the RunFinished of each earlier epoch, which the RunResumed after it
// reopens). For a resumed run (epoch > 0) the log before the RunResumed
// of epoch is history, which resume and requeue have already summed up
// (each cell run again or reused, with why): it is folded in silence, and
// the lines start with that RunResumed, counting the cells already done.
// Event data that did not decode is reported in one warning line at the
// end.
func (g *globals) progress(ctx context.Context, b *bus.Bus, runID string, epoch int) {
	p := projection.NewProjector(runID)
	total, done := 0, 0
	history := epoch > 0
	var early []string // cell lines seen before RunPlanned
	var bar *progressbar.ProgressBar
	tty := false
	if f, ok := g.stderr.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		tty = true
	}
	err := projection.Follow(ctx, b, runID, projection.FollowOptions{Epoch: epoch}, func(e events.Envelope) error {
		planned := p.Planned()
		p.Apply(e)
		if history {
			total, done = p.Record().Cells, p.DoneCells()
			var d events.RunResumedData
			if e.Type != events.RunResumed || events.Into(e, &d) != nil || d.Epoch != epoch {
				return nil
			}
			history = false
			if tty && total > 0 {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(g.stderr),
					progressbar.OptionSetDescription("cells"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
				_ = bar.Set(done)
			}
			return nil
		}
		if e.Type == events.RunControl {
			fmt.Fprintln(g.stderr, controlLine(p))
		}
		switch {
		case e.Type == events.RunPlanned && !planned:
			total = p.Record().Cells
			switch {
			case p.PlanError() != "":
				fmt.Fprintf(g.stderr, "planning failed: %s\n", textsafe.Line(p.PlanError()))
			case tty:
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(g.stderr),
					progressbar.OptionSetDescription("cells"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
				_ = bar.Set(done)
			default:
				fmt.Fprintf(g.stderr, "planned %d %s\n", total, plural(total, "cell", "cells"))
				for i, l := range early {
					fmt.Fprintf(g.stderr, "[%d/%d] %s\n", i+1, total, textsafe.Line(l))
				}
			}
			early = nil
		case e.CellID != "" && p.DoneCells() != done:
			ended := p.DoneCells() > done && projection.Terminal(e.Type)
			done = p.DoneCells()
			switch {
			case bar != nil:
				_ = bar.Set(done)
			case !ended:
			case !p.Planned():
				early = append(early, e.CellID+" "+describe(p, e.CellID))
			default:
				fmt.Fprintf(g.stderr, "[%d/%d] %s %s\n", done, total, textsafe.Line(e.CellID), describe(p, e.CellID))
			}
		}
		return nil
	})
	if err == nil { // the run ended
		if bar != nil {
			_ = bar.Finish()
		}
		g.warnDecodeErrors(p.DecodeErrors())
	}
}

// describe is a done cell's outcome as its row has it, shown through
// textsafe.Line: an error can hold what the agent wrote (a Finished
// reason, a result subtype).
func describe(p *projection.Projector, cellID string) string {
	return textsafe.Line(outcomeText(p, cellID))
}

func outcomeText(p *projection.Projector, cellID string) string {
	r, ok := p.Row(cellID)
	switch {
	case !ok:
		return "done (no CellPlanned event)"
	case r.Outcome == artifact.OutcomeVerifierTimeout:
		return "verifier timeout (reward 0)"
	case r.Outcome == artifact.OutcomeVerifierError:
		return "verifier error: " + r.Error
	case r.Outcome == artifact.OutcomeErrored:
		return "errored (" + r.ErrorClass + "): " + r.Error
	case r.Reward == nil:
		return r.Outcome
	}
	return fmt.Sprintf("reward %g", *r.Reward)
}

// warnDecodeErrors prints, on stderr, the events whose data did not
// decode, as the artifact lists them (run.decode_errors); nothing when
// there were none.
func (g *globals) warnDecodeErrors(d *artifact.DecodeErrors) {
	if d == nil {
		return
	}
	fmt.Fprintf(g.stderr, "warning: %s\n", decodeErrorsText(d))
}

// decodeErrorsText is one line: "2 events did not decode (Usage 1,
// Verdict 1); the first: ...", shown through textsafe.Line (the first
// error quotes the event's data).
func decodeErrorsText(d *artifact.DecodeErrors) string {
	var types []string
	for _, t := range slices.Sorted(maps.Keys(d.ByType)) {
		types = append(types, fmt.Sprintf("%s %d", t, d.ByType[t]))
	}
	return textsafe.Line(fmt.Sprintf("%d events did not decode (%s); the first: %s", d.Count, strings.Join(types, ", "), d.First))
}

// controlLine is the run's last control action as one line for a person
// ("control: 2026-12-02 10:04:05 pause by cap (cap max_cost_usd): ..."),
// with what to do when it paused the run.
func controlLine(p *projection.Projector) string {
	cs := p.Controls()
	if len(cs) == 0 {
		return ""
	}
	c := cs[len(cs)-1]
	line := "control: " + textsafe.Line(c.String())
	if c.Action == events.ControlPause {
		line += fmt.Sprintf(" (run paused: `proctor runs continue %s` or `proctor runs cancel %s`)", p.Record().ID, p.Record().ID)
	}
	return line
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

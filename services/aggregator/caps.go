package aggregator

import (
	"context"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// CapSource names the aggregator as the one who paused a run whose cap
// tripped (RunControlData.By).
const CapSource = "cap"

// caps pauses a run whose spending cap (RunSpec.Caps) the events so far
// trip (projection.Projector.CapTripped), once per cap: the RunControl
// event it publishes names the cap, so the projection (this follow's,
// and any replay's) knows it tripped. Only live events are checked (live:
// the follow has reached the events stored when it began), so an
// aggregator that replays a run never trips again a cap an earlier one
// tripped and an operator continued. The event's id is the run's one id
// for the cap (events.RunOnceID), so two aggregators following the run
// live, both tripping it, put one pause in the log.
type caps struct {
	tripped map[string]bool // caps this follow paused the run for
}

func (c *caps) check(ctx context.Context, b *bus.Bus, runID string, p *projection.Projector, e events.Envelope) error {
	switch e.Type {
	case events.Verdict, events.CellErrored, events.Finished, events.ModelCall, events.Usage:
	default:
		return nil
	}
	name, why := p.CapTripped()
	if name == "" || c.tripped[name] {
		return nil
	}
	if c.tripped == nil {
		c.tripped = map[string]bool{}
	}
	c.tripped[name] = true
	_, err := b.ControlID(ctx, runID, Source, events.RunOnceID(runID, "cap/"+name),
		events.RunControlData{Action: events.ControlPause, By: CapSource, Cap: name, Why: why})
	return err
}

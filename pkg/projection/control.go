package projection

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// ControlEvent is one control action of a run's log (RunControl): when,
// from which component, and what.
type ControlEvent struct {
	At     time.Time
	Source string
	events.RunControlData
}

// String is the action as one line: "2026-12-02 12:04:05 pause by
// alice@h pid 7: why" (UTC).
func (c ControlEvent) String() string {
	s := c.At.UTC().Format("2006-01-02 15:04:05") + " " + c.Action
	if c.Now {
		s += " --now"
	}
	if len(c.Cells) > 0 {
		unit := "cells"
		if len(c.Cells) == 1 {
			unit = "cell"
		}
		s += fmt.Sprintf(" %d %s", len(c.Cells), unit)
	}
	s += " by " + c.By
	if c.Cap != "" {
		s += " (cap " + c.Cap + ")"
	}
	if c.Why != "" {
		s += ": " + c.Why
	}
	return s
}

// applyControl folds a RunControl event: the control state, and for a
// requeue the cells whose named attempt ended, which are pending their
// new attempt and not done (as a retried cell is).
func (p *Projector) applyControl(e events.Envelope) {
	var d events.RunControlData
	if p.into(e, &d) != nil {
		return
	}
	p.control.Apply(d, e.At)
	p.controls = append(p.controls, ControlEvent{At: e.At, Source: e.Source, RunControlData: d})
	if d.Action != events.ControlRequeue {
		return
	}
	for _, id := range d.Cells {
		c := p.cells[id]
		if c == nil || c.attempt != d.Attempts[id] {
			continue // its new attempt began already
		}
		if c.terminal && !c.retrying {
			c.retrying = true
			p.terminal--
		}
	}
}

// Control is the run's control state as its RunControl events so far set
// it (paused, cancelled cells, caps tripped).
func (p *Projector) Control() bus.ControlState { return p.control }

// Controls lists the run's control actions in log order.
func (p *Projector) Controls() []ControlEvent { return slices.Clone(p.controls) }

// Cancelled reports whether the whole run was cancelled.
func (p *Projector) Cancelled() bool { return p.control.Cancelled }

// CapTripped returns the name and reason of the first of the run's caps
// (RunSpec.Caps) that the cells done so far trip and that has not tripped
// before (each trips once: after a continue the run goes on past it), or
// "" when none does. Cost counts each cell's observed cost where the
// gateway priced its calls, else the cost its agent reported; errored
// cells are those done without a verdict, refusals before any build
// excluded.
func (p *Projector) CapTripped() (name, why string) {
	caps := p.Spec().Caps
	if !caps.Any() {
		return "", ""
	}
	tripped := func(n string) bool { return slices.Contains(p.control.Caps, n) }
	if caps.MaxCostUSD > 0 && !tripped("max_cost_usd") {
		if cost := p.CostUSD(); cost >= caps.MaxCostUSD {
			return "max_cost_usd", fmt.Sprintf("the run's cost reached $%.4f (--max-cost-usd %g)", cost, caps.MaxCostUSD)
		}
	}
	if caps.MaxErroredFraction <= 0 && caps.MaxErroredPerTask <= 0 {
		return "", ""
	}
	done, errored := 0, 0
	perTask := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(p.cells)) {
		c := p.cells[id]
		if !c.terminal || c.retrying || c.refused != nil {
			continue
		}
		done++
		if r := p.row(id); r.Errored() && r.ErrorClass != artifact.ErrorCancelled {
			errored++
			perTask[c.plan.Task]++
		}
	}
	if f := caps.MaxErroredFraction; f > 0 && !tripped("max_errored_fraction") && done >= max(caps.ErroredMinCount, 1) && float64(errored) > f*float64(done) {
		return "max_errored_fraction", fmt.Sprintf("%d of %d done cells errored (more than --max-errored-fraction %g)", errored, done, f)
	}
	if n := caps.MaxErroredPerTask; n > 0 && !tripped("max_errored_per_task") {
		for _, task := range slices.Sorted(maps.Keys(perTask)) {
			if perTask[task] >= n {
				return "max_errored_per_task", fmt.Sprintf("%d cells of task %s errored (--max-errored-per-task %d)", perTask[task], task, n)
			}
		}
	}
	return "", ""
}

// CostUSD is the run's cost so far, in US dollars: each cell's observed
// cost where the gateway priced its calls, else the cost its agent
// reported (0 for a cell with neither).
func (p *Projector) CostUSD() float64 {
	sum := 0.0
	for _, c := range p.cells {
		switch {
		case c.observed != nil && c.observed.noCost == "" && c.observed.u.Requests > 0:
			sum += c.observed.cost
		case c.cost != nil:
			sum += *c.cost
		}
	}
	return sum
}

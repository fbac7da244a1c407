// Package cellrun is the preamble every service that works on one cell of
// a run shares (launcher, verifier): read the run record, skip a job of an
// ended run, read the cell's CellPlanned, and load the task checking that
// its revision is the one planned, so no consumer scores a task that
// changed since the run was planned.
package cellrun

import (
	"context"
	"errors"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
)

// Cell is one planned cell as a service sees it.
type Cell struct {
	RunID, CellID string
	// Status is the run record's status.
	Status string
	// Epoch is the run record's epoch (its resumes).
	Epoch int
	// Expired is set when the run's lease ended: its owner is gone and
	// its work is dropped until a resume takes it over.
	Expired bool
	// Spec is the run's spec (from the run record).
	Spec events.RunSpec
	// Control is the run's control state (paused, cancelled cells) when
	// the record was read.
	Control bus.ControlState
	// Plan is the cell's CellPlanned data.
	Plan events.CellPlannedData
	// Dir is the cell's output directory (Plan.OutputDir).
	Dir cellfs.Dir
}

// Ended reports whether the run has ended (finished, failed or
// interrupted) or its lease expired: a job of such a run is dropped.
func (c *Cell) Ended() bool {
	if c.Expired {
		return true
	}
	return bus.RunRecord{Status: c.Status}.Terminal()
}

// Cancelled returns the error a cancel of the cell (or of its whole
// run) recorded in the run index ends it with, or nil.
func (c *Cell) Cancelled() *bus.Cancelled {
	if d, ok := c.Control.CellCancelled(c.CellID); ok {
		return &bus.Cancelled{Control: d}
	}
	return nil
}

// Stale reports whether a job published in epoch belongs to an older
// epoch of the run (before a resume): it is dropped, the resume
// published its own.
func (c *Cell) Stale(epoch int) bool { return epoch != c.Epoch }

// Open reads the run record and, unless the run has ended, the cell's
// CellPlanned, retrying transient bus errors (bus.Retry: a stream leader
// moving) until ctx ends, so a job is not given back, and run again as a
// new attempt, for a blip. Its errors are the event log's (retry the
// job).
func Open(ctx context.Context, b *bus.Bus, runID, cellID string) (*Cell, error) {
	var c *Cell
	err := bus.Retry(ctx, nil, "read cell "+cellID, func(ctx context.Context) error {
		var err error
		c, err = open(ctx, b, runID, cellID)
		return err
	})
	return c, err
}

func open(ctx context.Context, b *bus.Bus, runID, cellID string) (*Cell, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	c := &Cell{RunID: runID, CellID: cellID, Status: rec.Status, Spec: rec.Spec, Epoch: rec.Epoch, Expired: rec.LeaseExpired(time.Now()), Control: rec.Control}
	if c.Ended() {
		return c, nil
	}
	pe, err := b.LastEvent(ctx, events.CellSubject(runID, cellID, events.CellPlanned))
	if err != nil {
		return nil, err
	}
	if err := events.Into(pe, &c.Plan); err != nil {
		return nil, err
	}
	c.Dir = cellfs.Dir(c.Plan.OutputDir)
	return c, nil
}

// LoadTask loads the cell's task and checks its revision against the plan.
// Both failures are an events.ClassError of class infra naming the task.
func (c *Cell) LoadTask() (*task.Task, error) {
	t, err := task.Load(c.Plan.TaskDir)
	if err != nil {
		return nil, events.Classf(events.ClassInfra, "load task: %w", err)
	}
	if t.Revision != c.Plan.TaskRevision {
		return nil, events.Classf(events.ClassInfra, "task %s changed since the run was planned (revision %.12s, planned %.12s)", t.Name, t.Revision, c.Plan.TaskRevision)
	}
	return t, nil
}

// Settled reports whether the cell already has a terminal event (Verdict,
// CellErrored or CellRefused) of attempt or a later one: a job redelivered
// after its work was recorded (its ack lost while a stream leader moved,
// say) is then only acked, so no cell attempt is run or scored twice.
// Transient bus errors are retried (bus.Retry); the error is the event
// log's.
func Settled(ctx context.Context, b *bus.Bus, runID, cellID string, attempt int) (bool, error) {
	for _, t := range []events.Type{events.Verdict, events.CellErrored, events.CellRefused} {
		var e events.Envelope
		err := bus.Retry(ctx, nil, "read cell "+cellID, func(ctx context.Context) error {
			var err error
			e, err = b.LastEvent(ctx, events.CellSubject(runID, cellID, t))
			return err
		})
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if e.Attempt >= attempt {
			return true, nil
		}
	}
	return false, nil
}

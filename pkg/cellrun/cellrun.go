// Package cellrun is the preamble every service that works on one cell of
// a run shares (launcher, verifier): read the run record, skip a job of an
// ended run, read the cell's CellPlanned, and load the task checking that
// its revision is the one planned, so no consumer scores a task that
// changed since the run was planned.
package cellrun

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/trees"
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

	bus *bus.Bus
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

// OpenOnNode is Open for a worker whose driver does not see its disk
// (a cluster that stores outputs): the cell's output directory is
// nodeDir/<run>/<cell hash> on this node, not the planned path, and
// StoreOutput carries it to the driver. An empty nodeDir is Open.
func OpenOnNode(ctx context.Context, b *bus.Bus, runID, cellID, nodeDir string) (*Cell, error) {
	c, err := Open(ctx, b, runID, cellID)
	if err == nil && nodeDir != "" && c.Plan.OutputDir != "" {
		c.Dir = cellfs.Dir(filepath.Join(nodeDir, runID, events.CellHash(cellID)))
	}
	return c, err
}

// NodeOutputs is where a worker that stores outputs keeps its cells'
// output directories: $PROCTOR_HOME/cells.
func NodeOutputs() string { return filepath.Join(bus.Home(), "cells") }

func open(ctx context.Context, b *bus.Bus, runID, cellID string) (*Cell, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	c := &Cell{RunID: runID, CellID: cellID, Status: rec.Status, Spec: rec.Spec, Epoch: rec.Epoch, Expired: rec.LeaseExpired(time.Now()), Control: rec.Control, bus: b}
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
// The task is read at its planned path when that holds the planned
// revision (a single machine, a shared file system); otherwise the tree
// stored under the revision in the PROCTOR_TREES bucket is fetched into
// this node's cache ($PROCTOR_HOME/trees/<revision>) and loaded from
// there, under the name the planned path gives it. Failures are an
// events.ClassError of class infra naming the task.
func (c *Cell) LoadTask(ctx context.Context) (*task.Task, error) {
	t, err := task.Load(c.Plan.TaskDir)
	if err == nil && t.Revision == c.Plan.TaskRevision {
		return t, nil
	}
	ft, ferr := c.fetchTask(ctx)
	if ferr == nil {
		return ft, nil
	}
	stored := ""
	if !errors.Is(ferr, jetstream.ErrObjectNotFound) {
		stored = fmt.Sprintf(" (its stored tree: %v)", ferr)
	}
	if err != nil {
		return nil, events.Classf(events.ClassInfra, "load task: %w%s", err, stored)
	}
	return nil, events.Classf(events.ClassInfra, "task %s changed since the run was planned (revision %.12s, planned %.12s)%s", t.Name, t.Revision, c.Plan.TaskRevision, stored)
}

// TreeCache is the directory of this node's fetched trees.
func TreeCache() string { return filepath.Join(bus.Home(), "trees") }

// fetchTask loads the task from its stored tree.
func (c *Cell) fetchTask(ctx context.Context) (*task.Task, error) {
	if c.bus == nil || c.Plan.TaskRevision == "" {
		return nil, jetstream.ErrObjectNotFound
	}
	store, err := trees.Lookup(ctx, c.bus)
	if err != nil {
		return nil, err
	}
	dir, err := trees.Fetch(ctx, store, c.Plan.TaskRevision, TreeCache())
	if err != nil {
		return nil, err
	}
	t, err := task.Load(dir)
	if err != nil {
		return nil, err
	}
	if t.Revision != c.Plan.TaskRevision {
		return nil, fmt.Errorf("%w: %s loads as revision %.12s", trees.ErrDigest, dir, t.Revision)
	}
	t.Name = filepath.Base(c.Plan.TaskDir)
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

// StoreOutput stores the cell's output directory as the object of
// attempt (trees.OutputName) in the PROCTOR_TREES bucket and returns what
// its Verdict names. Called before the Verdict is published: a process
// killed during the upload leaves no object and no verdict, and the
// attempt's job is redelivered.
func (c *Cell) StoreOutput(ctx context.Context, attempt int) (*events.OutputObject, error) {
	store, err := trees.Open(ctx, c.bus)
	if err != nil {
		return nil, err
	}
	o, err := trees.PutOutput(ctx, store, trees.OutputName(c.RunID, c.CellID, attempt), string(c.Dir))
	if err != nil {
		return nil, err
	}
	return &events.OutputObject{Object: o.Name, Digest: o.Digest}, nil
}

// FetchTree returns this node's cached copy of the tree stored under
// digest (trees.Fetch into TreeCache), fetching it on a miss.
func (c *Cell) FetchTree(ctx context.Context, digest string) (string, error) {
	if c.bus == nil {
		return "", jetstream.ErrObjectNotFound
	}
	store, err := trees.Lookup(ctx, c.bus)
	if err != nil {
		return "", err
	}
	return trees.Fetch(ctx, store, digest, TreeCache())
}

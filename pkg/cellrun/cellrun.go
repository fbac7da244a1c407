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
	"os"
	"path/filepath"
	"strconv"
	"sync"
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
	// Dir is the cell's output directory (Plan.OutputDir, or the node's
	// own under OpenOnNode).
	Dir cellfs.Dir

	bus    *bus.Bus
	onNode bool // Dir is this node's (Node.Outputs), not the planned path
	hold   *trees.HeldDir
	cache  trees.Cache
	mu     sync.Mutex
	held   []func()
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

// Node is what a worker's services set for the cells they open.
type Node struct {
	// Outputs, when set, is where this node keeps its cells' output
	// directories (a cluster that stores outputs: NodeOutputs): a cell
	// attempt's is Outputs/<run>/<cell hash>/<attempt>, not the planned
	// path, and StoreOutput carries it to the driver.
	Outputs string
	// Make: the cell makes its directory under Outputs (the launcher,
	// which starts the attempt there); without, it holds the directory
	// only when this node has it (a verifier: a directory the launcher of
	// another node made is not here, and is never stored empty).
	Make bool
	// Attempt is the attempt the cell is opened for (with Outputs).
	Attempt int
	// Trees is the node's tree cache; an empty Dir is TreeCache().
	Trees trees.Cache
}

// OpenOnNode is Open for a worker: with node.Outputs the cell's output
// directory is on this node (Node.Outputs), made (Node.Make) and held
// (trees.HoldDir) until Close, so the node's Sweeper never removes it while the cell
// uses it; the trees it fetches go to node.Trees. Close releases the
// trees and the directory it holds.
func OpenOnNode(ctx context.Context, b *bus.Bus, runID, cellID string, node Node) (*Cell, error) {
	c, err := Open(ctx, b, runID, cellID)
	if err != nil {
		return c, err
	}
	if node.Outputs != "" && c.Plan.OutputDir != "" {
		dir := NodeDir(node.Outputs, runID, cellID, node.Attempt)
		h, err := trees.HoldDir(dir, node.Make)
		if err != nil {
			return nil, events.Classf(events.ClassInfra, "the cell's output directory on this node: %w", err)
		}
		c.Dir, c.hold = cellfs.Dir(dir), h
		c.onNode = true
	}
	if node.Trees.Dir != "" {
		c.cache = node.Trees
	} else {
		c.cache.MaxBytes, c.cache.Limits = node.Trees.MaxBytes, node.Trees.Limits
	}
	return c, nil
}

// NodeDir is the output directory of a cell attempt on a node that keeps
// them under outputs: outputs/<run>/<cell hash>/<attempt>.
func NodeDir(outputs, runID, cellID string, attempt int) string {
	return filepath.Join(outputs, runID, events.CellHash(cellID), strconv.Itoa(attempt))
}

// Close releases the trees the cell holds (LoadTask, FetchTree), so the
// node's cache may remove them, and its output directory on this node
// (OpenOnNode; removed when the cell left it empty, and so are the cell's
// and the run's directories above it when nothing else is in them); call
// it once the cell's work is done, its output stored and removed
// included.
func (c *Cell) Close() {
	c.mu.Lock()
	held, h := c.held, c.hold
	c.held, c.hold = nil, nil
	c.mu.Unlock()
	for _, r := range held {
		r()
	}
	if h != nil {
		h.Release(true)
		removeEmptyParents(string(c.Dir))
	}
}

// removeEmptyParents removes the cell's and the run's directories above
// a cell attempt's directory on a node (NodeDir) when they are empty.
func removeEmptyParents(attemptDir string) {
	cell := filepath.Dir(attemptDir)
	if os.Remove(cell) == nil {
		_ = os.Remove(filepath.Dir(cell))
	}
}

// fetch returns the node's cached copy of the tree stored under digest,
// held until Close.
func (c *Cell) fetch(ctx context.Context, store jetstream.ObjectStore, digest string) (string, error) {
	dir, release, err := c.cache.Fetch(ctx, store, digest)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.held = append(c.held, release)
	c.mu.Unlock()
	return dir, nil
}

// NodeOutputs is where a worker that stores outputs keeps its cells'
// output directories: $PROCTOR_HOME/cells.
func NodeOutputs() string { return filepath.Join(bus.Home(), "cells") }

func open(ctx context.Context, b *bus.Bus, runID, cellID string) (*Cell, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	c := &Cell{RunID: runID, CellID: cellID, Status: rec.Status, Spec: rec.Spec, Epoch: rec.Epoch, Expired: rec.LeaseExpired(time.Now()), Control: rec.Control, bus: b,
		cache: trees.Cache{Dir: TreeCache()}}
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
	dir, err := c.fetch(ctx, store, c.Plan.TaskRevision)
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
// its terminal event (Verdict or CellErrored) names. Called before that
// event is published: a process killed during the upload leaves no
// object and no terminal event, and the attempt's job is redelivered.
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
// digest (the node's trees.Cache), fetching it on a miss; the tree is
// held until Close.
func (c *Cell) FetchTree(ctx context.Context, digest string) (string, error) {
	if c.bus == nil {
		return "", jetstream.ErrObjectNotFound
	}
	store, err := trees.Lookup(ctx, c.bus)
	if err != nil {
		return "", err
	}
	return c.fetch(ctx, store, digest)
}

// RemoveOutput removes the cell's output directory from this node, and
// the run's and cell's directories above it when that leaves them empty:
// call it once the terminal event naming the stored copy (StoreOutput) is
// published, so nothing recorded is lost. It does nothing for a cell
// whose directory is the planned path (not opened with Node.Outputs):
// that one is the run's output.
func (c *Cell) RemoveOutput() error {
	if !c.onNode {
		return nil
	}
	if err := os.RemoveAll(string(c.Dir)); err != nil {
		return fmt.Errorf("remove the cell's stored output directory: %w", err)
	}
	removeEmptyParents(string(c.Dir))
	return nil
}

package bus

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/proctor-eval/proctor/pkg/events"
)

// ControlState is a run's control state in the run index
// (RunRecord.Control): what the RunControl events of its log so far ask.
// Services read it with the run record before they start a cell, and the
// control messages (Controls) tell them when it changed.
type ControlState struct {
	// Paused: no new cell starts. PausedBy, PausedWhy, PausedCap and
	// PausedAt (RFC 3339) are the pause's who, why, cap (when a cap
	// tripped it) and when; Now that its running sandboxes are frozen.
	Paused    bool   `json:"paused,omitempty"`
	PausedBy  string `json:"paused_by,omitempty"`
	PausedWhy string `json:"paused_why,omitempty"`
	PausedCap string `json:"paused_cap,omitempty"`
	PausedAt  string `json:"paused_at,omitempty"`
	Now       bool   `json:"now,omitempty"`
	// Cancelled: the whole run is cancelled; CancelledCells the cells
	// cancelled one by one. Cancels holds each cancel's who and why by
	// cell ("" for the whole run).
	Cancelled      bool                             `json:"cancelled,omitempty"`
	CancelledCells []string                         `json:"cancelled_cells,omitempty"`
	Cancels        map[string]events.RunControlData `json:"cancels,omitempty"`
	// Caps are the caps that tripped so far (each trips once).
	Caps []string `json:"caps,omitempty"`
}

// Apply folds one control action at time at into the state.
func (s *ControlState) Apply(d events.RunControlData, at time.Time) {
	switch d.Action {
	case events.ControlPause:
		s.Paused, s.PausedBy, s.PausedWhy, s.PausedCap, s.Now = true, d.By, d.Why, d.Cap, d.Now
		s.PausedAt = at.UTC().Format(time.RFC3339Nano)
		if d.Cap != "" && !slices.Contains(s.Caps, d.Cap) {
			s.Caps = append(s.Caps, d.Cap)
		}
	case events.ControlContinue:
		s.Paused, s.PausedBy, s.PausedWhy, s.PausedCap, s.PausedAt, s.Now = false, "", "", "", "", false
	case events.ControlCancel:
		if s.Cancels == nil {
			s.Cancels = map[string]events.RunControlData{}
		}
		if len(d.Cells) == 0 {
			s.Cancelled = true
			s.Cancels[""] = d
			return
		}
		for _, c := range d.Cells {
			if !slices.Contains(s.CancelledCells, c) {
				s.CancelledCells = append(s.CancelledCells, c)
			}
			s.Cancels[c] = d
		}
	case events.ControlRequeue:
		// The cells run again: a cancel no longer holds them (a requeue
		// of a cancelled run that ended reopens it).
		if s.Cancelled {
			s.Cancelled = false
			delete(s.Cancels, "")
		}
		for _, c := range d.Cells {
			if i := slices.Index(s.CancelledCells, c); i >= 0 {
				s.CancelledCells = slices.Delete(s.CancelledCells, i, i+1)
				delete(s.Cancels, c)
			}
		}
	}
}

// CellCancelled returns the cancel that covers cellID (the whole run's,
// or the cell's own) and true, or false when the cell is not cancelled.
func (s ControlState) CellCancelled(cellID string) (events.RunControlData, bool) {
	if s.Cancelled {
		return s.Cancels[""], true
	}
	if slices.Contains(s.CancelledCells, cellID) {
		return s.Cancels[cellID], true
	}
	return events.RunControlData{}, false
}

// Control records one control action on runID: the run index's control
// state first (so a service that reads the run record from then on obeys
// it), then the RunControl event in the run's log (who, when, what, why;
// source names the publishing component), then the control message on
// proctor.ctl.<run>.<action>, which tells every service that follows the
// control subjects (Controls) at once. It returns the event. The error is
// the index's or the log's; a control message that could not be sent is
// not one (services find the state in the index when they next look).
func (b *Bus) Control(ctx context.Context, runID, source string, d events.RunControlData) (events.Envelope, error) {
	return b.ControlID(ctx, runID, source, "", d)
}

// ControlID is Control with the RunControl event's id (a fresh one when
// id is ""): an action two processes may take alike, as a cap's pause
// (events.RunOnceID), gives both the same id, so the log holds it once.
func (b *Bus) ControlID(ctx context.Context, runID, source, id string, d events.RunControlData) (events.Envelope, error) {
	e, err := events.New(events.RunControl, runID, "", 0, source, d)
	if err != nil {
		return e, err
	}
	if id != "" {
		e.ID = id
	}
	if err := b.UpdateRun(ctx, runID, func(r *RunRecord) { r.Control.Apply(d, e.At) }); err != nil {
		return e, err
	}
	if err := b.PublishAll(ctx, e); err != nil {
		return e, err
	}
	data, _ := events.Encode(e)
	if err := b.NC.Publish(events.ControlSubject(runID, d.Action), data); err != nil {
		b.log.Warn("control message", "run", runID, "action", d.Action, "err", err)
		return e, nil
	}
	fctx, cancel := withDefaultTimeout(ctx, RequestTimeout)
	defer cancel()
	if err := b.NC.FlushWithContext(fctx); err != nil {
		b.log.Warn("control message flush", "run", runID, "action", d.Action, "err", err)
	}
	return e, nil
}

// Cancelled is the cause of a cell's context cancelled by a control
// action (context.Cause): the cell ends errored, class cancelled, with
// Error as its message.
type Cancelled struct{ Control events.RunControlData }

func (c *Cancelled) Error() string {
	msg := "cancelled by " + orUnknown(c.Control.By)
	if c.Control.Why != "" {
		msg += ": " + c.Control.Why
	}
	return msg
}

func orUnknown(s string) string {
	if s == "" {
		return "an operator"
	}
	return s
}

// CancelledBy returns the cancel that ended ctx (its cause is a
// *Cancelled), or nil.
func CancelledBy(ctx context.Context) *Cancelled {
	if c, ok := context.Cause(ctx).(*Cancelled); ok && ctx.Err() != nil {
		return c
	}
	return nil
}

// ControlPoll is how often a service waiting on a paused run reads its
// record again, in case a control message was lost (they are not stored).
var ControlPoll = 10 * time.Second

// Controls follows the control subjects of every run for one service
// (WatchControls): it cancels the contexts of the cells registered with
// Cell when a cancel names them, wakes WaitRunnable on every message of
// the run, and calls the hooks of OnControl. Safe for concurrent use.
type Controls struct {
	b   *Bus
	sub *nats.Subscription

	mu    sync.Mutex
	cells map[string]map[*ctlCell]struct{} // run → cells in progress
	waits map[string]chan struct{}         // run → closed at its next message
	hooks []func(runID string, d events.RunControlData)
}

type ctlCell struct {
	id     string
	cancel context.CancelCauseFunc
}

// WatchControls subscribes to every run's control messages
// (events.ControlFilter) until Close.
func (b *Bus) WatchControls() (*Controls, error) {
	c := &Controls{b: b, cells: map[string]map[*ctlCell]struct{}{}, waits: map[string]chan struct{}{}}
	sub, err := b.NC.Subscribe(events.ControlFilter, c.on)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %s: %w", events.ControlFilter, err)
	}
	c.sub = sub
	return c, nil
}

// Close stops following the control subjects.
func (c *Controls) Close() {
	if c != nil && c.sub != nil {
		_ = c.sub.Unsubscribe()
	}
}

func (c *Controls) on(m *nats.Msg) {
	e, err := events.Decode(m.Data)
	if err != nil || e.Type != events.RunControl {
		return
	}
	var d events.RunControlData
	if events.Into(e, &d) != nil {
		return
	}
	c.mu.Lock()
	if ch, ok := c.waits[e.RunID]; ok {
		close(ch)
		delete(c.waits, e.RunID)
	}
	if d.Action == events.ControlCancel {
		for cell := range c.cells[e.RunID] {
			if len(d.Cells) == 0 || slices.Contains(d.Cells, cell.id) {
				cell.cancel(&Cancelled{Control: d})
			}
		}
	}
	hooks := slices.Clone(c.hooks)
	c.mu.Unlock()
	for _, h := range hooks {
		h(e.RunID, d)
	}
}

// OnControl adds a hook called (on the subscription's goroutine) for every
// control message of every run.
func (c *Controls) OnControl(h func(runID string, d events.RunControlData)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = append(c.hooks, h)
}

// Cell registers a cell in progress: the returned context is cancelled,
// with a *Cancelled cause, when a cancel of the run names the cell (or the
// whole run). Call done when the cell's work ends. Register before reading
// the run record: a cancel recorded before the read is in the record, one
// after it reaches the context.
func (c *Controls) Cell(ctx context.Context, runID, cellID string) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	if c == nil {
		return cctx, func() { cancel(nil) }
	}
	cell := &ctlCell{id: cellID, cancel: cancel}
	c.mu.Lock()
	if c.cells[runID] == nil {
		c.cells[runID] = map[*ctlCell]struct{}{}
	}
	c.cells[runID][cell] = struct{}{}
	c.mu.Unlock()
	return cctx, func() {
		c.mu.Lock()
		delete(c.cells[runID], cell)
		if len(c.cells[runID]) == 0 {
			delete(c.cells, runID)
		}
		c.mu.Unlock()
		cancel(nil)
	}
}

// changed returns a channel closed at the next control message of runID.
func (c *Controls) changed(runID string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.waits[runID]
	if !ok {
		ch = make(chan struct{})
		c.waits[runID] = ch
	}
	return ch
}

// WaitRunnable waits while runID is paused, and returns the run record
// once it is not (or has ended, or cellID is cancelled: the caller reads
// which from the record). It reads the record again at each control
// message of the run and every ControlPoll. The error is the index's or
// ctx's.
func (c *Controls) WaitRunnable(ctx context.Context, runID, cellID string) (RunRecord, error) {
	for {
		ch := c.changed(runID)
		var rec RunRecord
		err := Retry(ctx, nil, "read run "+runID, func(ctx context.Context) error {
			var err error
			rec, err = c.b.GetRun(ctx, runID)
			return err
		})
		if err != nil {
			return rec, err
		}
		if _, cancelled := rec.Control.CellCancelled(cellID); !rec.Control.Paused || cancelled || rec.Terminal() || rec.LeaseExpired(time.Now()) {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-ch:
		case <-time.After(ControlPoll):
		}
	}
}

package aggregator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/events"
)

// verifyWait is a cell whose solve finished (Finished of its current
// attempt, no terminal event yet): its verify job waits on the node that
// started its sandbox, since the sandbox lives on that node's engine.
type verifyWait struct {
	cell    string
	attempt int
	node    string
	// finished is the Finished event's time (the log's, so every
	// aggregator derives the same error event id from it); since is when
	// this aggregator saw it (its own clock, Config.Now).
	finished time.Time
	since    time.Time
}

// verifyWaits tracks the cells of one followed run waiting for their
// verifier. The follow's callback writes it; watchNodes reads it.
type verifyWaits struct {
	now func() time.Time
	mu  sync.Mutex
	// node is the node of each cell's latest SandboxStarted, by attempt.
	node    map[string]verifyWait
	pending map[string]verifyWait
}

func newVerifyWaits(now func() time.Time) *verifyWaits {
	return &verifyWaits{now: now, node: map[string]verifyWait{}, pending: map[string]verifyWait{}}
}

// observe folds one event of the run, applied already to the projection
// whose current attempt of the cell is current and whose terminal tells
// whether that attempt has its terminal event.
func (w *verifyWaits) observe(e events.Envelope, current int, terminal bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e.Type {
	case events.SandboxStarted:
		var d events.SandboxStartedData
		if events.Into(e, &d) == nil && d.Node != "" && e.Attempt == current {
			w.node[e.CellID] = verifyWait{cell: e.CellID, attempt: e.Attempt, node: d.Node}
		}
	case events.Finished:
		if n, ok := w.node[e.CellID]; ok && n.attempt == e.Attempt && e.Attempt == current && !terminal {
			n.finished, n.since = e.At, w.now()
			w.pending[e.CellID] = n
		}
	}
	if p, ok := w.pending[e.CellID]; ok && (p.attempt != current || terminal) {
		delete(w.pending, e.CellID)
	}
}

// reset forgets every waiting cell: a RunResumed starts a new attempt of
// each cell without a terminal event, and the verify jobs of the older
// epoch are dropped by the verifiers.
func (w *verifyWaits) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.pending)
	clear(w.node)
}

func (w *verifyWaits) snapshot() []verifyWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]verifyWait, 0, len(w.pending))
	for _, p := range w.pending {
		out = append(out, p)
	}
	return out
}

func (w *verifyWaits) drop(v verifyWait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pending[v.cell]; ok && p.attempt == v.attempt {
		delete(w.pending, v.cell)
	}
}

// changeClock measures, on this aggregator's own clock, how long each
// key's value has stayed the same: a node's heartbeat entry revision in
// KV PROCTOR_NODES (Service.beats), a run's lease in the run index
// (Service.leases). A time written by another machine (the verifier's
// record, the server's time of the write, the lease's end as its owner's
// clock put it) plays no part, so a clock stepped or skewed anywhere
// neither calls a live node or owner lost nor keeps a dead one. A value
// is unchanged at most since this aggregator first looked at it: one
// restarted finds nothing lost before the bound has passed. Safe for
// concurrent use (the watchers of every followed run share it).
type changeClock[V comparable] struct {
	now  func() time.Time
	mu   sync.Mutex
	seen map[string]seenValue[V]
}

// seenValue is a key's value and when this aggregator first saw it
// (Config.Now: a reading with the monotonic clock, by default).
type seenValue[V comparable] struct {
	v     V
	since time.Time
}

func newChangeClock[V comparable](now func() time.Time) *changeClock[V] {
	return &changeClock[V]{now: now, seen: map[string]seenValue[V]{}}
}

// unchanged records that key has value v now and returns for how long
// this clock has seen that value.
func (c *changeClock[V]) unchanged(key string, v V) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	s, ok := c.seen[key]
	if !ok || s.v != v {
		s = seenValue[V]{v: v, since: now}
		c.seen[key] = s
	}
	return now.Sub(s.since)
}

// forget drops key (a run no longer followed).
func (c *changeClock[V]) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, key)
}

// watchNodes errors, every Config.NodeCheck until ctx ends, the cells of
// the run (while it is driven: not ended, its lease not expired) whose
// verify job waits on a lost node: one whose heartbeat entry (bus.NodeSeen)
// this aggregator has seen unchanged for longer than Config.NodeLost
// (Service.beats), or that never wrote one while the cell waited that long.
// The cell's attempt ends CellErrored, class infra (retryable: `--retries`
// runs it again on a live node), "node N lost: no heartbeat for X s". The
// event's id is derived from the run, cell and attempt, so two
// aggregators publishing it put it in the log once (the stream's
// duplicate window; projections de-duplicate by id, and take the first
// terminal event of an attempt). A verifier of the node that comes back
// later finds the attempt settled (cellrun.Settled) and only destroys the
// sandbox.
func (s *Service) watchNodes(ctx context.Context, runID string, w *verifyWaits) {
	t := time.NewTicker(s.cfg.NodeCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		waiting := w.snapshot()
		if len(waiting) == 0 || !s.driven(ctx, runID) {
			continue
		}
		type seen struct {
			entry  bus.NodeEntry
			ok     bool
			silent time.Duration
		}
		nodes := map[string]*seen{}
		for _, v := range waiting {
			n := nodes[v.node]
			if n == nil {
				entry, ok, err := s.bus.NodeSeen(ctx, v.node)
				if err != nil {
					if ctx.Err() == nil {
						s.log.Warn("node heartbeat", "node", v.node, "err", err)
					}
					continue
				}
				n = &seen{entry: entry, ok: ok, silent: s.beats.unchanged(v.node, entry.Revision)}
				nodes[v.node] = n
			}
			if err := s.lost(ctx, runID, w, v, n.entry, n.ok, n.silent); err != nil && ctx.Err() == nil {
				s.log.Warn("erroring a cell of a lost node", "run", runID, "cell", v.cell, "node", v.node, "err", err)
			}
		}
	}
}

// driven reports whether the run is still driven: not ended, and its
// owner's lease not lapsed (leaseHeld). The cells of a run whose owner
// died are left as they are for `runs resume`, which runs them again as
// new attempts.
func (s *Service) driven(ctx context.Context, runID string) bool {
	rec, err := s.bus.GetRun(ctx, runID)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("node check: run record", "run", runID, "err", err)
		}
		return false
	}
	return !rec.Terminal() && s.leaseHeld(rec)
}

// leaseHeld reports whether rec's owner renewed its lease within
// bus.LeaseDuration by this aggregator's clock: every renewal writes a
// new lease_until, and the lease lapses when this aggregator has seen the
// same lease_until for longer than bus.LeaseDuration (changeClock). The
// time lease_until names, written by the owner's clock, is never compared
// with this one, so an owner whose clock is behind keeps its run while it
// renews, and one whose clock is ahead loses it a lease after it stopped.
// A record without a lease (an older proctor) is always held.
func (s *Service) leaseHeld(rec bus.RunRecord) bool {
	if rec.LeaseUntil == "" {
		return true
	}
	return s.leases.unchanged(rec.ID, rec.LeaseUntil) <= bus.LeaseDuration
}

// lost errors v's attempt when its node was silent longer than NodeLost:
// its heartbeat entry unchanged for silent on this aggregator's clock
// (ok), or, when the node never wrote one, since this aggregator saw the
// cell's Finished.
func (s *Service) lost(ctx context.Context, runID string, w *verifyWaits, v verifyWait, entry bus.NodeEntry, ok bool, silent time.Duration) error {
	var msg string
	if ok {
		if silent <= s.cfg.NodeLost {
			return nil
		}
		msg = fmt.Sprintf("node %s lost: no heartbeat for %.0f s (last written %s by the server's clock); its verify job of attempt %d waits on it",
			v.node, silent.Seconds(), entry.Written.UTC().Format(time.RFC3339), v.attempt)
	} else {
		silent := s.cfg.Now().Sub(v.since)
		if silent <= s.cfg.NodeLost {
			return nil
		}
		msg = fmt.Sprintf("node %s lost: no heartbeat recorded, and its verify job of attempt %d waited %.0f s", v.node, v.attempt, silent.Seconds())
	}
	settled, err := cellrun.Settled(ctx, s.bus, runID, v.cell, v.attempt)
	if err != nil {
		return err
	}
	if !settled {
		s.log.Warn("cell errored: its node is lost", "run", runID, "cell", v.cell, "attempt", v.attempt, "node", v.node, "error", msg)
		e := events.Must(events.CellErrored, runID, v.cell, v.attempt, Source,
			events.CellErroredData{ErrorClass: string(events.ClassInfra), Error: msg})
		e.ID = nodeLostID(runID, v)
		if err := bus.Retry(ctx, s.log, "publish the error of "+v.cell, func(ctx context.Context) error {
			return s.bus.PublishAll(ctx, e)
		}); err != nil {
			return err
		}
	}
	w.drop(v)
	return nil
}

// nodeLostID is a ULID every aggregator derives alike for the error of
// v's attempt: the Finished event's time and a hash of run, cell and
// attempt.
func nodeLostID(runID string, v verifyWait) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "node lost\x00%s\x00%s\x00%d", runID, v.cell, v.attempt))
	id, err := ulid.New(ulid.Timestamp(v.finished), bytesReader(sum[:]))
	if err != nil {
		return events.NewID()
	}
	return id.String()
}

type bytesReader []byte

func (b bytesReader) Read(p []byte) (int, error) { return copy(p, b), nil }

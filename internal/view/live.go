package view

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// artifactEvery bounds how often a live run's artifact (summary,
// comparisons, figures) is rebuilt: at most once per this many seconds
// while events arrive.
const artifactEvery = 2 * time.Second

// live is one run's projection, kept current by a follow of the run's
// events from its first (projection.Follow).
// Every field behind mu.
type live struct {
	runID string

	mu sync.Mutex
	p  *projection.Projector
	// changes lists cell ids in the order their state changed; an SSE
	// stream remembers how far it has sent.
	changes []string
	states  map[string]string
	// version counts applied events; art is the artifact built at artVer.
	version  int
	lastAt   time.Time // time of the last event applied
	art      *artifact.Artifact
	figs     []artifact.Figure
	artVer   int
	artAt    time.Time
	building bool
	view     *runData // the run page's data at its version
	// wake is closed (and replaced) whenever the projection changed.
	wake     chan struct{}
	ready    chan struct{} // closed once the events stored at start are applied
	caughtUp bool          // ready is closed
	ended    bool          // the run ended: its log no longer changes, unless a resume reopens it
	err      error         // why following stopped early, if it did
}

// lives holds the projection of every run a page asked for. Ended runs
// stay cached (their log no longer changes) until the run index shows a
// later epoch (a resume reopened the run); the follow goroutines end with
// the server's context.
type lives struct {
	ctx     context.Context
	src     Source
	wait    time.Duration // Config.PendingWait
	version string
	mu      sync.Mutex
	runs    map[string]*live
}

// get returns the run's live projection, starting its follower on first
// use, once the events stored when it started are applied; errPending
// when that takes longer than Config.PendingWait, ctx's error when it
// ends.
// epoch is the run's epoch in the index (0 when it has no record): an
// ended projection of an older epoch is replaced, since a resume reopened
// the run.
func (ls *lives) get(ctx context.Context, runID string, epoch int) (*live, error) {
	ls.mu.Lock()
	l := ls.runs[runID]
	if l != nil && l.stale(epoch) {
		l = nil
	}
	if l == nil {
		l = &live{runID: runID, p: projection.NewProjector(runID), states: map[string]string{},
			wake: make(chan struct{}), ready: make(chan struct{})}
		ls.runs[runID] = l
		go l.follow(ls.ctx, ls.src)
	}
	ls.mu.Unlock()
	wait := time.NewTimer(ls.wait)
	defer wait.Stop()
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-wait.C:
		return nil, errPending // still catching up: the page asks again
	}
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		// Forget a follower that failed, so the next page tries again.
		ls.mu.Lock()
		if ls.runs[runID] == l {
			delete(ls.runs, runID)
		}
		ls.mu.Unlock()
		return nil, err
	}
	return l, nil
}

// follow applies the run's events until the run ends (projection.Follow:
// past the RunFinished of each earlier epoch of a resumed run), ctx ends
// or the follow fails (l.err). When the log changes hands (the
// connection's Lost closes), it follows on through the source's next
// connection to the same store, skipping the events it has applied.
func (l *live) follow(ctx context.Context, src Source) {
	var once sync.Once
	markReady := func() {
		once.Do(func() {
			l.mu.Lock()
			l.caughtUp = true
			l.mu.Unlock()
			close(l.ready)
		})
	}
	defer markReady()
	applied := 0
	for {
		lg, err := src.Log(ctx)
		if err != nil {
			return // ctx ended
		}
		fctx, cancel := context.WithCancel(ctx)
		if lg.Lost != nil {
			go func() {
				select {
				case <-lg.Lost:
					cancel()
				case <-fctx.Done():
				}
			}()
		}
		skip := applied
		err = projection.Follow(fctx, lg.Bus, l.runID, projection.FollowOptions{CaughtUp: markReady}, func(e events.Envelope) error {
			if skip > 0 {
				skip--
				return nil
			}
			applied++
			l.apply(e)
			return nil
		})
		lost := fctx.Err() != nil || lg.Bus.NC.IsClosed()
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.ended = true
			l.mu.Unlock()
			return
		case ctx.Err() != nil:
			return
		case lost:
			continue // the log changed hands: the next connection reads the same store
		}
		l.fail(err)
		return
	}
}

// stale reports whether the projection ended in an epoch before epoch.
func (l *live) stale(epoch int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended && l.p.Epoch() < epoch
}

func (l *live) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// apply folds one event and records the cells whose state changed: the
// event's cell, or every cell when RunFinished turns unfinished cells into
// errored rows.
func (l *live) apply(e events.Envelope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.Apply(e)
	l.version++
	l.lastAt = e.At
	switch {
	case !l.caughtUp:
		// Catching up: the first page and the first stream update carry
		// every cell's state, so changes are tracked only from here on.
	case e.CellID != "":
		l.note(e.CellID)
	case e.Type == events.RunFinished:
		for _, id := range l.p.Cells() {
			l.note(id)
		}
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *live) note(id string) {
	s := l.p.CellState(id)
	if s != l.states[id] {
		l.states[id] = s
		l.changes = append(l.changes, id)
	}
}

// artifact returns the run's last built artifact and figures (nil before
// the first build) and whether a newer build is under way. A build starts
// when events arrived since the last one and artifactEvery has passed
// (at once when the run finished); it runs in the background, because the
// bootstrap intervals of the comparisons take seconds on a large run, and
// wakes the run's streams when done. While the run goes, the build is over
// the cells that ended. Call with mu held.
func (l *live) artifact(version string) (*artifact.Artifact, []artifact.Figure, bool) {
	stale := l.art == nil || (l.artVer != l.version && (l.p.Finished() || time.Since(l.artAt) >= artifactEvery))
	if stale && !l.building {
		l.building = true
		l.artAt = time.Now()
		run, rows := l.p.Input(version)
		if !l.p.Finished() {
			// As the summary does: a running or queued cell is not
			// missing data yet, so neither an errored cell nor an
			// excluded pair of the comparisons.
			rows = slices.DeleteFunc(rows, func(r artifact.Result) bool {
				s := l.p.CellState(r.CellID)
				return s == projection.StateRunning || s == projection.StateQueued
			})
		}
		rows = detach(rows)
		opts := l.p.BuildOptions()
		ver := l.version
		go func() {
			a := artifact.Build(run, rows, opts)
			figs, _ := artifact.Figures(a) // a figure that cannot be drawn is left out
			l.mu.Lock()
			defer l.mu.Unlock()
			l.art, l.figs, l.artVer, l.building = a, figs, ver, false
			close(l.wake)
			l.wake = make(chan struct{})
		}()
	}
	return l.art, l.figs, l.building
}

// detach copies rows without the maps they share with the projection
// (which later events change), keeping what the summary and the
// comparisons read.
func detach(rows []artifact.Result) []artifact.Result {
	out := make([]artifact.Result, len(rows))
	for i, r := range rows {
		r.Operations, r.TaskMeta = nil, nil
		r.Metrics.ToolCalls, r.Metrics.OperationsByType, r.Metrics.AgentReported, r.Metrics.Isolation = nil, nil, nil, nil
		out[i] = r
	}
	return out
}

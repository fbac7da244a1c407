package launcher

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// freezeTimeout bounds a freeze's or a thaw's calls to the sandbox driver
// and the event that records it.
const freezeTimeout = 2 * time.Minute

// A solve in progress on this launcher (a cell's, or one step's), which
// a `runs pause --now` freezes (RunControlData.Now):
//
//   - a solve running in a sandbox whose driver is a sandbox.Freezer and a
//     sandbox.Thawer is frozen (every process stopped) with its budget's
//     clock (the sandbox.Hold in its context, which the driver's Exec
//     honours) and thawed when the run is no longer paused (a continue, a
//     cancel, the run's end), each recorded as SolveFrozen and
//     SolveThawed;
//   - a solve about to begin while the run is paused --now (a step's
//     after the first, or one past solveGate when the pause came) waits
//     for the continue before its first command, whatever the driver;
//   - a solve in a sandbox the driver cannot freeze (the process driver
//     of host commands) runs on, and SolveFrozen says so.
type solving struct {
	s      *Service
	c      *cell
	ctx    context.Context // the cell's: a cancel of the cell ends it
	driver sandbox.Driver
	h      *sandbox.Handle
	step   string
	hold   *sandbox.Hold

	mu     sync.Mutex
	frozen bool // the hold is frozen (and, unless before, the sandbox)
	before bool // held before its first command, the sandbox not frozen
	told   bool // a SolveFrozen that it cannot be frozen was recorded
	ended  bool // the solve returned: nothing to freeze any more
}

// solveSet is the solves in progress on a launcher, by run.
type solveSet struct {
	mu   sync.Mutex
	runs map[string]map[*solving]struct{}
}

func (ss *solveSet) add(run string, sv *solving) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.runs == nil {
		ss.runs = map[string]map[*solving]struct{}{}
	}
	if ss.runs[run] == nil {
		ss.runs[run] = map[*solving]struct{}{}
	}
	ss.runs[run][sv] = struct{}{}
}

func (ss *solveSet) remove(run string, sv *solving) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.runs[run], sv)
	if len(ss.runs[run]) == 0 {
		delete(ss.runs, run)
	}
}

func (ss *solveSet) of(run string) []*solving {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*solving, 0, len(ss.runs[run]))
	for sv := range ss.runs[run] {
		out = append(out, sv)
	}
	return out
}

// onControl is the launcher's hook on the control messages: a pause
// --now freezes the run's solves in progress here (each on its own
// goroutine: the hook runs on the subscription's).
func (s *Service) onControl(runID string, d events.RunControlData) {
	if d.Action != events.ControlPause || !d.Now {
		return
	}
	for _, sv := range s.solves.of(runID) {
		go sv.freeze()
	}
}

// canFreeze reports whether driver declares both sandbox.Freezer and
// sandbox.Thawer (sandbox.AbilitiesOf).
func canFreeze(driver sandbox.Driver) bool {
	has := sandbox.AbilitiesOf(driver)
	return slices.Contains(has, sandbox.AbilityFreezer) && slices.Contains(has, sandbox.AbilityThawer)
}

// beginSolve registers the solve the cell is about to run in h (step ""
// for a single-step cell) and returns the context to run it with (its
// sandbox.Hold in it) and the function that ends it, to call once the
// solve returned. When the run is paused --now, it waits for the continue
// (or ctx's end) before it returns: the solve's first command has not
// run. ctx's error is returned when ctx ended meanwhile. (A cell's first
// solve under any pause is stopped before, by solveGate.)
func (c *cell) beginSolve(ctx context.Context, driver sandbox.Driver, h *sandbox.Handle, step string) (context.Context, func(), error) {
	s := c.s
	sv := &solving{s: s, c: c, ctx: ctx, driver: driver, h: h, step: step, hold: sandbox.NewHold()}
	run := c.job.RunID
	// Registered before the run record is read: a pause --now recorded
	// before the read is in the record, one after it reaches the hook.
	s.solves.add(run, sv)
	end := func() { sv.end(); s.solves.remove(run, sv) }
	sv.mu.Lock()
	rec, err := s.bus.GetRun(ctx, run)
	if err == nil && s.ctl != nil && rec.Control.Paused && rec.Control.Now && !rec.Terminal() {
		if _, cancelled := rec.Control.CellCancelled(c.job.CellID); !cancelled {
			sv.frozen, sv.before = true, true
			sv.hold.Freeze()
			c.Dir().Logf("solve held before its first command: the run is paused --now")
			sv.record(events.SolveFrozen, events.SolveFrozenData{Frozen: true, Driver: h.Driver, Step: step, Node: s.cfg.Node,
				Reason: "the run was paused --now before its solve began: it begins at the continue"})
			go sv.awaitThaw()
		}
	}
	sv.mu.Unlock()
	if err := sv.hold.WaitThawed(ctx); err != nil {
		end()
		return ctx, func() {}, err
	}
	return sandbox.WithHold(ctx, sv.hold), end, nil
}

// end marks the solve ended. A solve that returned while its sandbox was
// frozen (its last command had ended before the freeze) keeps the cell
// until the thaw, so its verifier never meets a frozen sandbox.
func (sv *solving) end() {
	_ = sv.hold.WaitThawed(sv.ctx)
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.ended = true
	if sv.frozen && !sv.before {
		// The cell's context ended while frozen: thaw it for its
		// teardown (Destroy removes a frozen container all the same).
		sv.thawLocked()
	}
}

// freeze freezes the solve's sandbox and its budget, when its driver can,
// and records the outcome (SolveFrozen); then waits, on this goroutine,
// for the run to be runnable again and thaws it.
func (sv *solving) freeze() {
	sv.mu.Lock()
	if sv.frozen || sv.ended {
		sv.mu.Unlock()
		return
	}
	fr, _ := sv.driver.(sandbox.Freezer)
	if !canFreeze(sv.driver) {
		if !sv.told {
			sv.told = true
			why := fmt.Sprintf("the %s sandbox driver cannot freeze a running solve and thaw it: the solve runs on", sv.h.Driver)
			sv.c.Dir().Logf("pause --now: %s", why)
			sv.record(events.SolveFrozen, events.SolveFrozenData{Driver: sv.h.Driver, Reason: why, Step: sv.step, Node: sv.s.cfg.Node})
		}
		sv.mu.Unlock()
		return
	}
	sv.hold.Freeze()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sv.ctx), freezeTimeout)
	alive, err := fr.Freeze(ctx, sv.h)
	cancel()
	if err != nil {
		// Not frozen (or not sure): whatever the engine paused is
		// resumed, and the solve runs on.
		sv.frozen = true
		sv.thawLocked()
		why := fmt.Sprintf("freeze failed: %v: the solve runs on", err)
		sv.c.Dir().Logf("pause --now: %s", why)
		sv.record(events.SolveFrozen, events.SolveFrozenData{Driver: sv.h.Driver, Reason: why, Step: sv.step, Node: sv.s.cfg.Node})
		sv.mu.Unlock()
		return
	}
	sv.frozen = true
	sv.c.Dir().Logf("pause --now: sandbox frozen (%d processes stopped), the solve's budget stopped", alive)
	sv.record(events.SolveFrozen, events.SolveFrozenData{Frozen: true, Alive: alive, Driver: sv.h.Driver, Step: sv.step, Node: sv.s.cfg.Node})
	sv.mu.Unlock()
	sv.awaitThaw()
}

// awaitThaw waits until the run is no longer paused (a continue), the
// cell is cancelled, the run ended or its lease expired, or the cell's
// context ended, and thaws the solve.
func (sv *solving) awaitThaw() {
	if sv.s.ctl != nil {
		_, _ = sv.s.ctl.WaitRunnable(sv.ctx, sv.c.job.RunID, sv.c.job.CellID)
	} else {
		<-sv.ctx.Done()
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.thawLocked()
}

// thawLocked thaws a frozen solve (sv.mu held): the sandbox first, then
// the budget's clock, and records SolveThawed.
func (sv *solving) thawLocked() {
	if !sv.frozen {
		return
	}
	sv.frozen = false
	var terr error
	if !sv.before {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(sv.ctx), freezeTimeout)
		terr = sv.driver.(sandbox.Thawer).Thaw(ctx, sv.h)
		cancel()
	}
	frozen := sv.hold.Frozen()
	sv.hold.Thaw()
	sv.before = false
	d := events.SolveThawedData{FrozenSec: math.Round(frozen.Seconds()*1000) / 1000}
	if terr != nil {
		d.Error = terr.Error()
		sv.c.Dir().Logf("thaw after %.3fs frozen failed: %v", frozen.Seconds(), terr)
	} else {
		sv.c.Dir().Logf("thawed after %.3fs frozen", frozen.Seconds())
	}
	sv.record(events.SolveThawed, d)
}

// record publishes one event of the solve's cell; a failure is logged
// (the freeze itself holds, and the log keeps what it could).
func (sv *solving) record(t events.Type, data any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sv.ctx), bus.RequestTimeout)
	defer cancel()
	if err := sv.c.Emit(ctx, t, data, time.Time{}); err != nil {
		sv.s.log.Warn("record "+string(t), "cell", sv.c.job.CellID, "err", err)
		return
	}
	_ = sv.s.bus.Flush(ctx)
}

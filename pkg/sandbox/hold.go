package sandbox

import (
	"context"
	"sync"
	"time"
)

// Hold stops the clock of a phase's budgets while its sandbox is frozen
// (a `runs pause --now`): the phase's owner puts it in the context of the
// phase's driver calls (WithHold), marks it frozen before it freezes the
// sandbox (Freezer) and thawed once it thawed it (Thawer). A driver that
// is a Freezer honours the Hold of an Exec's context:
//
//   - an Exec's Timeout counts only the time the Hold was not frozen
//     (After), and its ExecResult.Duration leaves the frozen time out;
//   - an Exec that begins while the Hold is frozen waits for the thaw
//     before its command starts, and one whose start the engine refused
//     because the sandbox was frozen meanwhile starts again after it;
//   - an Exec stopped (its ctx ended) while the sandbox is frozen thaws
//     it first, so its processes can be signalled.
//
// A driver that is not a Freezer ignores it (the owner says so: its
// sandboxes are never frozen). Safe for concurrent use.
type Hold struct {
	mu      sync.Mutex
	frozen  bool
	since   time.Time     // when the current freeze began
	total   time.Duration // frozen time of the freezes that ended
	changed chan struct{} // closed, and replaced, at each change
}

// NewHold returns a Hold that is not frozen.
func NewHold() *Hold { return &Hold{changed: make(chan struct{})} }

type holdKey struct{}

// WithHold returns ctx carrying h (nil: ctx itself).
func WithHold(ctx context.Context, h *Hold) context.Context {
	if h == nil {
		return ctx
	}
	return context.WithValue(ctx, holdKey{}, h)
}

// HoldOf returns the Hold ctx carries, or nil.
func HoldOf(ctx context.Context) *Hold {
	h, _ := ctx.Value(holdKey{}).(*Hold)
	return h
}

// Freeze marks the Hold frozen from now; false when it already was.
func (h *Hold) Freeze() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen {
		return false
	}
	h.frozen, h.since = true, time.Now()
	h.signal()
	return true
}

// Thaw ends the current freeze; false when the Hold was not frozen.
func (h *Hold) Thaw() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.frozen {
		return false
	}
	h.frozen = false
	h.total += time.Since(h.since)
	h.signal()
	return true
}

func (h *Hold) signal() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// State returns whether the Hold is frozen, the frozen time so far (the
// current freeze included up to now), and a channel closed at its next
// change.
func (h *Hold) State() (frozen bool, total time.Duration, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	total = h.total
	if h.frozen {
		total += time.Since(h.since)
	}
	return h.frozen, total, h.changed
}

// Frozen is the frozen time so far, the current freeze included.
func (h *Hold) Frozen() time.Duration {
	_, t, _ := h.State()
	return t
}

// WaitThawed returns once the Hold is not frozen (at once when it is
// not), or ctx's error when ctx ends first.
func (h *Hold) WaitThawed(ctx context.Context) error {
	for {
		frozen, _, ch := h.State()
		if !frozen {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// After returns a channel that receives once d of time in which the Hold
// was not frozen has passed from now (the budget of an Exec: its clock
// stops while the sandbox is frozen), and a stop function that releases
// it (call it when the wait is no longer needed; the channel then never
// receives). A nil Hold counts wall-clock time, as time.After.
func (h *Hold) After(d time.Duration) (<-chan time.Time, func()) {
	out := make(chan time.Time, 1)
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done) }) }
	var base time.Duration
	if h != nil {
		base = h.Frozen()
	}
	start := time.Now()
	go func() {
		for {
			var frozen bool
			var total time.Duration
			var ch <-chan struct{}
			if h != nil {
				frozen, total, ch = h.State()
			}
			if frozen {
				select {
				case <-ch:
					continue
				case <-done:
					return
				}
			}
			left := d - (time.Since(start) - (total - base))
			if left <= 0 {
				out <- time.Now()
				return
			}
			t := time.NewTimer(left)
			select {
			case <-t.C:
				// Checked again above: a freeze may have begun meanwhile.
			case <-ch:
				t.Stop()
			case <-done:
				t.Stop()
				return
			}
		}
	}()
	return out, stop
}

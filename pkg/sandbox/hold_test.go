package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestHoldAfterStopsWhileFrozen: a budget of 300 ms with a 500 ms freeze
// in it runs out no sooner than 800 ms after it began, and not while
// frozen; the frozen time is counted; WaitThawed returns at the thaw.
func TestHoldAfterStopsWhileFrozen(t *testing.T) {
	h := NewHold()
	start := time.Now()
	c, stop := h.After(300 * time.Millisecond)
	defer stop()
	if !h.Freeze() || h.Freeze() {
		t.Fatal("Freeze: want true, then false while frozen")
	}
	waited := make(chan error, 1)
	go func() { waited <- h.WaitThawed(context.Background()) }()
	select {
	case <-c:
		t.Fatal("the budget ran out while frozen")
	case <-waited:
		t.Fatal("WaitThawed returned while frozen")
	case <-time.After(500 * time.Millisecond): // the freeze's length, measured
	}
	if !h.Thaw() || h.Thaw() {
		t.Fatal("Thaw: want true, then false")
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	<-c
	if e := time.Since(start); e < 800*time.Millisecond {
		t.Errorf("the budget ran out after %s, want at least 800ms (300ms + 500ms frozen)", e)
	}
	if f := h.Frozen(); f < 500*time.Millisecond {
		t.Errorf("frozen %s, want at least 500ms", f)
	}
}

// TestHoldNil: a nil Hold counts wall-clock time; WithHold(nil) carries
// none.
func TestHoldNil(t *testing.T) {
	var h *Hold
	start := time.Now()
	c, stop := h.After(50 * time.Millisecond)
	defer stop()
	<-c
	if e := time.Since(start); e < 50*time.Millisecond {
		t.Errorf("fired after %s", e)
	}
	if HoldOf(WithHold(context.Background(), nil)) != nil {
		t.Error("a nil hold in the context")
	}
	if g := NewHold(); HoldOf(WithHold(context.Background(), g)) != g {
		t.Error("the hold is not in the context")
	}
}

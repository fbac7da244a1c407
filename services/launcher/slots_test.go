package launcher

import (
	"context"
	"testing"
	"time"
)

// TestSandboxesInFrontStartFirst: of the cells that take sandbox slots at
// once, those a solve slot is free for start their sandboxes at once and
// those ahead wait until every one in front has reached its solve gate;
// once the solve slots are all taken, a cell ahead starts at once.
func TestSandboxesInFrontStartFirst(t *testing.T) {
	ctx := context.Background()
	s := NewSlots(2)
	if Ahead(2) != 2 {
		t.Fatalf("Ahead(2) = %d, want one wave ahead", Ahead(2))
	}
	var front [2]bool
	for i := range front {
		f, err := s.startOrder(ctx)
		if err != nil || !f {
			t.Fatalf("cell %d: front %v err %v, want in front", i, f, err)
		}
		front[i] = f
	}
	// A third cell is ahead: it waits for both starts in front.
	ahead := make(chan bool, 1)
	go func() {
		f, err := s.startOrder(ctx)
		if err != nil {
			t.Error(err)
		}
		ahead <- f
	}()
	s.started() // the first front cell reached its gate
	select {
	case <-ahead:
		t.Fatal("a cell ahead started while one in front was still starting")
	default:
	}
	s.started()
	select {
	case f := <-ahead:
		if f {
			t.Fatal("the third cell was counted in front with 2 solve slots and 2 cells waiting")
		}
	case <-time.After(time.Minute):
		t.Fatal("the cell ahead never started after both in front reached their gates")
	}
	// The two in front take their solve slots; a fourth cell finds no
	// free solve slot and nobody starting: ahead, and not held.
	for range 2 {
		s.solve <- struct{}{}
		s.unwait()
	}
	f, err := s.startOrder(ctx)
	if err != nil || f {
		t.Fatalf("fourth cell: front %v err %v, want ahead at once", f, err)
	}
	// A cancelled wait ends with the context's error.
	s2 := NewSlots(1)
	if f, _ := s2.startOrder(ctx); !f {
		t.Fatal("first cell of s2 not in front")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s2.startOrder(cctx); err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
}

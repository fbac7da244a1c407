package launcher

import (
	"context"
	"sync"
)

// Slots bounds the cells that hold a sandbox on this node, solve and
// verify together (`--concurrency N`): a launcher takes a slot before a
// cell's image phase and, when it hands the cell's sandbox to a verifier
// in the same process, passes the slot on with it (Hold); the verifier
// gives it back once the sandbox is destroyed (Release). Without shared
// Slots a solved container would wait alive for a separate verifier slot
// while new cells start. Safe for concurrent use.
type Slots struct {
	sem  chan struct{}
	mu   sync.Mutex
	held map[string]bool
}

// NewSlots returns n slots (at least 1).
func NewSlots(n int) *Slots {
	return &Slots{sem: make(chan struct{}, max(n, 1)), held: map[string]bool{}}
}

// acquire waits for a free slot; ctx's error when it ends first.
func (s *Slots) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Slots) release() { <-s.sem }

// hold records that the slot taken for a cell now travels with its verify
// job, key being the job's id (VerifyJobID).
func (s *Slots) hold(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[key] = true
}

// Release frees the slot held by the verify job key; a job whose slot was
// not passed on here (another process's launcher, a restarted node) frees
// nothing.
func (s *Slots) Release(key string) {
	s.mu.Lock()
	ok := s.held[key]
	delete(s.held, key)
	s.mu.Unlock()
	if ok {
		s.release()
	}
}

package launcher

import (
	"context"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Slots schedule the cells of one node whose launcher and verifier share a
// process (`--concurrency N`) so that no solve slot idles while work is
// queued (docs/decisions/2026-12-02-scheduler-prepares-ahead.md):
//
//   - N solve slots bound the cells whose solve runs (the agent's time,
//     the expensive part: a model's minutes);
//   - N + Ahead(N) sandbox slots bound the cells that hold a sandbox:
//     started and waiting for a solve slot, solving, or handed to this
//     process's verifier, which gives the slot back once the sandbox is
//     destroyed (Release);
//   - a cell's image phase (a build, a pull, the CLI's derived image)
//     holds neither: a cell waiting for its image never keeps a slot from
//     a cell whose image is ready.
//
// So the next cells' sandboxes are started while the current solves run,
// and a solve's end hands its slot at once to a cell that is already
// started (the slot-refill latency is a channel send, not a container
// start); the verifier's steps and the sandbox's removal run beside the
// next solve instead of before it. The launcher takes Pulls() launch jobs
// at a time: N solving, Ahead(N) prepared, Ahead(N) in their image phase.
// Safe for concurrent use.
type Slots struct {
	n       int
	solve   chan struct{}
	sandbox chan struct{}
	mu      sync.Mutex
	held    map[string]bool
	// waiting counts the cells holding a sandbox slot and no solve slot
	// yet (starting, or started and waiting); starting counts those of
	// them that started in front (a solve slot was free for them) and
	// have not reached their solve gate. startsDone is closed when
	// starting falls to 0: a sandbox started ahead waits for it, so the
	// engine starts the sandboxes that will solve at once before those
	// that will wait.
	waiting, starting int
	startsDone        chan struct{}
}

// Ahead is how many sandboxes beyond n a node of n solve slots may hold:
// n, one wave ahead. Solves of similar length end together; when fewer
// sandboxes than the solves that ended were ready, the rest of the wave
// paid a container's start before solving (a quarter of n lost about
// 2 s a wave at concurrency 8, 0.91 of the ideal makespan).
func Ahead(n int) int { return max(1, n) }

// NewSlots returns n solve slots (at least 1) and n + Ahead(n) sandbox
// slots.
func NewSlots(n int) *Slots {
	n = max(n, 1)
	done := make(chan struct{})
	close(done)
	return &Slots{n: n, solve: make(chan struct{}, n), sandbox: make(chan struct{}, n+Ahead(n)), held: map[string]bool{}, startsDone: done}
}

// startOrder counts a cell that took its sandbox slot: in front when a
// solve slot will be free for it once its sandbox is ready (fewer cells
// wait than solve slots are free), else ahead. A cell ahead waits until no
// cell in front is still starting, so at a run's start (or after a pause)
// the first N sandboxes are not slowed by the N started ahead of them.
func (s *Slots) startOrder(ctx context.Context) (front bool, err error) {
	s.mu.Lock()
	front = s.waiting < s.n-len(s.solve)
	s.waiting++
	if front {
		if s.starting == 0 {
			s.startsDone = make(chan struct{})
		}
		s.starting++
	}
	done := s.startsDone
	s.mu.Unlock()
	if front {
		return true, nil
	}
	select {
	case <-done:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// started says a cell in front reached its solve gate (or its launch
// ended before).
func (s *Slots) started() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting--
	if s.starting == 0 {
		close(s.startsDone)
	}
}

// unwait says a cell counted by startOrder took its solve slot (or its
// launch ended before).
func (s *Slots) unwait() {
	s.mu.Lock()
	s.waiting--
	s.mu.Unlock()
}

// Pulls is how many launch jobs the launcher works on at once: the solve
// slots, the sandboxes prepared ahead, and as many again in their image
// phase.
func (s *Slots) Pulls() int { return s.n + 2*Ahead(s.n) }

func take(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold records that the sandbox slot taken for a cell now travels with its
// verify job, key being the job's id (VerifyJobID).
func (s *Slots) hold(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[key] = true
}

// Release frees the sandbox slot held by the verify job key; a job whose
// slot was not passed on here (another process's launcher, a restarted
// node) frees nothing.
func (s *Slots) Release(key string) {
	s.mu.Lock()
	ok := s.held[key]
	delete(s.held, key)
	s.mu.Unlock()
	if ok {
		<-s.sandbox
	}
}

// cellSlots are the slots one cell holds.
type cellSlots struct {
	s                *Slots
	sandbox, solving bool
	// waiting is set while the cell is counted by startOrder and has no
	// solve slot; starting while it started in front and has not reached
	// its solve gate.
	waiting, starting bool
}

// takeSandbox waits for a sandbox slot, before the cell's sandbox starts;
// the wait is added to c.queueSec (recorded on SandboxStarted). Without
// Slots it returns at once. A sandbox started ahead may wait up to one
// solve budget for its solve slot, so its lifetime grows by that budget.
func (c *cell) takeSandbox(ctx context.Context) error {
	sl := c.slots.s
	if sl == nil || c.slots.sandbox {
		return nil
	}
	start := time.Now()
	if err := take(ctx, sl.sandbox); err != nil {
		return err
	}
	c.slots.sandbox = true
	front, err := sl.startOrder(ctx)
	c.slots.waiting, c.slots.starting = true, front
	c.queueSec += time.Since(start).Seconds()
	return err
}

// startDone says the cell's sandbox start is over (once).
func (c *cell) startDone() {
	if c.slots.starting {
		c.slots.starting = false
		c.slots.s.started()
	}
}

// waitDone says the cell no longer waits for a solve slot (once).
func (c *cell) waitDone() {
	if c.slots.waiting {
		c.slots.waiting = false
		c.slots.s.unwait()
	}
}

// aheadLifetime is the lifetime of a sandbox started ahead: its own (the
// harness's budgets plus slack; 0 is sandbox.DefaultLifetime) plus the
// task's solve budget, the longest it can wait for a solve slot.
func aheadLifetime(life time.Duration, solveBudgetSec float64) time.Duration {
	if life <= 0 {
		life = sandbox.DefaultLifetime
	}
	return life + time.Duration(solveBudgetSec*float64(time.Second))
}

// takeSolve waits for a solve slot, once the cell's sandbox is ready; the
// wait is c.solveQueueSec (recorded on Finished) and logged.
func (c *cell) takeSolve(ctx context.Context) error {
	sl := c.slots.s
	if sl == nil || c.slots.solving {
		return nil
	}
	c.startDone()
	start := time.Now()
	if err := take(ctx, sl.solve); err != nil {
		return err
	}
	c.slots.solving = true
	c.waitDone()
	if w := time.Since(start).Seconds(); w > 0.001 {
		c.solveQueueSec = w
		c.Dir().Logf("waited %.3fs for a solve slot", w)
	}
	return nil
}

// solveGate takes the cell's solve slot (takeSolve), then reads the run
// record once more (retried while the bus fails transiently): a sandbox started ahead whose run was paused while it
// waited does not start its solve. It is destroyed (teardown), its slots
// given back, and errPaused returned, so Launch waits for a continue and
// starts the cell afresh; a paused run holds no idle sandbox whose
// lifetime would run out.
func (c *cell) solveGate(ctx context.Context, teardown func()) error {
	if err := c.takeSolve(ctx); err != nil {
		return err
	}
	if c.s.ctl == nil {
		return nil
	}
	// The read is retried while the bus fails transiently (a stream
	// leader moving): the sandbox is ready and the slot taken, so giving
	// up here would run the cell again as another attempt.
	var rec bus.RunRecord
	err := bus.Retry(ctx, c.s.log, "read run "+c.job.RunID+" at the solve gate", func(ctx context.Context) error {
		var err error
		rec, err = c.s.bus.GetRun(ctx, c.job.RunID)
		return err
	})
	if err != nil {
		return err
	}
	if !rec.Control.Paused {
		return nil
	}
	c.endSolve()
	teardown()
	c.Dir().Logf("run paused before the solve: sandbox removed, the cell waits for a continue")
	return errPaused
}

// endSolve gives the solve slot back: the agent's processes are gone.
func (c *cell) endSolve() {
	if c.slots.solving {
		c.slots.solving = false
		<-c.slots.s.solve
	}
}

// passSandbox hands the cell's sandbox slot to its verify job, before the
// job is published (the verifier may release it at once); reclaimSandbox
// takes it back when the job could not be published, unless the verifier
// already released it.
func (c *cell) passSandbox() {
	if c.slots.sandbox {
		c.slots.sandbox = false
		c.slots.s.hold(VerifyJobID(c.job.RunID, c.job.CellID, c.attempt))
	}
}

func (c *cell) reclaimSandbox() {
	sl := c.slots.s
	if sl == nil {
		return
	}
	key := VerifyJobID(c.job.RunID, c.job.CellID, c.attempt)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.held[key] {
		delete(sl.held, key)
		c.slots.sandbox = true
	}
}

// releaseSlots gives back what the cell still holds when its launch ends:
// the solve slot, and the sandbox slot unless it went with the verify job.
func (c *cell) releaseSlots() {
	if c.slots.s == nil {
		return
	}
	c.startDone()
	c.waitDone()
	c.endSolve()
	if c.slots.sandbox {
		c.slots.sandbox = false
		<-c.slots.s.sandbox
	}
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

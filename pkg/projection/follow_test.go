package projection

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// follower runs Follow in the background and records what it got.
type follower struct {
	mu     sync.Mutex
	got    []events.Envelope
	caught bool
	done   chan error
}

func startFollow(t *testing.T, b *bus.Bus, runID string, epoch int) *follower {
	t.Helper()
	f := &follower{done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		f.done <- Follow(ctx, b, runID, FollowOptions{Epoch: epoch, CaughtUp: func() {
			f.mu.Lock()
			f.caught = true
			f.mu.Unlock()
		}}, func(e events.Envelope) error {
			f.mu.Lock()
			f.got = append(f.got, e)
			f.mu.Unlock()
			return nil
		})
	}()
	return f
}

// waitFor polls until the follower has caught up and taken the event
// with id, failing when the follow ended first or after 10 s.
func (f *follower) waitFor(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		seen := false
		for _, e := range f.got {
			seen = seen || e.ID == id
		}
		caught := f.caught
		f.mu.Unlock()
		if seen && caught {
			return
		}
		select {
		case err := <-f.done:
			t.Fatalf("the follow ended (%v) before it took event %s", err, id)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follow never took event %s", id)
		}
		time.Sleep(10 * time.Millisecond) // polling the follower
	}
}

// end waits for the follow to return nil and checks that the last event
// it took was want.
func (f *follower) end(t *testing.T, want events.Envelope) {
	t.Helper()
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the follow did not end after %s", want.Type)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if last := f.got[len(f.got)-1]; last.ID != want.ID {
		t.Errorf("the follow ended after %s, want after %s", last.Type, want.Type)
	}
}

func publish(t *testing.T, b *bus.Bus, evs ...events.Envelope) {
	t.Helper()
	if err := b.PublishAll(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
}

func putRun(t *testing.T, b *bus.Bus, r bus.RunRecord) {
	t.Helper()
	if err := b.PutRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// TestFollowGoesPastAnEarlierEpochsEnd: a follow started while a resumed
// run goes on catches up past the RunFinished that closed epoch 0 and
// follows to the RunFinished of epoch 1 (watch and the viewer stopped at
// the first); a late close of epoch 0 after the RunResumed ends nothing.
func TestFollowGoesPastAnEarlierEpochsEnd(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := testutil.NewResumedRun("oracle", t.TempDir())
	putRun(t, b, r.Record)
	publish(t, b, r.Before...)
	f := startFollow(t, b, r.ID, 0)
	publish(t, b, r.After[0])
	f.waitFor(t, r.After[0].ID)
	marker := events.Must(events.Message, r.ID, r.Cells[1], 2, "launcher", events.MessageData{})
	publish(t, b, events.Must(events.RunFinished, r.ID, "", 0, "cli", events.RunFinishedData{Status: bus.StatusInterrupted}), marker)
	f.waitFor(t, marker.ID)
	publish(t, b, r.After[1:]...)
	f.end(t, r.After[len(r.After)-1])
}

// TestFollowWaitsForTheResumeTheIndexAnnounces: when the log ends with
// epoch 0's RunFinished but the run index already shows the run running
// in epoch 1 (a resume moves the record before it publishes RunResumed),
// the follow goes on to epoch 1's end.
func TestFollowWaitsForTheResumeTheIndexAnnounces(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := testutil.NewResumedRun("oracle", t.TempDir())
	putRun(t, b, r.Record)
	resumed := r.Before[len(r.Before)-1]
	publish(t, b, r.Before[:len(r.Before)-1]...)
	f := startFollow(t, b, r.ID, 0)
	publish(t, b, resumed)
	f.waitFor(t, resumed.ID)
	publish(t, b, r.After...)
	f.end(t, r.After[len(r.After)-1])
}

// TestFollowFromTheResumesEpoch: a follow told its epoch (the resume's
// own progress) does not stop at the RunFinished of the epoch before,
// even where no run index says a resume is coming.
func TestFollowFromTheResumesEpoch(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := testutil.NewResumedRun("oracle", t.TempDir())
	resumed := r.Before[len(r.Before)-1]
	publish(t, b, r.Before[:len(r.Before)-1]...)
	f := startFollow(t, b, r.ID, 1)
	publish(t, b, resumed)
	f.waitFor(t, resumed.ID)
	publish(t, b, r.After...)
	f.end(t, r.After[len(r.After)-1])
}

// TestFollowOfAnEndedRun: a follow of a resumed run that ended returns
// once it has read the events stored, a late one after its RunFinished
// included, and says it caught up.
func TestFollowOfAnEndedRun(t *testing.T) {
	b, _ := bustest.Bus(t)
	r := testutil.NewResumedRun("oracle", t.TempDir())
	putRun(t, b, r.Final)
	late := events.Must(events.Usage, r.ID, r.Cells[1], 2, "launcher", events.UsageData{})
	publish(t, b, append(append(r.Before, r.After...), late)...)
	f := startFollow(t, b, r.ID, 0)
	f.end(t, late)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.caught {
		t.Error("CaughtUp was not called")
	}
}

package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// endedRun publishes the log of a two-cell run whose cells both ended
// (errored, class infra, no retries) and its running index record; the
// last cell's terminal event is returned unpublished when hold is set.
func endedRun(t *testing.T, ctx context.Context, b *bus.Bus, hold bool) (run string, last events.Envelope) {
	t.Helper()
	run = events.NewID()
	spec := events.RunSpec{OutputDir: t.TempDir()}
	if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	evs := []events.Envelope{
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: spec, ProctorVersion: "test"}),
		events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 2, Tasks: []string{"t"}}),
	}
	for i := 1; i <= 2; i++ {
		cell := fmt.Sprintf("t/oracle/-/%d", i)
		evs = append(evs,
			events.Must(events.CellPlanned, run, cell, 1, "planner", events.CellPlannedData{Task: "t", Harness: "oracle", Repeat: i}),
			events.Must(events.CellErrored, run, cell, 1, "launcher", events.CellErroredData{ErrorClass: "infra", Error: "x"}))
	}
	if hold {
		last, evs = evs[len(evs)-1], evs[:len(evs)-1]
	}
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	return run, last
}

// runFinished returns the run's RunFinished events in log order.
func runFinished(t *testing.T, ctx context.Context, b *bus.Bus, run string) []events.Envelope {
	t.Helper()
	var out []events.Envelope
	if err := b.ReadRun(ctx, run, func(e events.Envelope) error {
		if e.Type == events.RunFinished {
			out = append(out, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkFinished fails unless the run's record is finished with its
// artifact written.
func checkFinished(t *testing.T, ctx context.Context, b *bus.Bus, run string) {
	t.Helper()
	rec, err := b.GetRun(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != bus.StatusFinished || rec.Artifact == "" || rec.FinishedAt == "" {
		t.Fatalf("run record status %q artifact %q finished_at %q, want finished with its artifact", rec.Status, rec.Artifact, rec.FinishedAt)
	}
	if _, err := os.Stat(rec.Artifact); err != nil {
		t.Fatalf("the record's artifact: %v", err)
	}
}

// TestRunFinishedOnceAfterTheFinisherDied: an aggregator published the
// run's RunFinished and died before writing the results (its claim left
// to lapse, its process state gone); another takes the run over, wins the
// lapsed claim (FinishClaimDuration 0: at its first look, before its
// replay reaches the RunFinished), and finds the RunFinished in the log:
// it publishes none, and brings the run's record up to date (finished,
// the artifact). The
// dead one's RunFinished has the epoch's id (a takeover within the
// stream's duplicate window) or another (one after it, where the stream
// would keep a second copy of the same id: only the log guards).
func TestRunFinishedOnceAfterTheFinisherDied(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sameID   bool
		wantSame bool
	}{
		{"within the duplicate window", true, true},
		{"after the duplicate window", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			// The claim lapses at the next aggregator's first look, so it
			// wins it before its replay reaches the RunFinished.
			shortClaims(t, 0)
			b, _ := bustest.Bus(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run, _ := endedRun(t, ctx, b, false)

			// The first aggregator claims and publishes, then dies.
			dead, err := New(Config{Version: "test"}, b)
			if err != nil {
				t.Fatal(err)
			}
			p, err := projection.Project(ctx, b, run)
			if err != nil {
				t.Fatal(err)
			}
			if tc.sameID {
				if won, err := dead.finish(ctx, run, 0, finishData(p, 0)); err != nil || !won {
					t.Fatalf("the first aggregator's finish: won %v, %v", won, err)
				}
			} else {
				if won, err := b.ClaimFinish(ctx, run, 0, "dead", func(string) time.Duration { return 0 }); err != nil || !won {
					t.Fatalf("claim: won %v, %v", won, err)
				}
				if err := b.PublishAll(ctx, events.Must(events.RunFinished, run, "", 0, Source,
					events.RunFinishedData{Status: bus.StatusFinished, Counts: p.Counts()})); err != nil {
					t.Fatal(err)
				}
			}
			if rec, _ := b.GetRun(ctx, run); rec.Artifact != "" || bus.TerminalStatus(rec.Status) {
				t.Fatalf("the dead aggregator's record is already up to date: %+v", rec)
			}

			next, err := New(Config{Version: "test"}, b)
			if err != nil {
				t.Fatal(err)
			}
			if err := next.follow(ctx, run); err != nil {
				t.Fatal(err)
			}
			rf := runFinished(t, ctx, b, run)
			if len(rf) != 1 {
				t.Fatalf("%d RunFinished events, want exactly 1", len(rf))
			}
			if same := rf[0].ID == events.RunFinishedID(run, 0); same != tc.wantSame {
				t.Errorf("the RunFinished kept has id %s (the epoch's id: %v), want the dead aggregator's", rf[0].ID, same)
			}
			rec, err := b.GetRun(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			if rec.FinishClaimBy != next.id {
				t.Errorf("claim held by %q, want the second aggregator %q (it took the lapsed claim)", rec.FinishClaimBy, next.id)
			}
			checkFinished(t, ctx, b, run)
		})
	}
}

// TestAggregatorsRacingTheEndFinishOnce: three aggregators follow each of
// several runs while the runs' last cells end, with every claim lapsing
// at once (FinishClaimDuration 0), so each of them wins the claim and
// only the log and the epoch's id keep the RunFinished single: each run
// has exactly one, with the epoch's id, and its record is finished.
func TestAggregatorsRacingTheEndFinishOnce(t *testing.T) {
	t.Chdir(t.TempDir())
	shortClaims(t, 0)
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const runs, aggregators = 4, 3
	var grp errgroup.Group
	var lasts []events.Envelope
	var ids []string
	for range runs {
		run, last := endedRun(t, ctx, b, true)
		ids, lasts = append(ids, run), append(lasts, last)
		for range aggregators {
			s, err := New(Config{Version: "test"}, b)
			if err != nil {
				t.Fatal(err)
			}
			grp.Go(func() error { return s.follow(ctx, run) })
		}
	}
	if err := b.PublishAll(ctx, lasts...); err != nil {
		t.Fatal(err)
	}
	if err := grp.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, run := range ids {
		rf := runFinished(t, ctx, b, run)
		var got []string
		for _, e := range rf {
			got = append(got, e.ID)
		}
		if len(rf) != 1 || rf[0].ID != events.RunFinishedID(run, 0) {
			t.Errorf("run %s: RunFinished events %v, want exactly 1 with the epoch's id %s", run, got, events.RunFinishedID(run, 0))
		}
		checkFinished(t, ctx, b, run)
	}
}

// TestResumedRunGetsItsOwnRunFinished: a run whose log holds the
// RunFinished of epochs 0 and 1 (each with its epoch's id), resumed into
// epoch 2, gets a RunFinished of epoch 2 once its cells end: the earlier
// ones neither stop the aggregator publishing it nor share its id.
func TestResumedRunGetsItsOwnRunFinished(t *testing.T) {
	t.Chdir(t.TempDir())
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.NewID()
	spec := events.RunSpec{OutputDir: t.TempDir()}
	if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning, Spec: spec, Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	a, c := "a/oracle/-/1", "b/oracle/-/1"
	one := 1.0
	interrupted := func(epoch int) events.Envelope {
		e := events.Must(events.RunFinished, run, "", 0, "cli", events.RunFinishedData{Status: bus.StatusInterrupted, Epoch: epoch})
		e.ID = events.RunFinishedID(run, epoch)
		return e
	}
	evs := []events.Envelope{
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: spec, ProctorVersion: "test"}),
		events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 2, Tasks: []string{"a", "b"}}),
		events.Must(events.CellPlanned, run, a, 1, "planner", events.CellPlannedData{Task: "a", Harness: "oracle", Repeat: 1}),
		events.Must(events.CellPlanned, run, c, 1, "planner", events.CellPlannedData{Task: "b", Harness: "oracle", Repeat: 1}),
		events.Must(events.Verdict, run, a, 1, "verifier", events.VerdictData{Reward: &one}),
		interrupted(0),
		events.Must(events.RunResumed, run, "", 0, "cli", events.RunResumedData{Epoch: 1, Cells: []string{c}}),
		interrupted(1),
		events.Must(events.RunResumed, run, "", 0, "cli", events.RunResumedData{Epoch: 2, Cells: []string{c}}),
		events.Must(events.CellSuperseded, run, c, 2, "launcher", events.CellSupersededData{PreviousAttempt: 1}),
		events.Must(events.Verdict, run, c, 2, "verifier", events.VerdictData{Reward: &one}),
	}
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Version: "test"}, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.follow(ctx, run); err != nil {
		t.Fatal(err)
	}
	byEpoch := map[int][]events.Envelope{}
	for _, e := range runFinished(t, ctx, b, run) {
		var d events.RunFinishedData
		if err := events.Into(e, &d); err != nil {
			t.Fatal(err)
		}
		byEpoch[d.Epoch] = append(byEpoch[d.Epoch], e)
	}
	if len(byEpoch[2]) != 1 || byEpoch[2][0].ID != events.RunFinishedID(run, 2) || len(byEpoch[0]) != 1 || len(byEpoch[1]) != 1 {
		t.Fatalf("RunFinished events by epoch %v, want one each of 0, 1 and 2, epoch 2's with its id", byEpoch)
	}
	checkFinished(t, ctx, b, run)
}

// clock is a Config.Now stepped by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestLeaseJudgedOnTheAggregatorsClock: the run's owner writes its lease
// by a clock an hour behind the aggregator's, or an hour ahead. While it
// renews (every LeaseDuration/6 of the aggregator's clock) the run stays
// driven for three leases, though its lease_until is an hour past by the
// aggregator's clock (behind: it is not stolen); once the owner stops,
// the run is driven for one lease more and then no longer, though its
// lease_until is an hour ahead (ahead: it is not kept). A write of the
// record that does not renew the lease (a control action) keeps nothing.
func TestLeaseJudgedOnTheAggregatorsClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration // the owner's clock minus the aggregator's
	}{
		{"owner behind", -time.Hour},
		{"owner ahead", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := bustest.Bus(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
			s, err := New(Config{Version: "test", Now: clk.Now}, b)
			if err != nil {
				t.Fatal(err)
			}
			run := events.NewID()
			renew := func() {
				t.Helper()
				if err := b.UpdateRun(ctx, run, func(r *bus.RunRecord) {
					r.Status = bus.StatusRunning
					r.Renew(clk.Now().Add(tc.skew), bus.LeaseDuration)
				}); err != nil {
					t.Fatal(err)
				}
			}
			renew()
			every := bus.LeaseDuration / 6
			for i := range 18 { // three leases
				if !s.driven(ctx, run) {
					t.Fatalf("renewing owner: not driven after %v", time.Duration(i)*every)
				}
				clk.step(every)
				renew()
			}
			// The owner stops; a control action writes the record.
			if !s.driven(ctx, run) {
				t.Fatal("not driven at the owner's last renewal")
			}
			if err := b.UpdateRun(ctx, run, func(r *bus.RunRecord) { r.Control.Paused = true }); err != nil {
				t.Fatal(err)
			}
			clk.step(bus.LeaseDuration)
			if !s.driven(ctx, run) {
				t.Fatal("not driven a lease after the last renewal")
			}
			clk.step(time.Millisecond)
			if s.driven(ctx, run) {
				t.Fatal("still driven a lease and 1 ms after the owner's last renewal")
			}
			// A run without a lease (an older proctor's) stays driven.
			if err := b.UpdateRun(ctx, run, func(r *bus.RunRecord) { r.LeaseUntil = "" }); err != nil {
				t.Fatal(err)
			}
			clk.step(time.Hour)
			if !s.driven(ctx, run) {
				t.Fatal("a run without a lease is not driven")
			}
		})
	}
}

// shortClaims sets bus.FinishClaimDuration to d for the test.
func shortClaims(t *testing.T, d time.Duration) {
	was := bus.FinishClaimDuration
	bus.FinishClaimDuration = d
	t.Cleanup(func() { bus.FinishClaimDuration = was })
}

// TestFinishClaimJudgedOnTheAggregatorsClock: another aggregator claimed
// the RunFinished of an ended run, writing its claim's end by a clock an
// hour behind this aggregator's, or an hour ahead, and died before
// publishing. This aggregator follows the run and asks for the claim
// again and again (each ask a write of the run's record, watched by the
// test) while its own clock stands still, and at FinishClaimDuration
// less 1 ms after its first look: the claim stays the other's (behind:
// though its written end is an hour past, a live claimant would keep
// it). A millisecond later by its clock it takes the claim over, publishes
// the one RunFinished and writes the results (ahead: though the written
// end is an hour away, a dead claimant is replaced).
func TestFinishClaimJudgedOnTheAggregatorsClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration // the claimant's clock minus the aggregator's
	}{
		{"claimant behind", -time.Hour},
		{"claimant ahead", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			shortClaims(t, 200*time.Millisecond) // asked again every 50 ms
			b, _ := bustest.Bus(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run, _ := endedRun(t, ctx, b, false)
			if won, err := b.ClaimFinish(ctx, run, 0, "dead", func(string) time.Duration { return 0 }); err != nil || !won {
				t.Fatalf("the dead aggregator's claim: won %v, %v", won, err)
			}
			if err := b.UpdateRun(ctx, run, func(r *bus.RunRecord) {
				r.FinishClaimUntil = time.Now().Add(tc.skew + bus.FinishClaimDuration).UTC().Format(time.RFC3339Nano)
			}); err != nil {
				t.Fatal(err)
			}
			w, err := b.Runs.Watch(ctx, run, jetstream.UpdatesOnly())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop() }()

			clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
			s, err := New(Config{Version: "test", Now: clk.Now}, b)
			if err != nil {
				t.Fatal(err)
			}
			followed := make(chan error, 1)
			go func() { followed <- s.follow(ctx, run) }()
			// asks waits for n asks of the aggregator, each lost.
			asks := func(n int) {
				t.Helper()
				for n > 0 {
					select {
					case e := <-w.Updates():
						if e == nil {
							continue
						}
						var rec bus.RunRecord
						if err := json.Unmarshal(e.Value(), &rec); err != nil {
							t.Fatal(err)
						}
						if rec.FinishClaimBy != "dead" {
							t.Fatalf("claim taken by %q at %v of the aggregator's clock after its first look, before FinishClaimDuration (%v)",
								rec.FinishClaimBy, clk.Now().Sub(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)), bus.FinishClaimDuration)
						}
						n--
					case err := <-followed:
						t.Fatalf("the follow ended (%v) while the dead aggregator's claim held", err)
					case <-ctx.Done():
						t.Fatal("the aggregator stopped asking for the claim")
					}
				}
			}
			asks(3)
			clk.step(bus.FinishClaimDuration - time.Millisecond)
			asks(3)
			clk.step(time.Millisecond)
			select {
			case err := <-followed:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("the dead aggregator's claim was not taken over FinishClaimDuration after the first look")
			}
			if rec, err := b.GetRun(ctx, run); err != nil || rec.FinishClaimBy != s.id {
				t.Errorf("claim held by %q (%v), want the aggregator %q", rec.FinishClaimBy, err, s.id)
			}
			if rf := runFinished(t, ctx, b, run); len(rf) != 1 || rf[0].ID != events.RunFinishedID(run, 0) {
				t.Errorf("%d RunFinished events, want one with the epoch's id", len(rf))
			}
			checkFinished(t, ctx, b, run)
		})
	}
}

// TestRunFinishedIDOnePerEpoch: the epoch's id is the same whoever
// derives it, another for another epoch or run, a ULID at the run's time;
// two publishes of it store one event, the second told it was a
// duplicate.
func TestRunFinishedIDOnePerEpoch(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.NewID()
	id := events.RunFinishedID(run, 0)
	if events.RunFinishedID(run, 0) != id || events.RunFinishedID(run, 1) == id || events.RunFinishedID(events.NewID(), 0) == id {
		t.Fatal("the epoch's id is not one per run and epoch")
	}
	if id[:10] != run[:10] {
		t.Errorf("id %s does not carry the run's time %s", id, run[:10])
	}
	if other := events.RunFinishedID("not-a-ulid", 3); len(other) != 26 || other[:10] != "0000000000" {
		t.Errorf("the id of a run whose id is no ULID: %s", other)
	}
	var dups []bool
	for _, status := range []string{bus.StatusFinished, bus.StatusInterrupted} {
		e := events.Must(events.RunFinished, run, "", 0, Source, events.RunFinishedData{Status: status})
		e.ID = id
		dup, err := b.PublishNow(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		dups = append(dups, dup)
	}
	rf := runFinished(t, ctx, b, run)
	if len(rf) != 1 || dups[0] || !dups[1] {
		t.Fatalf("%d RunFinished stored, duplicates reported %v: want 1, [false true]", len(rf), dups)
	}
	var d events.RunFinishedData
	if err := events.Into(rf[0], &d); err != nil || d.Status != bus.StatusFinished {
		t.Errorf("the stored RunFinished %+v (%v), want the first publish's", d, err)
	}
}

// TestTwoAggregatorsTripACapOnce: two aggregators following a run live
// both see its errored cells trip the per-task cap; the log holds one
// RunControl pause for it (the run's one id for the cap), and a third
// that replays the log trips nothing again.
func TestTwoAggregatorsTripACapOnce(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.NewID()
	spec := events.RunSpec{Caps: events.RunCaps{MaxErroredPerTask: 2}}
	if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusRunning, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	evs := []events.Envelope{
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: spec, ProctorVersion: "test"}),
		events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 3, Tasks: []string{"t"}}),
	}
	for i := 1; i <= 3; i++ {
		evs = append(evs, events.Must(events.CellPlanned, run, fmt.Sprintf("t/oracle/-/%d", i), 1, "planner",
			events.CellPlannedData{Task: "t", Harness: "oracle", Repeat: i}))
	}
	for i := 1; i <= 2; i++ {
		evs = append(evs, events.Must(events.CellErrored, run, fmt.Sprintf("t/oracle/-/%d", i), 1, "launcher",
			events.CellErroredData{ErrorClass: "sandbox", Error: "x"}))
	}
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	p := projection.NewProjector(run)
	for _, e := range evs {
		p.Apply(e)
	}
	if name, _ := p.CapTripped(); name != "max_errored_per_task" {
		t.Fatalf("cap tripped %q, want max_errored_per_task", name)
	}
	last := evs[len(evs)-1]
	for range 2 {
		var c caps
		if err := c.check(ctx, b, run, p, last); err != nil {
			t.Fatal(err)
		}
	}
	replay, err := projection.Project(ctx, b, run)
	if err != nil {
		t.Fatal(err)
	}
	var c caps
	if err := c.check(ctx, b, run, replay, last); err != nil {
		t.Fatal(err)
	}
	var pauses []string
	if err := b.ReadRun(ctx, run, func(e events.Envelope) error {
		if e.Type == events.RunControl {
			pauses = append(pauses, e.ID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := events.RunOnceID(run, "cap/max_errored_per_task"); len(pauses) != 1 || pauses[0] != want {
		t.Fatalf("RunControl events %v, want one, %s", pauses, want)
	}
	if rec, err := b.GetRun(ctx, run); err != nil || !rec.Control.Paused {
		t.Fatalf("run record control %+v (%v), want paused", rec.Control, err)
	}
}

package bus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

func TestPublishDedupAndReadRun(t *testing.T) {
	t.Parallel()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	run := events.NewID()
	var sent []events.Envelope
	for i := 0; i < 500; i++ {
		e := events.Must(events.Usage, run, fmt.Sprintf("t%d/oracle/default/1", i%7), 1, "test", events.UsageData{PromptTokens: events.Count(int64(i))})
		sent = append(sent, e)
	}
	if err := b.PublishAll(ctx, sent...); err != nil {
		t.Fatal(err)
	}
	// Re-publishing the same ids is dropped by the duplicate window.
	if err := b.PublishAll(ctx, sent[:50]...); err != nil {
		t.Fatal(err)
	}
	// Another run's events are not read.
	if err := b.PublishAll(ctx, events.Must(events.RunFinished, events.NewID(), "", 0, "test", nil)); err != nil {
		t.Fatal(err)
	}
	var got []events.Envelope
	if err := b.ReadRun(ctx, run, func(e events.Envelope) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sent) {
		t.Fatalf("read %d events, want %d", len(got), len(sent))
	}
	for i := range got {
		if got[i].ID != sent[i].ID {
			t.Fatalf("event %d: id %s, want %s (order lost)", i, got[i].ID, sent[i].ID)
		}
	}
	// Per-type subjects: only Usage of this run, across cells.
	n := 0
	err := b.Read(ctx, []string{"proctor.run." + run + ".cell.*.Usage"}, func(events.Envelope) error { n++; return nil })
	if err != nil || n != 500 {
		t.Fatalf("type filter read %d (%v)", n, err)
	}
	// An unknown run reads nothing and returns.
	if err := b.ReadRun(ctx, "NOPE", func(events.Envelope) error { t.Fatal("event for unknown run"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestPublishBackpressureLosesNothing(t *testing.T) {
	t.Parallel()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	run := events.NewID()
	const n = 3 * bus.MaxPending
	for i := 0; i < n; i++ {
		if err := b.Publish(ctx, events.Must(events.Message, run, "c/oracle/default/1", 1, "test", events.MessageData{Text: "x"})); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := b.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("stream holds %d events, want %d", info.State.Msgs, n)
	}
}

func TestWorkQueueRedelivery(t *testing.T) {
	t.Parallel()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	cons, err := b.WorkConsumer(ctx, "test-launch", events.LaunchSubject, 500*time.Millisecond, 4)
	if err != nil {
		t.Fatal(err)
	}
	job := events.LaunchJob{RunID: "R", CellID: "a/oracle/default/1"}
	if err := b.PublishWork(ctx, events.LaunchSubject, "R/a", job); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishWork(ctx, events.LaunchSubject, "R/a", job); err != nil { // duplicate id
		t.Fatal(err)
	}
	// First delivery is not acked (a crashed worker); it comes back.
	m1, err := cons.Next()
	if err != nil {
		t.Fatal(err)
	}
	if bus.Attempt(m1) != 1 {
		t.Fatalf("attempt %d", bus.Attempt(m1))
	}
	m2, err := cons.Next()
	if err != nil {
		t.Fatal(err)
	}
	if bus.Attempt(m2) != 2 || string(m2.Data()) != string(m1.Data()) {
		t.Fatalf("redelivery attempt %d data %s", bus.Attempt(m2), m2.Data())
	}
	if err := m2.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := b.Work.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("work queue holds %d jobs after ack (duplicate enqueued?)", info.State.Msgs)
	}
}

func TestRunIndex(t *testing.T) {
	t.Parallel()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	if _, err := b.GetRun(ctx, "missing"); err == nil {
		t.Fatal("missing run found")
	}
	done := make(chan bus.RunRecord, 1)
	go func() {
		r, err := b.WaitRun(ctx, "R1")
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	if err := b.UpdateRun(ctx, "R1", func(r *bus.RunRecord) { r.Status = bus.StatusRunning }); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateRun(ctx, "R1", func(r *bus.RunRecord) { r.Status = bus.StatusFinished; r.Artifact = "/x.json" }); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Status != bus.StatusFinished || r.Artifact != "/x.json" {
		t.Fatalf("WaitRun returned %+v", r)
	}
	runs, err := b.ListRuns(ctx)
	if err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns = %v, %v", runs, err)
	}
}

// TestReadRunInterleaved reads a run whose events are interleaved with
// another run's, through the unfiltered range scan ReadRun uses.
func TestReadRunInterleaved(t *testing.T) {
	t.Parallel()
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	a, other := events.NewID(), events.NewID()
	var want []string
	pub := func(run string, e events.Envelope) {
		if err := b.PublishAll(ctx, e); err != nil {
			t.Fatal(err)
		}
		if run == a {
			want = append(want, e.ID)
		}
	}
	pub(other, events.Must(events.RunRequested, other, "", 0, "test", events.RunRequestedData{}))
	pub(a, events.Must(events.RunRequested, a, "", 0, "test", events.RunRequestedData{}))
	for i := 0; i < 50; i++ {
		pub(other, events.Must(events.Usage, other, "x/oracle/default/1", 1, "test", events.UsageData{}))
		pub(a, events.Must(events.Usage, a, "y/oracle/default/1", 1, "test", events.UsageData{PromptTokens: events.Count(int64(i))}))
	}
	pub(a, events.Must(events.RunFinished, a, "", 0, "test", nil))
	pub(other, events.Must(events.RunFinished, other, "", 0, "test", nil))
	var got []string
	if err := b.ReadRun(ctx, a, func(e events.Envelope) error {
		if e.RunID != a {
			t.Fatalf("event of run %s read for %s", e.RunID, a)
		}
		got = append(got, e.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read %d events, want %d in order", len(got), len(want))
	}
}

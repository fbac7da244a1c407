package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestRetrySkipsACellAlreadyRetried: an aggregator replaying a log meets
// a retryable error whose cell already has a later attempt and publishes
// nothing; for a cell whose last event is the error it publishes one
// launch job with AttemptBase = the errored attempt, and a second
// aggregator's copy is dropped by the job id.
func TestRetrySkipsACellAlreadyRetried(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.NewID()
	errA := events.Must(events.CellErrored, run, "a", 1, "launcher", events.CellErroredData{ErrorClass: "sandbox", Error: "x"})
	errB := events.Must(events.CellErrored, run, "b", 1, "launcher", events.CellErroredData{ErrorClass: "sandbox", Error: "x"})
	if err := b.PublishAll(ctx, errA, errB,
		events.Must(events.CellSuperseded, run, "a", 2, "launcher", events.CellSupersededData{PreviousAttempt: 1})); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Version: "test"}, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []events.Envelope{errA, errB, errB} {
		if err := s.retry(ctx, e, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := b.WorkConsumer(ctx, "test-launcher", events.LaunchSubject, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []events.LaunchJob
	for m := range batch.Messages() {
		var j events.LaunchJob
		if err := events.Into(events.Envelope{Data: m.Data(), Type: "LaunchJob"}, &j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if len(jobs) != 1 || jobs[0].CellID != "b" || jobs[0].AttemptBase != 1 {
		t.Fatalf("launch jobs %+v, want one for cell b with attempt base 1", jobs)
	}
}

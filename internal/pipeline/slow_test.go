package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/services/launcher"
)

// TestSlowHandlersTakeNoExpiredJobs is fault 9: two launchers (nodes n1
// and n2, one cell at a time each) and two aggregators share the work
// queue of a run whose every solve takes twice the launchers' AckWait. A
// launcher holds no job it has no slot for (Bus.Serve pulls one only when
// a handler slot is free, and heartbeats the one it runs), so no job
// waits in a buffer past its ack deadline and is handed to the other
// launcher as well: the run finishes and every cell was solved once, with
// one attempt and one verdict.
func TestSlowHandlersTakeNoExpiredJobs(t *testing.T) {
	t.Chdir(t.TempDir())
	const ackWait = time.Second
	b, e := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := planCells(t, ctx, b, 6, 2*ackWait)
	connect := func() *bus.Bus {
		c, err := bus.Connect(ctx, e.ClientURL(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	stop := r.services(t, ctx, connect, []launcher.Config{
		{Node: "n1", Concurrency: 1, AckWait: ackWait},
		{Node: "n2", Concurrency: 1, AckWait: ackWait},
	}, 2)
	r.publish(t, ctx, b)
	rec := waitFinished(t, ctx, b, r.run)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.checkOnce(t, b, rec)
}

// TestRedeliveredLaunchJobOfAnEndedCell is fault 9's de-duplication on
// the launcher: a launch job given again after its cell's verdict was
// recorded (its ack lost while a stream leader moved, a launcher dying
// between the verdict and the ack) is acked without running the cell: one
// solve, one attempt, one verdict.
func TestRedeliveredLaunchJobOfAnEndedCell(t *testing.T) {
	t.Chdir(t.TempDir())
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := planCells(t, ctx, b, 2, 0)
	stop := r.services(t, ctx, func() *bus.Bus { return b }, []launcher.Config{{Node: "n1", Concurrency: 1}}, 0)
	first, second := r.jobs[0], r.jobs[1]
	verdicts := func(cell string) int {
		n := 0
		for _, e := range harnesstest.CellEvents(t, b, r.run, cell) {
			if e.Type == events.Verdict {
				n++
			}
		}
		return n
	}
	waitVerdict := func(cell string) {
		for verdicts(cell) == 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("cell %s has no verdict", cell)
			case <-time.After(50 * time.Millisecond): // polling the log
			}
		}
	}
	if err := b.PublishWork(ctx, events.LaunchSubject, r.run+"/"+first.CellID, first); err != nil {
		t.Fatal(err)
	}
	waitVerdict(first.CellID)
	// The same job again (as a redelivery presents it), then the second
	// cell's: one launcher at a time, so once the second cell has its
	// verdict the copy was handled.
	if err := b.PublishWork(ctx, events.LaunchSubject, r.run+"/"+first.CellID+"/again", first); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishWork(ctx, events.LaunchSubject, r.run+"/"+second.CellID, second); err != nil {
		t.Fatal(err)
	}
	waitVerdict(second.CellID)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	r.checkOnce(t, b, bus.RunRecord{Status: bus.StatusFinished})
}

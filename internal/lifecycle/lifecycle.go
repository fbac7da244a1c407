// Package lifecycle is a run's life around the services that do its
// work: its start (Start), the lease its owner holds (HoldLease), the end
// of runs whose owner died (RecoverDead), its identity (Identify), its
// continuation in a new epoch (PrepareResume, Resume.Begin) and its early
// end (Abandon).
//
// It reads and writes the event log and the run index only (pkg/bus): the
// CLI wires it to commands, starts the services and prints what it
// returns. Following a run until it ends, whatever its epochs, is
// projection.Follow.
package lifecycle

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// Source is the source of the events this package publishes.
const Source = "cli"

// Owner names this process as a run's owner in the run index ("host pid
// N").
func Owner() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", h, os.Getpid())
}

// Request is a new run as Start records it.
type Request struct {
	RunID    string
	Spec     events.RunSpec
	Identity Identity
	// Owner names the process that drives the run (Owner()); Host the
	// machine, as RunRequested records it; Version proctor's.
	Owner, Host, Version string
}

// Start records a new run: its index record (requested, with its spec,
// identity, owner and a lease of bus.LeaseDuration from now), then its
// RunRequested event, which the planner plans. The error is the event
// log's or the index's.
func Start(ctx context.Context, b *bus.Bus, r Request) error {
	now := time.Now()
	if err := b.UpdateRun(ctx, r.RunID, func(rec *bus.RunRecord) {
		rec.Status, rec.Spec, rec.StartedAt = bus.StatusRequested, r.Spec, now.UTC().Format(time.RFC3339Nano)
		rec.Identity, rec.Inputs, rec.Owner = r.Identity.Hash, r.Identity.Inputs, r.Owner
		rec.Renew(now, bus.LeaseDuration)
	}); err != nil {
		return err
	}
	return b.PublishAll(ctx, events.Must(events.RunRequested, r.RunID, "", 0, Source,
		events.RunRequestedData{Spec: r.Spec, ProctorVersion: r.Version, Host: r.Host}))
}

// HoldLease renews runID's lease every bus.LeaseDuration/6 until ctx
// ends. A renewal that fails is retried at the next tick: the lease
// outlives five missed renewals.
func HoldLease(ctx context.Context, b *bus.Bus, runID string) {
	t := time.NewTicker(bus.LeaseDuration / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			_ = b.UpdateRun(ctx, runID, func(r *bus.RunRecord) { r.Renew(now, bus.LeaseDuration) })
		}
	}
}

// Dead is one run RecoverDead found: Err is nil when it was ended.
type Dead struct {
	ID string
	// Why is the reason recorded on the run's index record.
	Why string
	Err error
}

// RecoverDead ends the runs that the index of an embedded store still
// shows requested or running. The caller must hold the store's lock (the
// one process on it), so the process that drove each of them is gone.
// Each is finished as interrupted (its RunFinished published, its partial
// artifact written: cells without a verdict are errored rows), so no
// launcher runs its queued work. It returns every run it tried, in index
// order (newest first); the error is the index's. On a cluster, where the
// runs of other processes are alive, it must not be called: leases
// decide there.
func RecoverDead(ctx context.Context, b *bus.Bus, version string) ([]Dead, error) {
	recs, err := b.ListRuns(ctx)
	if err != nil {
		return nil, err
	}
	var out []Dead
	for _, r := range recs {
		if r.Terminal() {
			continue
		}
		d := Dead{ID: r.ID, Why: fmt.Sprintf("the process that ran it (%s) ended without finishing it; continue it with `proctor runs resume %s`", orDash(r.Owner), r.ID)}
		if d.Err = b.UpdateRun(ctx, r.ID, func(r *bus.RunRecord) { r.Error = d.Why }); d.Err == nil {
			_, d.Err = projection.Finish(ctx, b, r.ID, bus.StatusInterrupted, version)
		}
		out = append(out, d)
	}
	return out, nil
}

// Collector removes the sandboxes of a run: every container and network
// labelled with it (the Docker driver's GC).
type Collector interface {
	GC(ctx context.Context, runID string) (containers, networks int, err error)
}

// Cleanup is what a Collector removed of a run, or why it failed.
type Cleanup struct {
	Containers, Networks int
	Err                  error
}

// Abandon ends a run that will not complete (stopped by a signal, or the
// services of its process failed) with status: it removes the run's
// sandboxes (gc, unless nil), then writes the artifact of what finished
// (projection.Finish: unfinished cells are errored rows) and returns the
// run's final record. It works on its own context of two minutes: the
// caller's has usually ended.
func Abandon(b *bus.Bus, gc Collector, runID, status, version string) (bus.RunRecord, Cleanup, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var c Cleanup
	if gc != nil {
		c.Containers, c.Networks, c.Err = gc.GC(ctx, runID)
	}
	rec, err := projection.Finish(ctx, b, runID, status, version)
	return rec, c, err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

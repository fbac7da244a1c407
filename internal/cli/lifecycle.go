package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// recoverDead ends the runs that the embedded store's index still shows
// requested or running (lifecycle.RecoverDead: the caller holds the store
// lock, so their processes are gone) and prints each; it returns the ids
// of those ended. With --nats (a cluster, where runs of other processes
// are alive) it does nothing: there, leases decide.
func (g *globals) recoverDead(ctx context.Context, conn *connection) []string {
	if conn.embedded == nil {
		return nil
	}
	found, err := lifecycle.RecoverDead(ctx, conn.Bus, version())
	if err != nil {
		fmt.Fprintln(g.stderr, "proctor: reading the run index:", err)
		return nil
	}
	var dead []string
	for _, d := range found {
		if d.Err != nil {
			fmt.Fprintf(g.stderr, "proctor: ending dead run %s: %v\n", d.ID, d.Err)
			continue
		}
		fmt.Fprintf(g.stderr, "run %s: interrupted: %s\n", d.ID, d.Why)
		dead = append(dead, d.ID)
	}
	return dead
}

// gcDead removes the containers and networks of the dead runs, when the
// driver can (sandbox.Collector).
func (g *globals) gcDead(ctx context.Context, driver sandbox.Driver, dead []string) {
	d, ok := driver.(sandbox.Collector)
	if !ok {
		return
	}
	for _, id := range dead {
		if nc, nn, err := d.GC(ctx, id); err != nil {
			fmt.Fprintf(g.stderr, "proctor: cleaning up dead run %s: %v\n", id, err)
		} else if nc+nn > 0 {
			fmt.Fprintf(g.stderr, "removed %d containers and %d networks of dead run %s\n", nc, nn, id)
		}
	}
}

// abandon ends a run that will not complete (stopped by a signal, or its
// in-process services failed) with status (lifecycle.Abandon: its
// containers and networks removed, the artifact of what finished written)
// and prints the result. Errors are printed; the caller returns its own.
func (g *globals) abandon(b *bus.Bus, driver sandbox.Driver, runID, status string) {
	var gc lifecycle.Collector
	if d, ok := driver.(sandbox.Collector); ok {
		gc = d
	}
	rec, c, err := lifecycle.Abandon(b, gc, runID, status, version())
	if c.Err != nil {
		fmt.Fprintln(g.stderr, "proctor: cleaning up run containers:", c.Err)
	} else if c.Containers+c.Networks > 0 {
		fmt.Fprintf(g.stderr, "removed %d containers and %d networks of run %s\n", c.Containers, c.Networks, runID)
	}
	if err != nil {
		fmt.Fprintln(g.stderr, "proctor: writing the partial artifact:", err)
		return
	}
	_ = g.printResult(rec)
}

// lifecycleError marks a lifecycle refusal (lifecycle.Refused) and a
// spec whose matrix no longer plans for a bad input (matrixError) as the
// caller's input (exit code 2).
func lifecycleError(err error) error {
	var r *lifecycle.Refused
	if errors.As(err, &r) {
		return usageError{err}
	}
	return matrixError(err)
}

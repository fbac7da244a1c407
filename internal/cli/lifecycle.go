package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
	"github.com/proctor-eval/proctor/services/planner"
)

// owner names this process as a run's owner in the run index.
func owner() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", h, os.Getpid())
}

// holdLease renews runID's lease every bus.LeaseDuration/6 until ctx ends.
// A renewal that fails is retried at the next tick: the lease outlives
// five missed renewals.
func holdLease(ctx context.Context, b *bus.Bus, runID string) {
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

// recoverDead ends the runs that the embedded store's index still shows
// requested or running: the caller holds the store lock, so the process
// that drove each of them is gone. Each is finished as interrupted (its
// RunFinished published, its partial artifact written: cells without a
// verdict are errored rows), so no launcher of this process runs its
// queued work. It returns their ids; with --nats (a cluster, where runs
// of other processes are alive) it does nothing: there, leases decide.
func (g *globals) recoverDead(ctx context.Context, conn *connection) []string {
	if conn.embedded == nil {
		return nil
	}
	recs, err := conn.ListRuns(ctx)
	if err != nil {
		fmt.Fprintln(g.stderr, "proctor: reading the run index:", err)
		return nil
	}
	var dead []string
	for _, r := range recs {
		if r.Terminal() {
			continue
		}
		why := fmt.Sprintf("the process that ran it (%s) ended without finishing it; continue it with `proctor runs resume %s`", orDash(r.Owner), r.ID)
		if err := conn.UpdateRun(ctx, r.ID, func(r *bus.RunRecord) { r.Error = why }); err != nil {
			fmt.Fprintln(g.stderr, "proctor:", err)
			continue
		}
		if _, err := projection.Finish(ctx, conn.Bus, r.ID, bus.StatusInterrupted, version()); err != nil {
			fmt.Fprintf(g.stderr, "proctor: ending dead run %s: %v\n", r.ID, err)
			continue
		}
		fmt.Fprintf(g.stderr, "run %s: interrupted: %s\n", r.ID, why)
		dead = append(dead, r.ID)
	}
	return dead
}

// gcDead removes the containers and networks of the dead runs.
func (g *globals) gcDead(ctx context.Context, d *docker.Driver, dead []string) {
	if d == nil {
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

// identityOf hashes a run's declared inputs: for every cell (in matrix
// order) its task and task revision, harness reference and the content of
// an agent harness's directory, model and repeat. Output paths, the
// machine and the time are no part of it: a resumed run is the same run
// wherever it continues.
func identityOf(spec events.RunSpec, cells []planner.Cell) (string, map[string]string, error) {
	inputs, err := declaredInputs(spec, cells)
	if err != nil {
		return "", nil, err
	}
	h := sha256.New()
	keys := make([]string, 0, len(inputs))
	for k := range inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, inputs[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), inputs, nil
}

// declaredInputs maps each declared input, by the name resume reports
// when it changed ("task fix-sum revision", "harness agent:x content",
// "cells"), to its value.
func declaredInputs(spec events.RunSpec, cells []planner.Cell) (map[string]string, error) {
	in := map[string]string{}
	var ids []string
	for _, c := range cells {
		ids = append(ids, c.ID)
		in["task "+c.Task.Name+" revision"] = c.Task.Revision
		if c.Harness.Kind == harness.Agent {
			sum, err := dirHash(spec.BaseDir, c.Harness.Arg)
			if err != nil {
				return nil, fmt.Errorf("harness %s: %w", c.Harness.Name, err)
			}
			in["harness "+c.Harness.Name+" content"] = sum
		}
	}
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintln(h, id)
	}
	in["cells (tasks × harnesses × models × repeats)"] = hex.EncodeToString(h.Sum(nil))
	return in, nil
}

// dirHash hashes the names and contents of the regular files directly in
// dir (relative to base).
func dirHash(base, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(base, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

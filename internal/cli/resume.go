package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/services/launcher"
)

// resumeFlags are the flags of `runs resume` (and the ones `tasks run
// --resume` shares with it).
type resumeFlags struct {
	outJSON, outMD string
	node, imageMap string
	concurrency    int
	limits         limitFlags
}

func newRunsResume(g *globals) *cobra.Command {
	f := &resumeFlags{}
	cmd := &cobra.Command{
		Use:   "resume RUN [--out-json F] [--out-md F]",
		Short: "Continue a run that died or was interrupted: cells without a verdict run again",
		Long: `Continue a run whose process died (kill -9, a crash, a lost machine) or that
was interrupted. Cells with a terminal event (verdict, errored, refused) keep
it; every other cell runs again as a new attempt, and the artifact and report
are written as 'tasks run' writes them. Resume refuses a run whose declared
inputs (task revisions, agent harness contents, the matrix) changed, naming
the input, and a run whose owner still holds its lease. Nothing is deleted:
the log keeps every attempt.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.resume(cmd.Context(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.outJSON, "out-json", "", "write the task_runs.v1 artifact here (default: the run's own path)")
	fl.StringVar(&f.outMD, "out-md", "", "write the Markdown report here (default: the run's own path)")
	fl.StringVar(&f.node, "node", "", "this machine's node name (default: host name)")
	fl.StringVar(&f.imageMap, "image-map", "", "image reference map file")
	fl.IntVar(&f.concurrency, "concurrency", launcher.DefaultConcurrency(), "cells run at once")
	f.limits.add(fl)
	return cmd
}

// errNothingToResume is returned for a run that finished.
var errNothingToResume = errors.New("nothing to resume")

func (g *globals) resume(ctx context.Context, arg string, f *resumeFlags) error {
	if f.concurrency < 1 {
		return usageError{fmt.Errorf("--concurrency must be at least 1, not %d", f.concurrency)}
	}
	for _, p := range []*string{&f.outJSON, &f.outMD} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	conn, err := g.connectOwner(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	dead := g.recoverDead(ctx, conn)
	runID, err := g.resolveRun(ctx, conn.Bus, arg)
	if err != nil {
		return err
	}
	rec, err := conn.GetRun(ctx, runID)
	if err != nil {
		return usageError{err}
	}
	if !rec.Terminal() && !rec.LeaseExpired(time.Now()) {
		return usageError{fmt.Errorf("run %s is alive: %s holds its lease until %s", runID, orDash(rec.Owner), orDash(rec.LeaseUntil))}
	}
	if rec.Status == bus.StatusFinished {
		return usageError{fmt.Errorf("run %s finished: %w", runID, errNothingToResume)}
	}
	p, err := projection.Project(ctx, conn.Bus, runID)
	if err != nil {
		return err
	}
	if !p.Planned() {
		return usageError{fmt.Errorf("run %s was never planned: start it again with tasks run", runID)}
	}
	if p.PlanError() != "" {
		return usageError{fmt.Errorf("run %s could not be planned (%s): %w", runID, p.PlanError(), errNothingToResume)}
	}
	cells, err := matrix(rec.Spec)
	if err != nil {
		return fmt.Errorf("run %s: its spec no longer plans: %w", runID, err)
	}
	identity, inputs, err := identityOf(rec.Spec, cells)
	if err != nil {
		return err
	}
	if rec.Identity != "" && identity != rec.Identity {
		return usageError{fmt.Errorf("run %s: refusing to resume: %s", runID, changedInputs(rec.Inputs, inputs))}
	}
	var again []string
	base := map[string]int{}
	for _, c := range cells {
		if c.Refusal != "" || p.CellDone(c.ID) {
			continue
		}
		again = append(again, c.ID)
		base[c.ID] = p.Attempt(c.ID)
	}
	epoch := rec.Epoch + 1
	sc := stackConfig{node: f.node, concurrency: f.concurrency, imageMap: f.imageMap, services: allServices, limits: f.limits}
	final, err := g.drive(ctx, conn, runID, epoch, nil, dead, sc, func(ctx context.Context) error {
		now := time.Now()
		// The record moves first: a launcher that reads it drops the
		// jobs of older epochs, and the aggregator follows to this
		// epoch's RunFinished.
		if err := conn.UpdateRun(ctx, runID, func(r *bus.RunRecord) {
			r.Status, r.Epoch, r.Owner, r.Error, r.FinishedAt = bus.StatusRunning, epoch, owner(), "", ""
			r.Identity, r.Inputs = identity, inputs
			r.Renew(now, bus.LeaseDuration)
		}); err != nil {
			return err
		}
		if err := conn.PublishAll(ctx, events.Must(events.RunResumed, runID, "", 0, "cli", events.RunResumedData{
			Epoch: epoch, Cells: again, Owner: owner(), Identity: identity, OutJSON: f.outJSON, OutMD: f.outMD,
		})); err != nil {
			return err
		}
		for _, id := range again {
			job := events.LaunchJob{RunID: runID, CellID: id, Epoch: epoch, AttemptBase: base[id]}
			if err := conn.PublishWork(ctx, events.LaunchSubject, fmt.Sprintf("%s/%s/e%d", runID, id, epoch), job); err != nil {
				return err
			}
		}
		fmt.Fprintf(g.stderr, "run %s: resumed (epoch %d): %d of %d cells run again\n", runID, epoch, len(again), len(cells))
		return nil
	})
	if err != nil {
		return err
	}
	return g.printResult(final)
}

// changedInputs names the declared inputs that differ between was and now.
func changedInputs(was, now map[string]string) string {
	var diffs []string
	for k, v := range now {
		if old, ok := was[k]; !ok {
			diffs = append(diffs, k+" is new")
		} else if old != v {
			diffs = append(diffs, fmt.Sprintf("%s changed (was %.12s, now %.12s)", k, old, v))
		}
	}
	for k := range was {
		if _, ok := now[k]; !ok {
			diffs = append(diffs, k+" is gone")
		}
	}
	sort.Strings(diffs)
	if len(diffs) == 0 {
		return "its declared inputs changed"
	}
	return fmt.Sprint(diffs)
}

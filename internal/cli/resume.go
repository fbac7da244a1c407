package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/services/launcher"
)

// resumeFlags are the flags of `runs resume` (and the ones `tasks run
// --resume` shares with it).
type resumeFlags struct {
	outJSON, outMD string
	node, imageMap string
	sandbox        string
	concurrency    int
	limits         limitFlags
	// conflicts, when set, lists the flags that differ from the run's
	// recorded spec (tasks run --resume); any refuses the resume.
	conflicts func(bus.RunRecord) []string
}

func newRunsResume(g *globals) *cobra.Command {
	f := &resumeFlags{}
	cmd := &cobra.Command{
		Use:   "resume RUN [--out-json F] [--out-md F]",
		Short: "Continue a run that died or was interrupted: cells without a verdict run again",
		Long: `Continue a run whose process died (kill -9, a crash, a lost machine) or that
was interrupted. Cells with a terminal event (verdict, errored, refused) keep
it, except an error of proctor's own machinery (class build, sandbox or
infra, as a container killed mid-verify leaves it); every other cell runs
again as a new attempt, and the artifact and report are written as 'tasks
run' writes them. Resume lists each cell it runs again and each it reuses,
with why. It refuses a run whose declared inputs (task revisions, the agent
and skill directories and CLI binaries of its harnesses, the matrix)
changed, naming the input, and a run whose owner still holds its lease.
Nothing is deleted: the log keeps every attempt.`,
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
	fl.StringVar(&f.sandbox, "sandbox", defaultSandbox, sandboxHelp())
	fl.IntVar(&f.concurrency, "concurrency", launcher.DefaultConcurrency(), "cells run at once")
	f.limits.add(fl)
	return cmd
}

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
	if f.conflicts != nil {
		if rec, err := conn.GetRun(ctx, runID); err == nil {
			if d := f.conflicts(rec); len(d) > 0 {
				return usageError{fmt.Errorf("run %s: --resume continues the run as it was requested, and these flags differ from it: %s",
					runID, strings.Join(d, "; "))}
			}
		}
	}
	r, err := lifecycle.PrepareResume(ctx, conn.Bus, runID, time.Now(), g.getenv)
	if err != nil {
		return lifecycleError(err)
	}
	if err := g.checkSandbox(f.sandbox, r.Record.Spec.Harnesses); err != nil {
		return err
	}
	sc := stackConfig{node: f.node, concurrency: f.concurrency, imageMap: f.imageMap, sandbox: f.sandbox, services: allServices, limits: f.limits}
	final, err := g.drive(ctx, conn, runID, r.Epoch, nil, dead, sc, func(ctx context.Context) error {
		if err := r.Begin(ctx, conn.Bus, lifecycle.Owner(), f.outJSON, f.outMD); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "run %s: resumed (epoch %d): %d of %d cells run again\n", runID, r.Epoch, len(r.Again), len(r.Cells))
		// Why can hold what the agent wrote (an error's text).
		for _, d := range r.Again {
			fmt.Fprintf(g.stderr, "  run again  %s: %s\n", textsafe.Line(d.CellID), textsafe.Line(d.Why))
		}
		for _, d := range r.Kept {
			fmt.Fprintf(g.stderr, "  reuse      %s: %s\n", textsafe.Line(d.CellID), textsafe.Line(d.Why))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return g.printResult(final)
}

package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/services/launcher"
)

// controlCmd runs one control action on the run RUN names (a live run),
// through the bus the command reaches as `runs show` does, and prints the
// action recorded.
func (g *globals) controlCmd(ctx context.Context, arg string, act func(ctx context.Context, conn *connection, runID string) (events.Envelope, error)) error {
	conn, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	runID, err := g.resolveRun(ctx, conn.Bus, arg)
	if err != nil {
		return err
	}
	e, err := act(ctx, conn, runID)
	if err != nil {
		return lifecycleError(err)
	}
	var d events.RunControlData
	_ = events.Into(e, &d)
	msg := fmt.Sprintf("run %s: %s recorded at %s by %s", runID, d.Action, e.At.Format(time.RFC3339), d.By)
	if len(d.Cells) > 0 {
		msg += fmt.Sprintf(" (%d cells)", len(d.Cells))
	}
	if d.Why != "" {
		msg += ": " + d.Why
	}
	fmt.Fprintln(g.stdout, textsafe.Line(msg))
	return nil
}

func newRunsCancel(g *globals) *cobra.Command {
	var cells []string
	var why string
	cmd := &cobra.Command{
		Use:   "cancel RUN [--cell ID ...] [--why TEXT]",
		Short: "Cancel a running run, or some of its cells, from any process",
		Long: `Cancel a run that is running (here or on a cluster), or only the cells
given with --cell. Running cells are stopped as a Ctrl-C stops them: their
sandboxes are removed and they are errored, class cancelled (missing data,
never a 0); queued cells never start (errored the same way). A cancel of the
whole run ends it with status cancelled once its cells have stopped, and the
artifact of what finished is written as usual. The action is recorded in the
run's log with who asked, when and --why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.controlCmd(cmd.Context(), args[0], func(ctx context.Context, conn *connection, runID string) (events.Envelope, error) {
				return lifecycle.Cancel(ctx, conn.Bus, runID, cells, lifecycle.By(), why)
			})
		},
	}
	cmd.Flags().StringArrayVar(&cells, "cell", nil, "cancel only this cell (its id, task/harness/model/repeat; repeatable)")
	cmd.Flags().StringVar(&why, "why", "", "the reason, recorded with the action")
	return cmd
}

func newRunsPause(g *globals) *cobra.Command {
	var why string
	var now bool
	cmd := &cobra.Command{
		Use:   "pause RUN [--why TEXT] [--now]",
		Short: "Pause a running run: no new cell starts until runs continue",
		Long: `Pause a run that is running (here or on a cluster): no new cell starts;
running cells finish. Launchers hold the jobs of queued cells until the run
is continued ('proctor runs continue RUN') or cancelled. --now is recorded
with the action, but no sandbox driver freezes a running solve with its
budget stopped yet, so running cells finish. The action is recorded in the
run's log with who asked, when and --why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if now {
				fmt.Fprintln(g.stderr, "note: --now is recorded, but no sandbox driver freezes a running solve with its budget stopped yet: the running cells finish")
			}
			return g.controlCmd(cmd.Context(), args[0], func(ctx context.Context, conn *connection, runID string) (events.Envelope, error) {
				return lifecycle.Pause(ctx, conn.Bus, runID, now, lifecycle.By(), why)
			})
		},
	}
	cmd.Flags().StringVar(&why, "why", "", "the reason, recorded with the action")
	cmd.Flags().BoolVar(&now, "now", false, "also freeze the running cells (recorded; not built yet: no driver freezes a solve with its budget stopped, so running cells finish)")
	return cmd
}

func newRunsContinue(g *globals) *cobra.Command {
	var why string
	cmd := &cobra.Command{
		Use:   "continue RUN [--why TEXT]",
		Short: "Continue a paused run (paused by runs pause or by a spending cap)",
		Long: `Continue a run paused by 'proctor runs pause' or by one of its spending
caps (--max-cost-usd, --max-errored-fraction, --max-errored-per-task of
tasks run): held cells start again. A cap that tripped does not trip again
in the run. The action is recorded in the run's log with who asked, when
and --why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.controlCmd(cmd.Context(), args[0], func(ctx context.Context, conn *connection, runID string) (events.Envelope, error) {
				return lifecycle.Continue(ctx, conn.Bus, runID, lifecycle.By(), why)
			})
		},
	}
	cmd.Flags().StringVar(&why, "why", "", "the reason, recorded with the action")
	return cmd
}

type requeueFlags struct {
	outcomes, classes []string
	why               string
	resume            resumeFlags
}

func newRunsRequeue(g *globals) *cobra.Command {
	f := &requeueFlags{}
	cmd := &cobra.Command{
		Use:   "requeue RUN --outcome errored[,solver_timeout] [--class infra]",
		Short: "Run again the cells of a run that ended with the given outcomes, as new attempts of the same run",
		Long: `Run again, as new attempts within the same run, the cells whose outcome is
one of --outcome (errored, solver_timeout, verifier_timeout, verifier_error;
never a pass, a fail or a partial) and, for errored cells, whose class is one
of --class when given. The earlier attempts stay in the log; the artifact's
row is the last attempt's. On a run still running, the cells are queued at
once and the run finishes after them. On a run that ended, this process
continues it as 'runs resume' does (its services in-process unless --nats)
until the requeued cells end, then writes the artifact and report. The
action is recorded in the run's log with who asked, when and --why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.requeue(cmd.Context(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.outcomes, "outcome", nil, "outcomes to run again (comma-separated): errored, solver_timeout, verifier_timeout, verifier_error")
	fl.StringSliceVar(&f.classes, "class", nil, "only errored cells of these classes (comma-separated: build, sandbox, infra, solver_error, cancelled)")
	fl.StringVar(&f.why, "why", "", "the reason, recorded with the action")
	fl.StringVar(&f.resume.outJSON, "out-json", "", "for a run that ended: write the artifact here (default: the run's own path)")
	fl.StringVar(&f.resume.outMD, "out-md", "", "for a run that ended: write the report here (default: the run's own path)")
	fl.StringVar(&f.resume.node, "node", "", "for a run that ended: this machine's node name (default: host name)")
	fl.StringVar(&f.resume.imageMap, "image-map", "", "for a run that ended: image reference map file")
	fl.StringVar(&f.resume.sandbox, "sandbox", defaultSandbox, sandboxHelp())
	fl.IntVar(&f.resume.concurrency, "concurrency", launcher.DefaultConcurrency(), "for a run that ended: cells run at once")
	f.resume.limits.add(fl)
	return cmd
}

func (g *globals) requeue(ctx context.Context, arg string, f *requeueFlags) error {
	sel := lifecycle.Selector{Outcomes: f.outcomes, Classes: f.classes}
	if err := sel.Validate(); err != nil {
		return usageError{err}
	}
	conn, err := g.connect(ctx)
	if err != nil {
		return err
	}
	runID, err := g.resolveRun(ctx, conn.Bus, arg)
	if err != nil {
		conn.Close()
		return err
	}
	rec, err := conn.GetRun(ctx, runID)
	if err != nil {
		conn.Close()
		return err
	}
	if lifecycle.Live(rec, time.Now()) && !(conn.embedded != nil) {
		defer conn.Close()
		picked, err := lifecycle.RequeueLive(ctx, conn.Bus, runID, sel, lifecycle.By(), f.why)
		if err != nil {
			return lifecycleError(err)
		}
		if len(picked) == 0 {
			return usageError{fmt.Errorf("run %s: no done cell has outcome %s", runID, strings.Join(f.outcomes, ","))}
		}
		fmt.Fprintf(g.stdout, "run %s: %d cells requeued\n", runID, len(picked))
		for _, d := range picked {
			fmt.Fprintf(g.stdout, "  run again  %s: %s\n", textsafe.Line(d.CellID), textsafe.Line(d.Why))
		}
		return nil
	}
	// The run ended (or its process is gone): this process continues it.
	conn.Close()
	if f.resume.concurrency < 1 {
		return usageError{fmt.Errorf("--concurrency must be at least 1, not %d", f.resume.concurrency)}
	}
	own, err := g.connectOwner(ctx)
	if err != nil {
		return err
	}
	defer own.Close()
	dead := g.recoverDead(ctx, own)
	r, err := lifecycle.PrepareRequeue(ctx, own.Bus, runID, sel, time.Now())
	if err != nil {
		return lifecycleError(err)
	}
	if len(r.Again) == 0 {
		return usageError{fmt.Errorf("run %s: no cell has outcome %s", runID, strings.Join(f.outcomes, ","))}
	}
	if err := g.checkSandbox(f.resume.sandbox, r.Record.Spec.Harnesses); err != nil {
		return err
	}
	rf := f.resume
	sc := stackConfig{node: rf.node, concurrency: rf.concurrency, imageMap: rf.imageMap, sandbox: rf.sandbox, services: allServices, limits: rf.limits}
	final, err := g.drive(ctx, own, runID, r.Epoch, nil, dead, sc, func(ctx context.Context) error {
		if err := r.Requeued(ctx, own.Bus, lifecycle.By(), f.why); err != nil {
			return err
		}
		if err := r.Begin(ctx, own.Bus, lifecycle.Owner(), rf.outJSON, rf.outMD); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "run %s: requeued (epoch %d): %d of %d cells run again\n", runID, r.Epoch, len(r.Again), len(r.Cells))
		for _, d := range r.Again {
			fmt.Fprintf(g.stderr, "  run again  %s: %s\n", textsafe.Line(d.CellID), textsafe.Line(d.Why))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return g.printResult(final)
}

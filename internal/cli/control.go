package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/services/launcher"
)

// controlCmd runs one control action on the run RUN names (a live run),
// through the bus the command reaches as `runs show` does, and prints the
// action recorded.
func (g *globals) controlCmd(ctx context.Context, arg string, act func(ctx context.Context, conn *connection, runID string) (events.Envelope, error)) error {
	return g.controlCmdThen(ctx, arg, act, nil)
}

// controlCmdThen is controlCmd, then calls then (when set) with the
// stream sequence the log had reached before the action (SolveMark), to
// report what the services did of it.
func (g *globals) controlCmdThen(ctx context.Context, arg string, act func(ctx context.Context, conn *connection, runID string) (events.Envelope, error),
	then func(ctx context.Context, conn *connection, runID string, mark uint64) error) error {
	conn, runID, err := g.connectRun(ctx, arg)
	if err != nil {
		return err
	}
	defer conn.Close()
	var mark uint64
	if then != nil {
		if mark, err = lifecycle.SolveMark(ctx, conn.Bus, runID); err != nil {
			return err
		}
	}
	e, err := act(ctx, conn, runID)
	if err != nil {
		return lifecycleError(err)
	}
	var d events.RunControlData
	_ = events.Into(e, &d)
	msg := fmt.Sprintf("run %s: %s recorded at %s by %s", runID, d.Action, e.At.Format(time.RFC3339), d.By)
	if len(d.Cells) > 0 {
		msg += fmt.Sprintf(" (%d %s)", len(d.Cells), plural(len(d.Cells), "cell", "cells"))
	}
	if d.Why != "" {
		msg += ": " + d.Why
	}
	fmt.Fprintln(g.stdout, textsafe.Line(msg))
	if then != nil {
		return then(ctx, conn, runID, mark)
	}
	return nil
}

// reportFreezes prints, for pause --now, each running cell's SolveFrozen
// as its launcher records it, for up to wait; the cells that gave none
// are listed after.
func (g *globals) reportFreezes(ctx context.Context, conn *connection, runID string, mark uint64, wait time.Duration) error {
	p, err := projection.Project(ctx, conn.Bus, runID)
	if err != nil {
		return err
	}
	var running []string
	for _, id := range p.Cells() {
		if p.CellState(id) == projection.StateRunning {
			running = append(running, id)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	missing, err := lifecycle.AwaitSolves(wctx, conn.Bus, runID, mark, events.SolveFrozen, running, func(e events.Envelope) {
		var d events.SolveFrozenData
		if events.Into(e, &d) != nil {
			return
		}
		cell := e.CellID
		if d.Step != "" {
			cell += " step " + d.Step
		}
		var line string
		switch {
		case d.Frozen && d.Alive == 0 && d.Reason != "":
			line = fmt.Sprintf("  held        %s: %s", cell, d.Reason)
		case d.Frozen:
			line = fmt.Sprintf("  frozen      %s: %d processes stopped, its solve budget stopped (%s, node %s)", cell, d.Alive, d.Driver, d.Node)
		default:
			line = fmt.Sprintf("  not frozen  %s: %s", cell, d.Reason)
		}
		fmt.Fprintln(g.stdout, textsafe.Line(line))
	})
	if err != nil {
		return err
	}
	for _, c := range missing {
		fmt.Fprintln(g.stdout, textsafe.Line(fmt.Sprintf("  no answer   %s: not in its solve within %s (preparing or being verified: it finishes that phase; a solve that begins while paused waits for the continue)", c, wait)))
	}
	return nil
}

// reportThaws prints, for continue, the SolveThawed of each cell that was
// frozen, for up to wait.
func (g *globals) reportThaws(ctx context.Context, conn *connection, runID string, mark uint64, frozen []string, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	missing, err := lifecycle.AwaitSolves(wctx, conn.Bus, runID, mark, events.SolveThawed, frozen, func(e events.Envelope) {
		var d events.SolveThawedData
		if events.Into(e, &d) != nil {
			return
		}
		line := fmt.Sprintf("  thawed      %s after %.1fs frozen", e.CellID, d.FrozenSec)
		if d.Error != "" {
			line = fmt.Sprintf("  not thawed  %s after %.1fs frozen: %s", e.CellID, d.FrozenSec, d.Error)
		}
		fmt.Fprintln(g.stdout, textsafe.Line(line))
	})
	if err != nil {
		return err
	}
	for _, c := range missing {
		fmt.Fprintln(g.stdout, textsafe.Line(fmt.Sprintf("  no answer   %s: its launcher recorded no thaw within %s", c, wait)))
	}
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
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "pause RUN [--why TEXT] [--now [--wait D]]",
		Short: "Pause a running run: no new cell starts until runs continue",
		Long: `Pause a run that is running (here or on a cluster): no new cell starts;
running cells finish. Launchers hold the jobs of queued cells until the run
is continued ('proctor runs continue RUN') or cancelled.

With --now, the running solves are frozen too: where the sandbox driver can
(Docker), every process of the cell's sandbox is stopped and the solve's
budget (its timeout) stops with it until the continue; a solve about to
begin waits for the continue. A sandbox the driver cannot freeze (host
commands of the process driver) runs on. Each launcher records what it did
for each cell (SolveFrozen), and this command prints those answers as they
come, for up to --wait: frozen, held, not frozen (and why), or no answer (a
cell preparing or being verified finishes that phase).

The action is recorded in the run's log with who asked, when and --why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var then func(ctx context.Context, conn *connection, runID string, mark uint64) error
			if now {
				then = func(ctx context.Context, conn *connection, runID string, mark uint64) error {
					return g.reportFreezes(ctx, conn, runID, mark, wait)
				}
			}
			return g.controlCmdThen(cmd.Context(), args[0], func(ctx context.Context, conn *connection, runID string) (events.Envelope, error) {
				return lifecycle.Pause(ctx, conn.Bus, runID, now, lifecycle.By(), why)
			}, then)
		},
	}
	cmd.Flags().StringVar(&why, "why", "", "the reason, recorded with the action")
	cmd.Flags().BoolVar(&now, "now", false, "also freeze the running solves with their budgets, where the sandbox driver can (Docker)")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "with --now: how long to wait for the launchers' answers")
	return cmd
}

func newRunsContinue(g *globals) *cobra.Command {
	var why string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "continue RUN [--why TEXT] [--wait D]",
		Short: "Continue a paused run (paused by runs pause or by a spending cap)",
		Long: `Continue a run paused by 'proctor runs pause' or by one of its spending
caps (--max-cost-usd, --max-errored-fraction, --max-errored-per-task of
tasks run): held cells start again, and solves frozen by 'runs pause --now'
are thawed, their budgets running again (the command prints each thaw as its
launcher records it, for up to --wait). A cap that tripped does not trip
again in the run. The action is recorded in the run's log with who asked,
when and --why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var frozen []string
			return g.controlCmdThen(cmd.Context(), args[0], func(ctx context.Context, conn *connection, runID string) (events.Envelope, error) {
				var err error
				if frozen, err = lifecycle.FrozenSolves(ctx, conn.Bus, runID); err != nil {
					return events.Envelope{}, err
				}
				return lifecycle.Continue(ctx, conn.Bus, runID, lifecycle.By(), why)
			}, func(ctx context.Context, conn *connection, runID string, mark uint64) error {
				return g.reportThaws(ctx, conn, runID, mark, frozen, wait)
			})
		},
	}
	cmd.Flags().StringVar(&why, "why", "", "the reason, recorded with the action")
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the launchers' thaws of frozen solves")
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

// nothingPicked is the usage error of a requeue that picked no cell: what
// it asked for and what the run's cells are instead.
func (g *globals) nothingPicked(ctx context.Context, b *bus.Bus, runID string, sel lifecycle.Selector) error {
	why, err := lifecycle.NothingPicked(ctx, b, runID, sel)
	if err != nil {
		why = "no cell to run again has " + sel.String()
	}
	return usageError{fmt.Errorf("run %s: %s", runID, textsafe.Line(why))}
}

func (g *globals) requeue(ctx context.Context, arg string, f *requeueFlags) error {
	sel := lifecycle.Selector{Outcomes: f.outcomes, Classes: f.classes}
	if err := sel.Validate(); err != nil {
		return usageError{err}
	}
	conn, runID, err := g.connectRun(ctx, arg)
	if err != nil {
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
			return g.nothingPicked(ctx, conn.Bus, runID, sel)
		}
		fmt.Fprintf(g.stdout, "run %s: %d %s requeued\n", runID, len(picked), plural(len(picked), "cell", "cells"))
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
	r, err := lifecycle.PrepareRequeue(ctx, own.Bus, runID, sel, time.Now(), g.getenv)
	if err != nil {
		return lifecycleError(err)
	}
	if len(r.Again) == 0 {
		return g.nothingPicked(ctx, own.Bus, runID, sel)
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

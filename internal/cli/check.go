package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/atomicfile"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/taskcheck"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/services/launcher"
)

// errCheckFailed is returned by tasks check when a task's verdict is FAIL
// (exit code 1).
var errCheckFailed = errors.New("tasks check: at least one task FAILs")

type checkFlags struct {
	run     runFlags
	outJSON string
	outMD   string
	checks  []string
}

func newTasksCheck(g *globals) *cobra.Command {
	f := &checkFlags{}
	cmd := &cobra.Command{
		Use:   "check --tasks-root DIR (--tasks a,b | --all) [--checks c,d] [--image-map F] [--repeats N] [--out-json F] [--out-md F]",
		Short: "Check that tasks are sound: static checks, the oracle passes, doing nothing fails, no cheat passes",
		Long: `Check every selected task before anyone pays for a sweep. Static checks read
the task's files; the oracle (every repeat, and its verifier's time against
the budget), an agent that does nothing and the adversarial agents of the
cheat registry run as cells of one ordinary run (runs, replay, view and
datasets see it), and so does the isolation probe (docker-probe) in the
sandbox an agent arm gets. --checks runs only the checks named (the others
are SKIP "not selected"; static always runs). Each task gets the worst verdict of its findings
(FAIL > WARN > PASS; SKIP is a check not run). Writes the QC report as JSON
(--out-json) and Markdown (--out-md), by default check.json and check.md in
the run's directory. Exit code 1 when any task FAILs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.tasksCheck(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run.tasksRoot, "tasks-root", "", "directory holding task directories (required)")
	fl.StringSliceVar(&f.run.tasks, "tasks", nil, "task names to check (comma-separated)")
	fl.BoolVar(&f.run.all, "all", false, "check every task under --tasks-root")
	fl.IntVar(&f.run.repeats, "repeats", 1, "attempts per check cell (2 or more to see a flaky oracle)")
	fl.IntVar(&f.run.concurrency, "concurrency", launcher.DefaultConcurrency(), "cells run at once")
	fl.StringVar(&f.run.outputDir, "output-dir", "proctor-out", "directory for cell outputs; the run gets <output-dir>/<run-id>/")
	fl.StringSliceVar(&f.checks, "checks", nil, "run only these checks (comma-separated): "+strings.Join(taskcheck.CheckNames(), ", ")+" (default all; static always runs)")
	fl.StringVar(&f.run.probeTgts, "probe-targets", g.getenv(harness.ProbeTargetsEnv), probeTargetsHelp)
	fl.StringVar(&f.outJSON, "out-json", "", "write the QC report as JSON here (default <output-dir>/<run-id>/check.json)")
	fl.StringVar(&f.outMD, "out-md", "", "write the QC report as Markdown here (default <output-dir>/<run-id>/check.md)")
	fl.StringVar(&f.run.imageMap, "image-map", g.getenv("PROCTOR_IMAGE_MAP"), "file mapping image references (registry mirror, local stand-ins); env PROCTOR_IMAGE_MAP")
	fl.StringVar(&f.run.node, "node", "", "this machine's node name (default: host name)")
	fl.StringVar(&f.run.agentUser, "agent-user", harness.AgentUserSealed, agentUserHelp)
	fl.Float64Var(&f.run.agentGrace, "agent-grace", 10, "seconds an agent gets between SIGTERM at its deadline and SIGKILL")
	f.run.limits.add(fl)
	f.run.models = []string{"default"}
	return cmd
}

func (g *globals) tasksCheck(ctx context.Context, f *checkFlags) error {
	plan, err := taskcheck.NewPlan().Select(f.checks)
	if err != nil {
		return usageError{err}
	}
	runID := events.NewID()
	f.run.harnesses = harnessList{vals: []string{"oracle"}}
	spec, err := f.run.spec(runID)
	if err != nil {
		return err
	}
	// The tasks first (the matrix with the oracle alone): the cheats'
	// hints and the static checks read their files.
	cells, err := g.matrix(spec)
	if err != nil {
		return err
	}
	g.warnNotes(spec)
	var tasks []*task.Task
	static := map[string][]taskcheck.Finding{}
	for _, c := range cells {
		if _, ok := static[c.Task.Name]; !ok {
			tasks = append(tasks, c.Task)
			static[c.Task.Name] = taskcheck.Static(c.Task)
		}
	}
	agents := filepath.Join(spec.OutputDir, ".check")
	if _, err := taskcheck.WriteAgents(agents, tasks, plan.Cheats); err != nil {
		return fmt.Errorf("writing the check agents: %w", err)
	}
	spec.BaseDir = agents // agent:noop, agent:cheat-NAME resolve here
	var rep taskcheck.Report
	if spec.Harnesses = plan.Harnesses(); len(spec.Harnesses) == 0 {
		// --checks static: nothing to run, no run recorded.
		rep = taskcheck.Evaluate(plan, tasks, static, nil)
		if err := os.MkdirAll(spec.OutputDir, 0o755); err != nil {
			return err
		}
	} else {
		if cells, err = g.matrix(spec); err != nil {
			return err
		}
		g.warnTasks(cells)
		rec, err := g.execute(ctx, runID, spec, cells, &f.run)
		if err != nil {
			return err
		}
		if err := g.printResult(rec); err != nil {
			return err
		}
		a, err := artifact.Read(rec.Artifact)
		if err != nil {
			return fmt.Errorf("reading the check run's artifact: %w", err)
		}
		rep = taskcheck.Evaluate(plan, tasks, static, a.Results)
		rep.RunID = runID
	}
	outJSON, outMD := f.outJSON, f.outMD
	if outJSON == "" {
		outJSON = filepath.Join(spec.OutputDir, "check.json")
	}
	if outMD == "" {
		outMD = filepath.Join(spec.OutputDir, "check.md")
	}
	if err := atomicfile.Write(outJSON, rep.WriteJSON); err != nil {
		return err
	}
	if err := atomicfile.Write(outMD, rep.WriteMarkdown); err != nil {
		return err
	}
	if err := writeCheckSummary(g.stdout, rep); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "check json: %s\ncheck report: %s\n", outJSON, outMD)
	if rep.Failed() {
		return errCheckFailed
	}
	return nil
}

// writeCheckSummary writes what tasks check prints after its run: the
// verdicts counted, then one line a task: its verdict, its name and, when
// a check decided it, that check with its finding (what to fix), every
// line shown through textsafe.Line.
func writeCheckSummary(w io.Writer, rep taskcheck.Report) error {
	counts := map[taskcheck.Verdict]int{}
	for _, t := range rep.Tasks {
		counts[t.Verdict]++
	}
	fmt.Fprintf(w, "tasks check: %d %s: %d FAIL, %d WARN, %d PASS\n", len(rep.Tasks), plural(len(rep.Tasks), "task", "tasks"), counts[taskcheck.Fail], counts[taskcheck.Warn], counts[taskcheck.Pass])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, t := range rep.Tasks {
		fmt.Fprintln(tw, textsafe.Line(fmt.Sprintf("%s\t%s\t%s", t.Verdict, t.Task, t.Why())))
	}
	return tw.Flush()
}

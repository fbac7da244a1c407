package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/subject"
)

type subjectFlags struct {
	harnesses harnessList
	baseline  string
	models    []string
	repeats   int
	dryRun    bool
	skip      bool
	outputDir string
	outJSON   string
}

func newSubjects(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "subjects", Short: "Run a subject's work suite (the task-runs seed's subject descriptors) and write its scorecard"}
	cmd.AddCommand(newSubjectsRun(g))
	return cmd
}

func newSubjectsRun(g *globals) *cobra.Command {
	f := &subjectFlags{}
	cmd := &cobra.Command{
		Use:   "run DESCRIPTOR.toml (--work-harnesses H,... | --skip-work)",
		Short: "Run a subject descriptor's work suite through tasks run and write the subject scorecard",
		Long: `Read a subject descriptor (TOML: baseline, [subject] id/kind/ref, [suite]
products/questions/tasks, [[matrix.cells]]), run its suite.tasks through the same
pipeline as tasks run (one run in the event log: resumable, in the viewer) and write
the subject scorecard: JSON (schemas/subject_scorecard.v1.schema.json) and a Markdown
page beside it. A descriptor that declares tasks needs --work-harnesses or
--skip-work. suite.questions (the judged Q&A track) is recorded as not run.
See docs/subjects.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.subjectsRun(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.Var(&f.harnesses, "work-harnesses", "harnesses of the work suite, as tasks run --harnesses takes them (comma-separated; repeatable)")
	fl.StringVar(&f.baseline, "work-baseline-harness", "", "the work suite's baseline harness (added when --work-harnesses lacks it)")
	fl.StringSliceVar(&f.models, "work-model", []string{"default"}, "model name(s) of the work suite")
	fl.IntVar(&f.repeats, "work-repeats", 1, "attempts per (task, harness, model) of the work suite")
	fl.BoolVar(&f.dryRun, "work-dry-run", false, "plan the work suite and write the scorecard from its planned artifact; run nothing")
	fl.BoolVar(&f.skip, "skip-work", false, "do not run the work suite; the scorecard says it was skipped")
	fl.StringVar(&f.outputDir, "output-dir", "proctor-out", "directory for the work run and the scorecard")
	fl.StringVar(&f.outJSON, "out-json", "", "write the scorecard here (default <output-dir>/<subject id>.scorecard.json); its Markdown page goes beside it")
	return cmd
}

// subjectsRun runs `subjects run`: the descriptor checked before anything
// runs, the work suite run (or planned, or skipped) through tasks run,
// and the scorecard written whatever the work's status; a failed work
// suite is an error after the scorecard is written.
func (g *globals) subjectsRun(cmd *cobra.Command, path string, f *subjectFlags) error {
	d, err := subject.Load(path)
	if err != nil {
		return usageError{err}
	}
	work := f.harnesses.set
	switch {
	case work && f.skip:
		return usageError{fmt.Errorf("pass --work-harnesses or --skip-work, not both")}
	case d.TasksRoot != "" && !work && !f.skip:
		return usageError{fmt.Errorf("%s declares %d tasks (suite.tasks): pass --work-harnesses H,... to run them, or --skip-work", d.File, len(d.TaskNames))}
	case d.TasksRoot == "" && work:
		return usageError{fmt.Errorf("%s: key suite.tasks: no tasks to run with --work-harnesses", d.File)}
	}
	out, err := filepath.Abs(f.outputDir)
	if err != nil {
		return err
	}
	card := f.outJSON
	if card == "" {
		card = filepath.Join(out, d.Subject.ID+".scorecard.json")
	}
	if card, err = filepath.Abs(card); err != nil {
		return err
	}
	var w subject.Work
	var runErr error
	switch {
	case f.skip:
		w = subject.Work{Status: subject.WorkSkipped, Reason: "--skip-work"}
	case d.TasksRoot == "":
		w = subject.Work{Status: subject.WorkSkipped, Reason: "the descriptor declares no tasks (suite.tasks)"}
	default:
		dir := filepath.Join(out, d.Subject.ID)
		w.Artifact = filepath.Join(dir, "task_runs.json")
		args := []string{"--tasks-root", d.TasksRoot, "--tasks", strings.Join(d.TaskNames, ","), "--output-dir", dir,
			"--out-json", w.Artifact, "--repeats", strconv.Itoa(f.repeats)}
		for _, h := range f.harnesses.vals {
			args = append(args, "--harnesses", h)
		}
		for _, m := range f.models {
			args = append(args, "--model", m)
		}
		if f.baseline != "" {
			args = append(args, "--baseline-harness", f.baseline)
		}
		if f.dryRun {
			args = append(args, "--dry-run")
		} else {
			w.Report = artifact.ReportPath(w.Artifact)
		}
		run := newTasksRun(g)
		run.SetArgs(args)
		run.SetContext(cmd.Context())
		run.SilenceErrors, run.SilenceUsage = true, true
		_ = os.Remove(w.Artifact) // an earlier run's must not be taken for this one's
		runErr = run.Execute()
		a, aerr := artifact.Read(w.Artifact)
		switch {
		case runErr != nil:
			w.Status, w.Reason = subject.WorkFailed, runErr.Error()
			if aerr == nil {
				w.Rollup(a)
			} else {
				w.Artifact, w.Report = "", ""
			}
		case aerr != nil:
			w.Status, w.Reason, w.Artifact, w.Report = subject.WorkFailed, "the work run wrote no artifact: "+aerr.Error(), "", ""
			runErr = aerr
		default:
			w.Status = subject.WorkRan
			if f.dryRun {
				w.Status = subject.WorkDryRun
			}
			w.Rollup(a)
		}
	}
	sc := subject.New(d, w)
	md, err := subject.WriteFiles(card, sc)
	if err != nil {
		return fmt.Errorf("write the scorecard: %w", err)
	}
	fmt.Fprintf(g.stdout, "subject %s: work %s\nscorecard: %s\npage:      %s\n", d.Subject.ID, w.Status, card, md)
	if runErr != nil {
		return fmt.Errorf("subject %s: the work suite failed: %w", d.Subject.ID, runErr)
	}
	return nil
}

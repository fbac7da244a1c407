package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/dataset"
	"github.com/proctor-eval/proctor/pkg/projection"
)

func newDataset(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dataset", Short: "Export results as datasets for notebooks (JSONL, Parquet, Hugging Face)"}
	cmd.AddCommand(newDatasetExport(g))
	return cmd
}

func newDatasetExport(g *globals) *cobra.Command {
	var kind, input, runArg, outDir, format string
	cmd := &cobra.Command{
		Use:   "export --kind task_runs (--input ARTIFACT | --run RUN) --out-dir DIR --format jsonl|parquet|hf",
		Short: "Write one row per cell of a task_runs.v1 artifact as JSONL, Parquet or a Hugging Face dataset",
		Long: `Write one row per cell (telemetry promoted to metric_* columns, task metadata
columns, the metrics and operations blocks as JSON strings; see
pkg/dataset/SCHEMA.md) into --out-dir:

  jsonl    task_runs.jsonl
  parquet  task_runs.parquet (zstd, typed nullable columns: a missing value is null, never 0)
  hf       data-00000-of-00001.arrow, dataset_info.json, state.json
           (datasets.load_from_disk(DIR) reads it)

The rows come from --input (an artifact file, validated against task_runs.v1)
or from --run (the run's events projected as 'proctor replay' does).
--kind events writes the raw log of --run instead (events.jsonl or
events.parquet; formats jsonl and parquet), as 'proctor events export' does.
The written paths are printed, one per line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if outDir == "" {
				return usageError{errors.New("--out-dir is required")}
			}
			switch kind {
			case "task_runs":
				if !slices.Contains(dataset.TaskRunFormats(), format) {
					return usageError{fmt.Errorf("--format %q: want one of %s", format, strings.Join(dataset.TaskRunFormats(), ", "))}
				}
				if (input == "") == (runArg == "") {
					return usageError{errors.New("pass exactly one of --input ARTIFACT and --run RUN")}
				}
			case "events":
				if !slices.Contains(dataset.EventFormats(), format) {
					return usageError{fmt.Errorf("--format %q: want one of %s for --kind events", format, strings.Join(dataset.EventFormats(), ", "))}
				}
				if runArg == "" || input != "" {
					return usageError{errors.New("--kind events reads the log: pass --run RUN (not --input)")}
				}
			default:
				return usageError{fmt.Errorf("--kind %q: want task_runs or events", kind)}
			}
			ctx := cmd.Context()
			var a *artifact.Artifact
			if input != "" {
				var err error
				if a, err = artifact.Read(input); err != nil {
					return err
				}
			} else {
				conn, id, err := g.openRun(ctx, runArg)
				if err != nil {
					return err
				}
				defer conn.Close()
				if kind == "events" {
					path := filepath.Join(outDir, "events."+format)
					n, err := g.exportEvents(ctx, conn.Bus, id, format, path)
					if err != nil {
						return err
					}
					fmt.Fprintln(g.stdout, path)
					fmt.Fprintf(g.stderr, "exported %d events of run %s\n", n, id)
					return nil
				}
				p, err := projection.Project(ctx, conn.Bus, id)
				if err != nil {
					return err
				}
				js, _, err := projection.Render(p, version())
				if err != nil {
					return err
				}
				if a, err = artifact.Unmarshal("run "+id, js); err != nil {
					return err
				}
			}
			paths, err := dataset.ExportTaskRuns(a, outDir, format)
			if err != nil {
				return err
			}
			for _, p := range paths {
				fmt.Fprintln(g.stdout, p)
			}
			fmt.Fprintf(g.stderr, "exported %d rows of run %s as %s\n", len(a.Results), a.Run.ID, format)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kind, "kind", "task_runs", "task_runs (one row per cell) or events (one row per event)")
	fl.StringVar(&input, "input", "", "task_runs.v1 artifact file to export")
	fl.StringVar(&runArg, "run", "", "export this run from the event log instead of an artifact file")
	fl.StringVar(&outDir, "out-dir", "", "directory to write into (created when missing)")
	fl.StringVar(&format, "format", dataset.FormatParquet, "jsonl, parquet or hf (events: jsonl or parquet)")
	return cmd
}

package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/projection"
)

func newReport(g *globals) *cobra.Command {
	var outMD string
	cmd := &cobra.Command{
		Use:   "report ARTIFACT.json [--out-md F]",
		Short: "Render the Markdown report of a task_runs.v1 artifact file",
		Long: `Read a task_runs.v1 artifact file (checked against the schema first: a file
that does not validate fails with its path and the first violation) and write
its Markdown report with its SVG figures, as tasks run writes them: the same
artifact gives the same bytes. An artifact written by an older proctor
renders too; what it does not hold (an agent's claim, a difficulty) is left
out of the report.

The report goes beside the artifact with its extension replaced by .md
(results/x.json → results/x.md) unless --out-md says where ("-" = stdout);
the figures are written beside the report (not with --out-md -).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := artifact.Read(args[0])
			if err != nil {
				return err
			}
			md, figs, err := artifact.ReportWithFigures(a)
			if err != nil {
				return fmt.Errorf("report of %s: %w", args[0], err)
			}
			if outMD == "" {
				outMD = artifact.ReportPath(args[0])
			}
			if err := g.writeOutput(outMD, func(w io.Writer) error { _, err := w.Write(md); return err }); err != nil {
				return err
			}
			if outMD != "-" {
				if err := projection.WriteFigures(outMD, figs); err != nil {
					return err
				}
				fmt.Fprintf(g.stderr, "report:   %s\n", outMD)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&outMD, "out-md", "", `write the report here (default: beside ARTIFACT.json, .json replaced by .md; "-" = stdout)`)
	return cmd
}

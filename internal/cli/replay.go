package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/projection"
)

func newReplay(g *globals) *cobra.Command {
	var outJSON, outMD string
	cmd := &cobra.Command{
		Use:   "replay RUN [--out-json F] [--out-md F]",
		Short: "Re-project a run's stored events into its task_runs.v1 artifact and report",
		Long: `Read every stored event of RUN (a run id, or a unique prefix of one in the run
index) from the event log and project it into the task_runs.v1 artifact and
the Markdown report, exactly as the aggregator does: for a finished run the
bytes equal the artifact it wrote. A run whose process died mid-run is
projected as far as it got: every cell with a terminal event keeps its
outcome, the others are errored rows (class infra).

With neither --out-json nor --out-md the artifact is written to stdout; "-"
also means stdout. The report links the run's SVG figures by file name, as
the aggregator's does; with --out-md FILE they are written beside FILE
(with --out-md - the links are printed but no figure is written). Replay only reads: the run index and the run's own files
are left as they are. It works on any store: a copy of $PROCTOR_HOME/jetstream
(PROCTOR_HOME pointed at its parent), a store imported with 'proctor events
import', or a cluster given with --nats.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			conn, id, err := g.openRun(ctx, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			p, err := projection.Project(ctx, conn.Bus, id)
			if err != nil {
				return err
			}
			js, md, figs, err := projection.RenderWithFigures(p, version())
			if err != nil {
				return err
			}
			if outJSON == "" && outMD == "" {
				outJSON = "-"
			}
			for _, o := range []struct {
				path string
				data []byte
			}{{outJSON, js}, {outMD, md}} {
				if o.path == "" {
					continue
				}
				if err := g.writeOutput(o.path, func(w io.Writer) error { _, err := w.Write(o.data); return err }); err != nil {
					return err
				}
			}
			if outMD != "" && outMD != "-" {
				if err := projection.WriteFigures(outMD, figs); err != nil {
					return err
				}
			}
			rec := p.Record()
			fmt.Fprintf(g.stderr, "replayed run %s (%s): %d cells: %s\n", id, rec.Status, len(p.Cells()), countsText(rec.Counts))
			if !p.Finished() {
				fmt.Fprintf(g.stderr, "the run has no RunFinished event: cells without a terminal event are errored rows\n")
			}
			for _, f := range []struct{ what, path string }{{"artifact", outJSON}, {"report", outMD}} {
				if f.path != "" && f.path != "-" {
					fmt.Fprintf(g.stderr, "%-9s %s\n", f.what+":", f.path)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&outJSON, "out-json", "", `write the task_runs.v1 artifact here ("-" = stdout)`)
	cmd.Flags().StringVar(&outMD, "out-md", "", `write the Markdown report here ("-" = stdout)`)
	return cmd
}

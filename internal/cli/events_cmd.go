package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/dataset"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

func newEvents(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Export a run's raw event log, or import one into this store"}
	cmd.AddCommand(newEventsExport(g), newEventsImport(g))
	return cmd
}

func newEventsExport(g *globals) *cobra.Command {
	var format, out string
	cmd := &cobra.Command{
		Use:   "export RUN --format jsonl|parquet [--out F]",
		Short: "Write every stored event of a run, in log order, as JSONL or Parquet",
		Long: `Write every stored event of RUN (a run id or a unique prefix), in log order,
to --out (default "-", stdout). jsonl writes one event envelope per line,
exactly as stored: the file 'proctor events import' reads on another
machine. parquet writes one row per event (id, run_id, cell_id, attempt,
type, at, source, data as a JSON string, plus usage_* columns of Usage
events and command_exit_code of Command events), zstd-compressed; see
pkg/dataset/SCHEMA.md for the columns. The log is streamed, never held in
memory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(dataset.EventFormats(), format) {
				return usageError{fmt.Errorf("--format %q: want one of %s", format, strings.Join(dataset.EventFormats(), ", "))}
			}
			ctx := cmd.Context()
			conn, id, err := g.openRun(ctx, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			n, err := g.exportEvents(ctx, conn.Bus, id, format, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "exported %d events of run %s as %s to %s\n", n, id, format, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", dataset.FormatJSONL, "jsonl or parquet")
	cmd.Flags().StringVarP(&out, "out", "o", "-", `output file ("-" = stdout)`)
	return cmd
}

func newEventsImport(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Publish the events of a jsonl export into this store and index their runs",
		Long: `Read a jsonl file written by 'proctor events export' (FILE, or "-" for stdin)
and publish its events, in file order and with their own ids, into this
store's event log, streaming (the file is never held in memory); then write
a run index record for each run in the file, so that 'proctor replay', 'runs
show' and 'watch' work on this machine. A run that already has events in
this log is refused at its first event (none of its events is published;
runs before it in the file are imported): the stream drops a re-published
id only within its duplicate window (2 minutes), so importing twice would
duplicate the log. The record's status is the run's RunFinished status, or
"interrupted" when the file has none; its artifact paths are empty (replay
writes where you ask).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := io.Reader(os.Stdin)
			name := "stdin"
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in, name = f, args[0]
			}
			ctx := cmd.Context()
			conn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			var runs []string
			n := 0
			err = dataset.ScanEventsJSONL(in, func(e events.Envelope) error {
				if !slices.Contains(runs, e.RunID) {
					seq, err := conn.LastSeq(ctx, events.RunFilter(e.RunID))
					if err != nil {
						return err
					}
					if seq != 0 {
						return fmt.Errorf("run %s is already in the log of %s; its events were not imported", e.RunID, g.storeName())
					}
					runs = append(runs, e.RunID)
				}
				n++
				return conn.Publish(ctx, e)
			})
			if ferr := conn.Flush(ctx); err == nil {
				err = ferr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if n == 0 {
				return fmt.Errorf("%s: no events", name)
			}
			for _, id := range runs {
				p, err := projection.Project(ctx, conn.Bus, id)
				if err != nil {
					return err
				}
				rec := p.Record()
				if !terminalStatus(rec.Status) {
					rec.Status = bus.StatusInterrupted
					if rec.Error == "" {
						rec.Error = "imported without RunFinished: the run had not ended when it was exported"
					}
				}
				if err := conn.PutRun(ctx, rec); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "imported run %s (%s): %d cells: %s\n", textsafe.Line(id), rec.Status, len(p.Cells()), countsText(rec.Counts))
			}
			fmt.Fprintf(g.stderr, "published %d events from %s\n", n, name)
			return nil
		},
	}
	return cmd
}

// exportEvents streams every stored event of a run into path ("-" =
// stdout) in format (dataset.EventFormats) and returns how many it wrote.
func (g *globals) exportEvents(ctx context.Context, b *bus.Bus, runID, format, path string) (int, error) {
	n := 0
	err := g.writeOutput(path, func(w io.Writer) error {
		ew, err := dataset.NewEventWriter(w, format)
		if err != nil {
			return err
		}
		if err := b.ReadRun(ctx, runID, func(e events.Envelope) error { n++; return ew.Write(e) }); err != nil {
			return err
		}
		return ew.Close()
	})
	return n, err
}

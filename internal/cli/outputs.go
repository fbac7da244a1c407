package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/atomicfile"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// outputFetcher materialises the stored output directories of one run's
// cells (each Verdict's events.OutputObject) under an output directory:
// each cell's at its planned path, or at the same place relative to
// outDir when that is given. Each object is fetched once.
type outputFetcher struct {
	b       *bus.Bus
	runID   string
	specOut string       // the run's --output-dir, as planned
	outDir  string       // where to materialise ("": specOut)
	log     *slog.Logger // each transient failure retried (nil: none)

	mu      sync.Mutex
	store   jetstream.ObjectStore
	fetched map[string]bool // object names
}

func newOutputFetcher(ctx context.Context, b *bus.Bus, runID, outDir string) (*outputFetcher, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return &outputFetcher{b: b, runID: runID, specOut: rec.Spec.OutputDir, outDir: outDir, fetched: map[string]bool{}}, nil
}

// dest is where the cell planned at plannedDir is materialised.
func (f *outputFetcher) dest(plannedDir string) (string, error) {
	if f.outDir == "" || f.outDir == f.specOut {
		return plannedDir, nil
	}
	rel, err := filepath.Rel(f.specOut, plannedDir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("cell directory %s is not under the run's output directory %s", plannedDir, f.specOut)
	}
	return filepath.Join(f.outDir, rel), nil
}

// outputRetry bounds how long the fetch of one output is retried while
// the bus fails transiently.
const outputRetry = 2 * time.Minute

// fetch materialises o, the stored output of the cell planned at
// plannedDir, unless it was already. A transient bus failure (a NATS node
// lost, the bucket's stream leader moving) is retried (bus.Retry) for up
// to outputRetry: FetchOutput replaces dest only with a whole, checked
// tree, so a try cut short leaves nothing behind.
func (f *outputFetcher) fetch(ctx context.Context, o events.OutputObject, plannedDir string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fetched[o.Object] {
		return false, nil
	}
	dest, err := f.dest(plannedDir)
	if err != nil {
		return false, err
	}
	rctx, cancel := context.WithTimeout(ctx, outputRetry)
	defer cancel()
	err = bus.Retry(rctx, f.log, "fetch output "+o.Object, func(context.Context) error {
		// Each try runs on ctx, not rctx: without a deadline the
		// JetStream client bounds each of its requests by its own
		// timeout, and a large output's transfer is not cut short.
		if f.store == nil {
			s, err := trees.Lookup(ctx, f.b)
			if err != nil {
				return err
			}
			f.store = s
		}
		return trees.FetchOutput(ctx, f.store, trees.Output{Name: o.Object, Digest: o.Digest}, dest)
	})
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, fmt.Errorf("%w (proctor gc removes the stored outputs of ended runs)", err)
	}
	if err != nil {
		return false, err
	}
	f.fetched[o.Object] = true
	return true, nil
}

// outputOf is the stored output a terminal event names (a Verdict's or
// a CellErrored's), nil when none.
func outputOf(e events.Envelope) *events.OutputObject {
	switch e.Type {
	case events.Verdict:
		var v events.VerdictData
		if events.Into(e, &v) == nil {
			return v.Output
		}
	case events.CellErrored:
		var d events.CellErroredData
		if events.Into(e, &d) == nil {
			return d.Output
		}
	}
	return nil
}

// follow fetches each cell's output as its Verdict or CellErrored naming
// one is published, until ctx ends; a fetch that fails is left to all.
func (f *outputFetcher) follow(ctx context.Context) {
	prefix := "proctor.run." + f.runID + ".cell.*."
	_ = f.b.Follow(ctx, []string{prefix + string(events.Verdict), prefix + string(events.CellErrored)}, func(e events.Envelope) error {
		o := outputOf(e)
		if o == nil {
			return nil
		}
		pe, err := f.b.LastEvent(ctx, events.CellSubject(f.runID, e.CellID, events.CellPlanned))
		if err != nil {
			return nil
		}
		var plan events.CellPlannedData
		if events.Into(pe, &plan) != nil {
			return nil
		}
		_, _ = f.fetch(ctx, *o, plan.OutputDir)
		return nil
	})
}

// all fetches the output of every cell whose last terminal event (a
// Verdict or CellErrored) names one (the output of an earlier attempt
// never is), and returns how many it fetched, how many cells named a
// stored output, and the cells that failed.
func (f *outputFetcher) all(ctx context.Context) (fetched, stored int, err error) {
	var plans map[string]string
	var last map[string]events.Envelope
	var order []string
	// The read is retried whole while the bus fails transiently (a NATS
	// node lost as the run ends), for up to outputRetry.
	rctx, cancel := context.WithTimeout(ctx, outputRetry)
	defer cancel()
	err = bus.Retry(rctx, f.log, "read run "+f.runID, func(context.Context) error {
		plans, last, order = map[string]string{}, map[string]events.Envelope{}, nil
		return f.read(ctx, plans, last, &order)
	})
	if err != nil {
		return 0, 0, err
	}
	return f.fetchAll(ctx, order, plans, last)
}

// read reads the run's log into the cells' planned directories (in
// order of planning) and their last terminal events.
func (f *outputFetcher) read(ctx context.Context, plans map[string]string, last map[string]events.Envelope, order *[]string) error {
	return f.b.ReadRun(ctx, f.runID, func(e events.Envelope) error {
		switch e.Type {
		case events.CellPlanned:
			var p events.CellPlannedData
			if events.Into(e, &p) == nil {
				if _, ok := plans[e.CellID]; !ok {
					*order = append(*order, e.CellID)
				}
				plans[e.CellID] = p.OutputDir
			}
		case events.Verdict, events.CellErrored, events.CellRefused:
			if l, ok := last[e.CellID]; !ok || e.Attempt >= l.Attempt {
				last[e.CellID] = e
			}
		}
		return nil
	})
}

// fetchAll fetches the output of each cell of order whose last terminal
// event names one, and returns how many it fetched and how many named
// one. Outputs no longer in the bucket (gc removed them) are counted in
// one error, not one line a cell.
func (f *outputFetcher) fetchAll(ctx context.Context, order []string, plans map[string]string, last map[string]events.Envelope) (n, stored int, err error) {
	var errs []error
	gone := 0
	defer func() {
		if gone > 0 {
			err = errors.Join(append([]error{fmt.Errorf("%d of the run's %d stored cell %s %s no longer in the bucket: proctor gc removes the stored outputs of ended runs "+
				"(the run's artifact and report are rebuilt from its log by proctor replay %s)", gone, stored, plural(stored, "output", "outputs"), plural(gone, "is", "are"), f.runID)}, errs...)...)
		}
	}()
	for _, cell := range order {
		e, ok := last[cell]
		if !ok {
			continue
		}
		o := outputOf(e)
		if o == nil {
			continue
		}
		stored++
		got, err := f.fetch(ctx, *o, plans[cell])
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			gone++
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cell %s: %w", cell, err))
			continue
		}
		if got {
			n++
		}
	}
	return n, stored, errors.Join(errs...)
}

func newRunsFetch(g *globals) *cobra.Command {
	var outDir string
	cmd := &cobra.Command{
		Use:   "fetch RUN [--output-dir D]",
		Short: "Write the output directories a cluster stored for a run's cells under the output directory",
		Long: `Fetch from the cluster's PROCTOR_TREES bucket the output directory of every
cell of RUN whose verdict or errored event names a stored one (a run served
by 'proctor serve' workers stores each cell's logs, stream and work tree
there before its verdict, or before the event that errors it), check its
digest and write it at the cell's directory under the run's output
directory (the driver's <output-dir>/<run-id>), or, with --output-dir D,
under D/<run-id> as 'tasks run --output-dir D' lays a run out, replacing
what was there. RUN is a run id or a unique prefix of one. Cells of a
single-process run were written in place and have nothing stored.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			conn, id, err := g.connectRun(ctx, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			if outDir != "" {
				// D holds runs, as tasks run's --output-dir does: the
				// run's cells go under D/<run id>, never straight into D
				// where another run's fetch would replace them.
				if outDir, err = filepath.Abs(outDir); err != nil {
					return err
				}
				outDir = filepath.Join(outDir, id)
			}
			f, err := newOutputFetcher(ctx, conn.Bus, id, outDir)
			if err != nil {
				return err
			}
			n, stored, err := f.all(ctx)
			where := f.outDir
			if where == "" {
				where = f.specOut
			}
			if stored == 0 && err == nil {
				fmt.Fprintf(g.stdout, "run %s: no cell has a stored output, so there is nothing to fetch: a run of one process writes each cell's directory in place, under %s\n", id, f.specOut)
				return nil
			}
			fmt.Fprintf(g.stdout, "run %s: %d cell %s written under %s\n", id, n, plural(n, "output", "outputs"), where)
			return err
		},
	}
	cmd.Flags().StringVar(&outDir, "output-dir", "", "directory of runs to write the cells' outputs under: the run gets <output-dir>/<run-id>/ (default: the run's own output directory)")
	return cmd
}

// writeResultsHere writes the run's artifact and report (with their
// figures) at the spec's paths on this machine when they are not there:
// on a cluster the aggregator writes them on its own disk, which the
// driver may not share. They are rendered from the log, as `replay` does,
// so they are the aggregator's bytes.
func (g *globals) writeResultsHere(ctx context.Context, b *bus.Bus, runID string) error {
	// The projection reads the whole log; it is read again while the bus
	// fails transiently (a NATS node lost as the run ends).
	var p *projection.Projector
	rctx, cancel := context.WithTimeout(ctx, outputRetry)
	defer cancel()
	err := bus.Retry(rctx, nil, "read run "+runID, func(context.Context) error {
		var err error
		p, err = projection.Project(ctx, b, runID)
		return err
	})
	if err != nil {
		return err
	}
	jsPath, mdPath := projection.Paths(p.Spec())
	if _, err := os.Stat(jsPath); err == nil {
		return nil // the aggregator's disk is this one
	}
	js, md, figs, err := projection.RenderWithFigures(p, version())
	if err != nil {
		return err
	}
	if err := projection.WriteFigures(mdPath, figs); err != nil {
		return err
	}
	for path, data := range map[string][]byte{jsPath: js, mdPath: md} {
		if err := atomicfile.WriteBytes(path, data); err != nil {
			return err
		}
	}
	return nil
}

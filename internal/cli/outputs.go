package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
	specOut string // the run's --output-dir, as planned
	outDir  string // where to materialise ("": specOut)

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

// fetch materialises o, the stored output of the cell planned at
// plannedDir, unless it was already.
func (f *outputFetcher) fetch(ctx context.Context, o events.OutputObject, plannedDir string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fetched[o.Object] {
		return false, nil
	}
	if f.store == nil {
		s, err := trees.Lookup(ctx, f.b)
		if err != nil {
			return false, err
		}
		f.store = s
	}
	dest, err := f.dest(plannedDir)
	if err != nil {
		return false, err
	}
	if err := trees.FetchOutput(ctx, f.store, trees.Output{Name: o.Object, Digest: o.Digest}, dest); err != nil {
		return false, err
	}
	f.fetched[o.Object] = true
	return true, nil
}

// follow fetches each cell's output as its Verdict is published, until
// ctx ends; a fetch that fails is left to all.
func (f *outputFetcher) follow(ctx context.Context) {
	filter := "proctor.run." + f.runID + ".cell.*." + string(events.Verdict)
	_ = f.b.Follow(ctx, []string{filter}, func(e events.Envelope) error {
		var v events.VerdictData
		if events.Into(e, &v) != nil || v.Output == nil {
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
		_, _ = f.fetch(ctx, *v.Output, plan.OutputDir)
		return nil
	})
}

// all fetches the output of every cell whose last terminal event is a
// Verdict naming one (the output of an earlier attempt never is), and
// returns how many it fetched and the cells that failed.
func (f *outputFetcher) all(ctx context.Context) (int, error) {
	plans := map[string]string{}
	last := map[string]events.Envelope{}
	var order []string
	err := f.b.ReadRun(ctx, f.runID, func(e events.Envelope) error {
		switch e.Type {
		case events.CellPlanned:
			var p events.CellPlannedData
			if events.Into(e, &p) == nil {
				if _, ok := plans[e.CellID]; !ok {
					order = append(order, e.CellID)
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
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, cell := range order {
		e, ok := last[cell]
		if !ok || e.Type != events.Verdict {
			continue
		}
		var v events.VerdictData
		if events.Into(e, &v) != nil || v.Output == nil {
			continue
		}
		got, err := f.fetch(ctx, *v.Output, plans[cell])
		if err != nil {
			errs = append(errs, fmt.Errorf("cell %s: %w", cell, err))
			continue
		}
		if got {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func newRunsFetch(g *globals) *cobra.Command {
	var outDir string
	cmd := &cobra.Command{
		Use:   "fetch RUN [--output-dir D]",
		Short: "Write the output directories a cluster stored for a run's cells under the output directory",
		Long: `Fetch from the cluster's PROCTOR_TREES bucket the output directory of every
cell of RUN whose verdict names a stored one (a run served by 'proctor serve'
workers stores each cell's logs, stream and work tree there before its
verdict), check its digest and write it at the cell's directory under the
run's --output-dir, or under D with --output-dir D, replacing what was
there. RUN is a run id or a unique prefix of one. Cells of a single-process
run were written in place and have nothing stored.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			conn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			id, err := g.resolveRun(ctx, conn.Bus, args[0])
			if err != nil {
				return err
			}
			if outDir != "" {
				if outDir, err = filepath.Abs(outDir); err != nil {
					return err
				}
			}
			f, err := newOutputFetcher(ctx, conn.Bus, id, outDir)
			if err != nil {
				return err
			}
			n, err := f.all(ctx)
			where := f.outDir
			if where == "" {
				where = f.specOut
			}
			fmt.Fprintf(g.stdout, "run %s: %d cell %s written under %s\n", id, n, plural(n, "output", "outputs"), where)
			return err
		},
	}
	cmd.Flags().StringVar(&outDir, "output-dir", "", "directory to write the cells' outputs under (default: the run's output directory)")
	return cmd
}

// writeResultsHere writes the run's artifact and report (with their
// figures) at the spec's paths on this machine when they are not there:
// on a cluster the aggregator writes them on its own disk, which the
// driver may not share. They are rendered from the log, as `replay` does,
// so they are the aggregator's bytes.
func (g *globals) writeResultsHere(ctx context.Context, b *bus.Bus, runID string) error {
	p, err := projection.Project(ctx, b, runID)
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

package cellrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// DefaultSweepMax is how many cell attempt directories one Sweep looks
// at.
const DefaultSweepMax = 256

// sweepTmp prefixes the name a directory being removed takes.
const sweepTmp = ".sweep-"

// Sweeper removes the cell output directories of a node (Dir, its
// NodeOutputs: Dir/<run>/<cell hash>/<attempt>) that no worker will
// write or store again, which the worker that owned them did not remove:
// the attempt's worker died (its cell was retried, here or elsewhere), or
// the run ended while the cell was being verified, or the worker stopped
// between the cell's terminal event and the removal. A directory goes
// when
//
//   - its run has ended (the run index's status is terminal), or
//   - its cell has a terminal event (Verdict, CellErrored, CellRefused)
//     of a later attempt;
//
// and never while a cell of this node holds it (OpenOnNode holds its
// directory until Close; the hold is a flock(2), so the rule holds
// across the processes sharing $PROCTOR_HOME). A directory of a run the
// index does not know is left alone, and so is the directory of an
// attempt whose own terminal event is its last (a store that failed
// keeps it, for the operator, until its run ends). Without flock(2)
// nothing is removed.
type Sweeper struct {
	Bus *bus.Bus
	// Dir is the node's cell output directories (NodeOutputs).
	Dir string
	// Max bounds the attempt directories one Sweep looks at (0:
	// DefaultSweepMax); the next Sweep goes on after the last one, in
	// path order, and starts again from the first once it reaches the
	// end.
	Max int

	after *attemptDir // the last directory looked at
}

// Swept is what one Sweep did.
type Swept struct {
	// Looked is the number of attempt directories looked at, Removed of
	// them removed.
	Looked, Removed int
}

// Sweep looks at the next Max attempt directories and removes those
// whose cell attempt is over (see Sweeper). Its error is the event log's
// or the disk's; the directories it could judge are handled anyway.
func (s *Sweeper) Sweep(ctx context.Context) (Swept, error) {
	var out Swept
	if !trees.CanRemoveUnheld {
		return out, nil
	}
	limit := s.Max
	if limit <= 0 {
		limit = DefaultSweepMax
	}
	dirs, wrapped, err := s.next(limit)
	if err != nil {
		return out, err
	}
	runs := map[string]*bus.RunRecord{}
	var errs []error
	for _, d := range dirs {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out.Looked++
		s.after = &d
		done, err := s.over(ctx, runs, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !done {
			continue
		}
		p := filepath.Join(s.Dir, d.run, d.hash, d.attempt)
		tmp := filepath.Join(s.Dir, fmt.Sprintf("%s%s-%s-%s-%d-%d", sweepTmp, d.run, d.hash, d.attempt, os.Getpid(), time.Now().UnixNano()))
		if trees.RemoveUnheld(p, tmp) {
			out.Removed++
			cell := filepath.Dir(p)
			if os.Remove(cell) == nil {
				_ = os.Remove(filepath.Dir(cell))
			}
		}
	}
	if wrapped {
		s.after = nil
	}
	return out, errors.Join(errs...)
}

// attemptDir is one Dir/<run>/<hash>/<attempt>.
type attemptDir struct {
	run, hash, attempt string
	n                  int
}

// before reports whether d comes before e in the listing's order (each
// level by name, as os.ReadDir lists it).
func (d attemptDir) before(e attemptDir) bool {
	if d.run != e.run {
		return d.run < e.run
	}
	if d.hash != e.hash {
		return d.hash < e.hash
	}
	return d.attempt < e.attempt
}

// next lists up to limit attempt directories after s.after, in path
// order; wrapped when the listing reached the end. It removes the
// leftovers of removals a killed process left (older than an hour).
func (s *Sweeper) next(limit int) ([]attemptDir, bool, error) {
	runs, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("cellrun: sweep %s: %w", s.Dir, err)
	}
	var out []attemptDir
	for _, r := range runs {
		if strings.HasPrefix(r.Name(), sweepTmp) {
			if fi, err := r.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(filepath.Join(s.Dir, r.Name()))
			}
			continue
		}
		if !r.IsDir() || !subjectToken(r.Name()) || (s.after != nil && r.Name() < s.after.run) {
			continue
		}
		cells, err := os.ReadDir(filepath.Join(s.Dir, r.Name()))
		if err != nil {
			continue
		}
		for _, c := range cells {
			if !c.IsDir() || !cellHash(c.Name()) {
				continue
			}
			attempts, err := os.ReadDir(filepath.Join(s.Dir, r.Name(), c.Name()))
			if err != nil {
				continue
			}
			for _, a := range attempts {
				n, err := strconv.Atoi(a.Name())
				if !a.IsDir() || err != nil || n < 1 || strconv.Itoa(n) != a.Name() {
					continue
				}
				d := attemptDir{run: r.Name(), hash: c.Name(), attempt: a.Name(), n: n}
				if s.after != nil && !s.after.before(d) {
					continue
				}
				out = append(out, d)
				if len(out) == limit {
					return out, false, nil
				}
			}
		}
	}
	return out, true, nil
}

// over reports whether the attempt of d is over for good (Sweeper's
// rules); runs remembers the run records read.
func (s *Sweeper) over(ctx context.Context, runs map[string]*bus.RunRecord, d attemptDir) (bool, error) {
	r, ok := runs[d.run]
	if !ok {
		rec, err := s.Bus.GetRun(ctx, d.run)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			// A run this store does not know: left alone.
		case err != nil:
			return false, err
		default:
			r = &rec
		}
		runs[d.run] = r
	}
	if r == nil {
		return false, nil
	}
	if r.Terminal() {
		return true, nil
	}
	for _, t := range []events.Type{events.Verdict, events.CellErrored, events.CellRefused} {
		e, err := s.Bus.LastEvent(ctx, "proctor.run."+d.run+".cell."+d.hash+"."+string(t))
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if e.Attempt > d.n {
			return true, nil
		}
	}
	return false, nil
}

// Run sweeps now and then every every, until ctx ends, logging what it
// removed and what failed.
func (s *Sweeper) Run(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := s.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("sweep the node's cell directories", "err", err)
		}
		if n.Removed > 0 {
			log.Info("removed cell directories no worker will store", "count", n.Removed, "looked", n.Looked)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// subjectToken reports whether name can be a token of a NATS subject
// (a run id).
func subjectToken(name string) bool {
	return name != "" && !strings.ContainsAny(name, ". *>\t\r\n")
}

// cellHash reports whether name is a cell hash (events.CellHash).
func cellHash(name string) bool {
	if len(name) != 16 {
		return false
	}
	for _, c := range name {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

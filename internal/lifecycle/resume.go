package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/trees"
	"github.com/proctor-eval/proctor/services/planner"
)

// ErrNothingToResume is wrapped by PrepareResume's refusal of a run that
// finished or could not be planned.
var ErrNothingToResume = errors.New("nothing to resume")

// Refused is PrepareResume's error for a run it will not resume: it is
// alive (its owner holds the lease), finished, was never planned, or its
// declared inputs changed. It is the caller's input, not a failure.
type Refused struct{ Err error }

func (e *Refused) Error() string { return e.Err.Error() }

// Unwrap returns the reason.
func (e *Refused) Unwrap() error { return e.Err }

func refused(format string, a ...any) error { return &Refused{fmt.Errorf(format, a...)} }

// Resume is a run's next epoch as PrepareResume decided it; Begin starts
// it.
type Resume struct {
	RunID string
	// Record is the run's index record as read.
	Record bus.RunRecord
	// Epoch is the epoch Begin moves the run to (Record.Epoch+1).
	Epoch int
	// Identity is the run's identity now (equal to the recorded one).
	Identity Identity
	// Cells is the run's matrix, recomputed from its recorded spec.
	Cells []planner.Cell
	// Again are the cells that run again, Kept those that keep their
	// terminal event (PrepareResume says which), both in plan order. Cells the planner refuses are
	// in neither: their refusal is recorded by the plan.
	Again, Kept []Decision

	// getenv reads proctor's environment (nil: os.Getenv), as the
	// preparation did.
	getenv func(string) string
}

// Decision is what a resume does with one cell, and why.
type Decision struct {
	CellID string
	// Why is the cell's state in the log: its outcome when kept, why it
	// runs again.
	Why string
	// Attempt is the cell's last attempt in the log (0: none); a cell run
	// again runs as attempt Attempt+1.
	Attempt int
}

// PrepareResume decides how runID continues: it refuses (a *Refused) a
// run whose owner still holds its lease at now, that finished or could
// not be planned (wrapping ErrNothingToResume), that was never planned,
// or whose identity changed (naming each changed input); it recomputes
// the matrix from the recorded spec (an error when that no longer plans)
// and sorts the cells into those that keep their terminal event and those
// that run again: a cell without a terminal event, or whose last attempt
// ended errored by proctor's own machinery (a retryable class: build,
// sandbox, infra, as a container killed mid-verify leaves it), the cells
// `--retries` would run again. A verdict, and an error of the cell's own
// (solver_error, refused, unresolved_env), is kept. It changes nothing.
// getenv reads proctor's environment for the arms' checks and inputs
// (planner.Matrix; nil: os.Getenv).
func PrepareResume(ctx context.Context, b *bus.Bus, runID string, now time.Time, getenv func(string) string) (*Resume, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, &Refused{err}
	}
	if !rec.Terminal() && !rec.LeaseExpired(now) {
		return nil, refused("run %s is alive: %s holds its lease until %s", runID, orDash(rec.Owner), orDash(rec.LeaseUntil))
	}
	if rec.Status == bus.StatusFinished {
		return nil, refused("run %s finished: %w", runID, ErrNothingToResume)
	}
	if rec.Status == bus.StatusCancelled {
		return nil, refused("run %s was cancelled: %w (`proctor runs requeue %s --outcome errored --class cancelled` runs its cancelled cells again)", runID, ErrNothingToResume, runID)
	}
	p, err := projection.Project(ctx, b, runID)
	if err != nil {
		return nil, err
	}
	if !p.Planned() {
		return nil, refused("run %s was never planned: start it again with tasks run", runID)
	}
	if p.PlanError() != "" {
		return nil, refused("run %s could not be planned (%s): %w", runID, p.PlanError(), ErrNothingToResume)
	}
	r, err := reopen(rec, runID, "resume", getenv)
	if err != nil {
		return nil, err
	}
	for _, c := range r.Cells {
		if c.Refusal != "" {
			continue
		}
		d := Decision{CellID: c.ID, Attempt: p.Attempt(c.ID), Why: "no terminal event"}
		row, _ := p.Row(c.ID)
		if p.CellDone(c.ID) || p.RetryPending(c.ID) {
			d.Why = outcome(row)
		}
		if p.CellDone(c.ID) && !events.ErrorClass(row.ErrorClass).Retryable() {
			r.Kept = append(r.Kept, d)
			continue
		}
		r.Again = append(r.Again, d)
	}
	return r, nil
}

// outcome is a row's outcome in words: "passed (reward 1)", "errored
// (infra): why".
func outcome(row artifact.Result) string {
	switch {
	case row.Outcome == artifact.OutcomeErrored:
		return fmt.Sprintf("errored (%s): %s", row.ErrorClass, row.Error)
	case row.Outcome == artifact.OutcomeVerifierError:
		return "verifier error: " + row.Error
	case row.Reward != nil:
		return fmt.Sprintf("%s (reward %g)", row.Outcome, *row.Reward)
	}
	return row.Outcome
}

// Begin starts the resume's epoch, owned by owner: it moves the run's
// index record first (running, the new epoch, owner and a fresh lease,
// the identity), so a launcher that reads it drops the jobs of older
// epochs and the aggregator follows to this epoch's RunFinished; then it
// publishes RunResumed (outJSON and outMD, when set, replace the
// artifact's paths) and one launch job per cell run again, as attempt
// last+1. On a cluster it first stores the trees of those cells again
// (storeTrees). The error is the event log's, the index's or the
// bucket's.
func (r *Resume) Begin(ctx context.Context, b *bus.Bus, owner, outJSON, outMD string) error {
	if err := r.storeTrees(ctx, b); err != nil {
		return err
	}
	now := time.Now()
	if err := b.UpdateRun(ctx, r.RunID, func(rec *bus.RunRecord) {
		rec.Status, rec.Epoch, rec.Owner, rec.Error, rec.FinishedAt = bus.StatusRunning, r.Epoch, owner, "", ""
		rec.Identity, rec.Inputs = r.Identity.Hash, r.Identity.Inputs
		rec.Renew(now, bus.LeaseDuration)
	}); err != nil {
		return err
	}
	again := make([]string, 0, len(r.Again))
	for _, d := range r.Again {
		again = append(again, d.CellID)
	}
	if err := b.PublishAll(ctx, events.Must(events.RunResumed, r.RunID, "", 0, Source, events.RunResumedData{
		Epoch: r.Epoch, Cells: again, Owner: owner, Identity: r.Identity.Hash, OutJSON: outJSON, OutMD: outMD,
	})); err != nil {
		return err
	}
	for _, d := range r.Again {
		job := events.LaunchJob{RunID: r.RunID, CellID: d.CellID, Epoch: r.Epoch, AttemptBase: d.Attempt}
		if err := b.PublishWork(ctx, events.LaunchSubject, fmt.Sprintf("%s/%s/e%d", r.RunID, d.CellID, r.Epoch), job); err != nil {
			return err
		}
	}
	return nil
}

// storeTrees stores again, on a cluster (the PROCTOR_TREES bucket
// exists), the trees of the cells run again (planner.StoreInputs; a tree
// the bucket holds is not stored twice): `proctor gc` removes the trees
// of a run that ended, and a worker fetches a cell's trees by the digests
// its CellPlanned recorded, which the run's unchanged identity keeps.
func (r *Resume) storeTrees(ctx context.Context, b *bus.Bus) error {
	if _, err := trees.Lookup(ctx, b); errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	again := map[string]bool{}
	for _, d := range r.Again {
		again[d.CellID] = true
	}
	var cells []planner.Cell
	for _, c := range r.Cells {
		if again[c.ID] && c.Refusal == "" {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		return nil
	}
	if _, err := planner.StoreInputs(ctx, b, r.Record.Spec, cells, r.getenv); err != nil {
		return fmt.Errorf("run %s: storing its trees again: %w", r.RunID, err)
	}
	return nil
}

// reopen plans runID's spec again for a new epoch (resume, requeue) and
// checks that its declared inputs are those the run recorded: a change is
// refused, named, with verb saying what was refused. getenv reads
// proctor's environment (planner.Matrix).
func reopen(rec bus.RunRecord, runID, verb string, getenv func(string) string) (*Resume, error) {
	cells, err := planner.Matrix(rec.Spec, getenv)
	if err != nil {
		return nil, fmt.Errorf("run %s: its spec no longer plans: %w", runID, err)
	}
	id, err := Identify(rec.Spec, cells, getenv)
	if err != nil {
		return nil, err
	}
	if rec.Identity != "" && id.Hash != rec.Identity {
		why := "its declared inputs changed"
		if d := Changes(rec.Inputs, id.Inputs); len(d) > 0 {
			why = fmt.Sprint(d)
		}
		return nil, refused("run %s: refusing to %s: %s", runID, verb, why)
	}
	return &Resume{RunID: runID, Record: rec, Epoch: rec.Epoch + 1, Identity: id, Cells: cells, getenv: getenv}, nil
}

package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Run statuses in the run index.
const (
	StatusRequested   = "requested"
	StatusRunning     = "running"
	StatusFinished    = "finished"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
	// StatusCancelled ends a run an operator cancelled whole (`proctor
	// runs cancel RUN`): its cells without a verdict are errored, class
	// cancelled.
	StatusCancelled = "cancelled"
)

// TerminalStatus reports whether status ends a run (finished, failed,
// interrupted, cancelled).
func TerminalStatus(status string) bool {
	switch status {
	case StatusFinished, StatusFailed, StatusInterrupted, StatusCancelled:
		return true
	}
	return false
}

// RunRecord is one entry of the run index (KV PROCTOR_RUNS, key = run id).
type RunRecord struct {
	ID         string         `json:"id"`
	Status     string         `json:"status"`
	Spec       events.RunSpec `json:"spec"`
	Cells      int            `json:"cells,omitempty"`
	Counts     map[string]int `json:"counts,omitempty"`
	StartedAt  string         `json:"started_at,omitempty"`
	FinishedAt string         `json:"finished_at,omitempty"`
	Artifact   string         `json:"artifact,omitempty"`
	Report     string         `json:"report,omitempty"`
	Error      string         `json:"error,omitempty"`
	// Identity is the hash of the run's declared inputs (task revisions,
	// harness specs, models, repeats); resume refuses a run whose inputs
	// changed.
	Identity string `json:"identity,omitempty"`
	// Inputs are the declared inputs behind Identity, by name ("task x
	// revision"), so resume names the one that changed.
	Inputs map[string]string `json:"inputs,omitempty"`
	// Epoch counts the resumes of the run (0: never resumed). Work jobs
	// carry the epoch they were published in; a job of an older epoch is
	// dropped, so a dead run's queue never runs after a resume.
	Epoch int `json:"epoch,omitempty"`
	// Owner names the process that drives the run ("host pid N"), and
	// LeaseUntil (RFC 3339) is when its lease ends unless the owner
	// renews it (every LeaseDuration/6). Work of a run whose lease
	// expired is dropped; only resume takes the run over.
	Owner      string `json:"owner,omitempty"`
	LeaseUntil string `json:"lease_until,omitempty"`
	// FinishClaim is epoch+1 of the last epoch whose RunFinished a
	// process claimed the right to publish (ClaimFinish), and
	// FinishClaimUntil (RFC 3339) when the claimant's clock puts the
	// claim's end. No process compares FinishClaimUntil with its own
	// clock: it is for the operator, and makes each claim's value new, so
	// an asker can see that a claim was made again (ClaimFinish).
	FinishClaim      int    `json:"finish_claim,omitempty"`
	FinishClaimUntil string `json:"finish_claim_until,omitempty"`
	// FinishClaimBy names the claimant (ClaimFinish's by), so a
	// claimant asking again (its first answer lost) is told it holds it.
	FinishClaimBy string `json:"finish_claim_by,omitempty"`
	// Control is the run's control state: paused, cancelled cells
	// (Bus.Control writes it with each RunControl event).
	Control ControlState `json:"control,omitzero"`
}

// FinishClaimDuration is how long a claim to publish a run's RunFinished
// holds, on the clock of the process asking for it: a claimant that dies
// before publishing is replaced after it.
var FinishClaimDuration = 30 * time.Second

// ClaimFinish claims, with a compare-and-set on the run index, the right
// to publish the RunFinished of the run's epoch: exactly one of the
// processes asking wins (two aggregators following one run), unless the
// winner's claim lapsed because it died before publishing. by names the
// claimant (one per process): a claimant that asks again, as after a
// timeout whose update went through, is told it won, so an error can be
// retried. It reports whether this caller won; the error is the index's.
//
// Another's claim lapses on the asker's own clock, never by comparing the
// time the claimant's machine wrote with the asker's: seen(claim) is how
// long the asker has seen that same claim (a string naming the claim's
// epoch, claimant and the time it wrote, so a claim made again is a new
// one) unchanged, by a monotonic clock of its own, and the claim has
// lapsed once that is FinishClaimDuration or more. A claimant whose clock
// is behind so keeps its claim, and one whose clock is ahead loses it, a
// FinishClaimDuration after the asker first saw it; an asker must ask
// again to win a claim its first look did not find lapsed. seen must not
// be nil; it is called once per compare-and-set try.
//
// The claim alone does not keep the RunFinished single: a claim lapsed
// after its holder published (killed before it wrote the results) is won
// again, so the winner also looks for the event in the log, and the
// event's id is the epoch's own (events.RunFinishedID).
func (b *Bus) ClaimFinish(ctx context.Context, id string, epoch int, by string, seen func(claim string) time.Duration) (bool, error) {
	won := false
	err := b.UpdateRun(ctx, id, func(r *RunRecord) {
		mine := by != "" && r.FinishClaimBy == by
		lapsed := r.FinishClaim == epoch+1 && !mine && seen(r.finishClaimKey()) >= FinishClaimDuration
		won = r.FinishClaim < epoch+1 || (r.FinishClaim == epoch+1 && (lapsed || mine))
		if won {
			r.FinishClaim, r.FinishClaimBy = epoch+1, by
			r.FinishClaimUntil = time.Now().Add(FinishClaimDuration).UTC().Format(time.RFC3339Nano)
		}
	})
	return won, err
}

// finishClaimKey names the record's finish claim for ClaimFinish's seen:
// its epoch, its claimant and the time the claimant wrote, which a claim
// made again (a retry, a takeover) changes.
func (r RunRecord) finishClaimKey() string {
	return fmt.Sprintf("%d %q %s", r.FinishClaim, r.FinishClaimBy, r.FinishClaimUntil)
}

// LeaseDuration is how long a run's owner holds its lease without a
// renewal.
var LeaseDuration = 60 * time.Second

// Terminal reports whether the run has ended (TerminalStatus).
func (r RunRecord) Terminal() bool { return TerminalStatus(r.Status) }

// LeaseExpired reports whether the run has a lease that ended before now.
// A run without a lease (written by an older proctor) never expires.
func (r RunRecord) LeaseExpired(now time.Time) bool {
	if r.LeaseUntil == "" {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, r.LeaseUntil)
	return err == nil && now.After(t)
}

// Renew sets the lease to end d after now.
func (r *RunRecord) Renew(now time.Time, d time.Duration) {
	r.LeaseUntil = now.Add(d).UTC().Format(time.RFC3339Nano)
}

// PutRun writes a run record.
func (b *Bus) PutRun(ctx context.Context, r RunRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := b.Runs.Put(ctx, r.ID, data); err != nil {
		return fmt.Errorf("bus: run index put %s: %w", r.ID, err)
	}
	return nil
}

// UpdateRun reads a record, applies fn and writes it back with a
// compare-and-set, retrying on a concurrent write. A missing record starts
// from RunRecord{ID: id}.
func (b *Bus) UpdateRun(ctx context.Context, id string, fn func(*RunRecord)) error {
	ctx, cancel := context.WithTimeout(ctx, 2*RequestTimeout)
	defer cancel()
	for try := 0; try < 20; try++ {
		var r RunRecord
		var rev uint64
		e, err := b.Runs.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			r.ID = id
		case err != nil:
			return fmt.Errorf("bus: run index get %s: %w", id, err)
		default:
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return fmt.Errorf("bus: run index %s: %w", id, err)
			}
			rev = e.Revision()
		}
		fn(&r)
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = b.Runs.Create(ctx, id, data)
		} else {
			_, err = b.Runs.Update(ctx, id, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSeq(err) {
			return fmt.Errorf("bus: run index update %s: %w", id, err)
		}
	}
	return fmt.Errorf("bus: run index update %s: too much contention", id)
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// GetRun reads a run record; ErrNotFound when the id is unknown.
func (b *Bus) GetRun(ctx context.Context, id string) (RunRecord, error) {
	var r RunRecord
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	e, err := b.Runs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return r, fmt.Errorf("%w: run %s", ErrNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("bus: run index get %s: %w", id, err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return r, fmt.Errorf("bus: run index %s: %w", id, err)
	}
	return r, nil
}

// ListRuns returns every run record, newest first (run ids are ULIDs).
func (b *Bus) ListRuns(ctx context.Context) ([]RunRecord, error) {
	keys, err := b.Runs.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: run index keys: %w", err)
	}
	var out []RunRecord
	for k := range keys.Keys() {
		r, err := b.GetRun(ctx, k)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, nil
}

// WaitRun blocks until the run's record has a terminal status
// (TerminalStatus) and returns it, or until ctx ends.
func (b *Bus) WaitRun(ctx context.Context, id string) (RunRecord, error) {
	w, err := b.Runs.Watch(ctx, id)
	if err != nil {
		return RunRecord{}, fmt.Errorf("bus: watch run %s: %w", id, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return RunRecord{}, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return RunRecord{}, fmt.Errorf("bus: watch run %s ended", id)
			}
			if e == nil {
				continue
			}
			var r RunRecord
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return r, fmt.Errorf("bus: run index %s: %w", id, err)
			}
			if TerminalStatus(r.Status) {
				return r, nil
			}
		}
	}
}

package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// By names this process as the author of a control action: "user@host
// pid N".
func By() string {
	name := "?"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	h, _ := os.Hostname()
	return fmt.Sprintf("%s@%s pid %d", name, h, os.Getpid())
}

// Live reports whether a run is driven by a live process: it has not
// ended and its lease has not expired. Control actions other than a
// requeue need it.
func Live(rec bus.RunRecord, now time.Time) bool {
	return !rec.Terminal() && !rec.LeaseExpired(now)
}

// Cancel cancels cells of a live run (every cell when cells is empty):
// running cells are stopped as a Ctrl-C stops them and errored, class
// cancelled; queued ones never start. It refuses (a *Refused) a run that
// ended or whose owner is gone, and a cell the run did not plan. It
// returns the RunControl event recorded.
func Cancel(ctx context.Context, b *bus.Bus, runID string, cells []string, by, why string) (events.Envelope, error) {
	if err := checkLive(ctx, b, runID); err != nil {
		return events.Envelope{}, err
	}
	if len(cells) > 0 {
		p, err := projection.Project(ctx, b, runID)
		if err != nil {
			return events.Envelope{}, err
		}
		planned := p.Cells()
		for _, c := range cells {
			if !slices.Contains(planned, c) {
				return events.Envelope{}, refused("run %s has no cell %q", runID, c)
			}
		}
	}
	return b.Control(ctx, runID, Source, events.RunControlData{Action: events.ControlCancel, Cells: cells, By: by, Why: why})
}

// Pause stops a live run's new cells from starting (with now, its running
// sandboxes are frozen too, where the driver can). A second pause of a
// paused run replaces its who and why.
func Pause(ctx context.Context, b *bus.Bus, runID string, now bool, by, why string) (events.Envelope, error) {
	if err := checkLive(ctx, b, runID); err != nil {
		return events.Envelope{}, err
	}
	return b.Control(ctx, runID, Source, events.RunControlData{Action: events.ControlPause, Now: now, By: by, Why: why})
}

// Continue lifts a live run's pause; a run that is not paused is refused.
func Continue(ctx context.Context, b *bus.Bus, runID, by, why string) (events.Envelope, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return events.Envelope{}, &Refused{err}
	}
	if err := checkLive(ctx, b, runID); err != nil {
		return events.Envelope{}, err
	}
	if !rec.Control.Paused {
		return events.Envelope{}, refused("run %s is not paused", runID)
	}
	return b.Control(ctx, runID, Source, events.RunControlData{Action: events.ControlContinue, By: by, Why: why})
}

func checkLive(ctx context.Context, b *bus.Bus, runID string) error {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return &Refused{err}
	}
	if rec.Terminal() {
		return refused("run %s has ended (%s)", runID, rec.Status)
	}
	if rec.LeaseExpired(time.Now()) {
		return refused("run %s has no live owner (%s stopped renewing its lease at %s): `proctor runs resume %s` continues it", runID, orDash(rec.Owner), rec.LeaseUntil, runID)
	}
	return nil
}

// Selector picks the cells a requeue runs again by their rows: outcomes
// (artifact outcomes; errored, solver_timeout, verifier_timeout,
// verifier_error) and, when set, error classes of errored rows.
type Selector struct {
	Outcomes []string
	Classes  []string
}

// Requeueable are the outcomes a requeue may select: those without a
// verdict an agent earned (a pass, a fail or a partial is never run
// again).
var Requeueable = []string{artifact.OutcomeErrored, artifact.OutcomeSolverTimeout, artifact.OutcomeVerifierTimeout, artifact.OutcomeVerifierError}

// Validate checks the selector's outcomes.
func (s Selector) Validate() error {
	if len(s.Outcomes) == 0 {
		return fmt.Errorf("--outcome is required: one or more of %v", Requeueable)
	}
	for _, o := range s.Outcomes {
		if !slices.Contains(Requeueable, o) {
			return fmt.Errorf("--outcome %q: a requeue runs again only cells without an earned verdict: %v", o, Requeueable)
		}
	}
	return nil
}

func (s Selector) pick(r artifact.Result) bool {
	if !slices.Contains(s.Outcomes, r.Outcome) {
		return false
	}
	if len(s.Classes) > 0 && r.Outcome == artifact.OutcomeErrored && !slices.Contains(s.Classes, r.ErrorClass) {
		return false
	}
	if r.ErrorClass == artifact.ErrorRefused || r.ErrorClass == artifact.ErrorUnresolvedEnv {
		return false // decided from the task files: the plan refuses it again
	}
	return true
}

// String names what s selects: "outcome errored,solver_timeout", with
// " (class infra,build)" when it names classes (of the errored cells).
func (s Selector) String() string {
	out := "outcome " + strings.Join(s.Outcomes, ",")
	if len(s.Classes) > 0 {
		out += " (class " + strings.Join(s.Classes, ",") + ")"
	}
	return out
}

// Explain says, for a requeue that picked none of rows (a run's done
// cells), what s asked for and what those cells are instead: the cells of
// s's outcomes it passed over, counted by why (a class --class leaves
// out; refused and unresolved_env, which the task files decide, so a
// requeue would only refuse them again), or, when no cell has one of s's
// outcomes, the run's cells by outcome.
func (s Selector) Explain(rows []artifact.Result) string {
	count := func(m map[string]int) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%d %s", m[k], k)
		}
		return strings.Join(parts, ", ")
	}
	classes, fixed, all := map[string]int{}, map[string]int{}, map[string]int{}
	for _, r := range rows {
		all[r.Outcome]++
		if !slices.Contains(s.Outcomes, r.Outcome) || s.pick(r) {
			continue
		}
		if r.ErrorClass == artifact.ErrorRefused || r.ErrorClass == artifact.ErrorUnresolvedEnv {
			fixed[r.ErrorClass]++
		} else {
			classes[r.ErrorClass]++
		}
	}
	msg := "no cell to run again has " + s.String()
	var why []string
	if len(classes) > 0 {
		why = append(why, "errored of a class --class leaves out: "+count(classes))
	}
	if len(fixed) > 0 {
		why = append(why, "errored before any build, which the task files decide (a requeue would refuse them again; fix the task, then run it anew): "+count(fixed))
	}
	switch {
	case len(why) > 0:
		msg += "; the run's other cells of that outcome are " + strings.Join(why, "; ")
	case len(all) > 0:
		msg += "; the run's done cells: " + count(all)
	default:
		msg += "; no cell of the run is done"
	}
	return msg
}

// NothingPicked is Explain over runID's done cells in the log: why a
// requeue with sel picked none of them.
func NothingPicked(ctx context.Context, b *bus.Bus, runID string, sel Selector) (string, error) {
	p, err := projection.Project(ctx, b, runID)
	if err != nil {
		return "", err
	}
	var rows []artifact.Result
	for _, id := range p.Cells() {
		if row, ok := p.Row(id); ok && p.CellDone(id) {
			rows = append(rows, row)
		}
	}
	return sel.Explain(rows), nil
}

// RequeueLive runs again, within a live run, the done cells sel picks,
// each as a new attempt (the earlier kept in the log): it records the
// RunControl requeue (which keeps the run open for them) and publishes one
// launch job per cell. It returns the decisions (empty: nothing matched,
// nothing recorded).
func RequeueLive(ctx context.Context, b *bus.Bus, runID string, sel Selector, by, why string) ([]Decision, error) {
	if err := checkLive(ctx, b, runID); err != nil {
		return nil, err
	}
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	p, err := projection.Project(ctx, b, runID)
	if err != nil {
		return nil, err
	}
	var picked []Decision
	for _, id := range p.Cells() {
		row, ok := p.Row(id)
		if !ok || !p.CellDone(id) || !sel.pick(row) {
			continue
		}
		picked = append(picked, Decision{CellID: id, Attempt: p.Attempt(id), Why: outcome(row)})
	}
	if len(picked) == 0 {
		return nil, nil
	}
	d := events.RunControlData{Action: events.ControlRequeue, By: by, Why: why, Attempts: map[string]int{}}
	for _, c := range picked {
		d.Cells = append(d.Cells, c.CellID)
		d.Attempts[c.CellID] = c.Attempt
	}
	if _, err := b.Control(ctx, runID, Source, d); err != nil {
		return nil, err
	}
	for _, c := range picked {
		job := events.LaunchJob{RunID: runID, CellID: c.CellID, Epoch: rec.Epoch, AttemptBase: c.Attempt}
		if err := b.PublishWork(ctx, events.LaunchSubject, fmt.Sprintf("%s/%s/requeue%d", runID, c.CellID, c.Attempt), job); err != nil {
			return nil, err
		}
	}
	return picked, nil
}

// PrepareRequeue decides how an ended run (or one whose owner is gone)
// runs again the cells sel picks, as a resume does (PrepareResume: the
// identity checked, the matrix recomputed), a finished run included: the
// picked cells, and any cell without a terminal event, run again; the
// others keep their outcome. It refuses a live run (RequeueLive serves
// it). Begin, then Record, start it. getenv is PrepareResume's.
func PrepareRequeue(ctx context.Context, b *bus.Bus, runID string, sel Selector, now time.Time, getenv func(string) string) (*Resume, error) {
	rec, err := b.GetRun(ctx, runID)
	if err != nil {
		return nil, &Refused{err}
	}
	if Live(rec, now) {
		return nil, refused("run %s is alive", runID)
	}
	p, err := projection.Project(ctx, b, runID)
	if err != nil {
		return nil, err
	}
	if !p.Planned() || p.PlanError() != "" {
		return nil, refused("run %s was never planned", runID)
	}
	r, err := reopen(rec, runID, "requeue", getenv)
	if err != nil {
		return nil, err
	}
	for _, c := range r.Cells {
		if c.Refusal != "" {
			continue
		}
		d := Decision{CellID: c.ID, Attempt: p.Attempt(c.ID), Why: "no terminal event"}
		row, _ := p.Row(c.ID)
		done := p.CellDone(c.ID) || p.RetryPending(c.ID)
		if done {
			d.Why = outcome(row)
		}
		if done && !sel.pick(row) {
			r.Kept = append(r.Kept, d)
			continue
		}
		r.Again = append(r.Again, d)
	}
	return r, nil
}

// Requeued records, after Begin, the RunControl requeue of a reopened
// run's cells (who and why; the control state no longer cancels them).
func (r *Resume) Requeued(ctx context.Context, b *bus.Bus, by, why string) error {
	d := events.RunControlData{Action: events.ControlRequeue, By: by, Why: why, Attempts: map[string]int{}}
	for _, c := range r.Again {
		d.Cells = append(d.Cells, c.CellID)
		d.Attempts[c.CellID] = c.Attempt
	}
	_, err := b.Control(ctx, r.RunID, Source, d)
	return err
}

package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/services/launcher"
)

// TestPauseNowOnADriverThatCannotFreeze: a pause --now of a run whose
// running solves are host commands (a driver without Freezer and Thawer) freezes
// nothing, and each launcher says so for each of its solves (SolveFrozen,
// not frozen, naming the driver): the solves run on and pass, no held
// cell starts until the continue, and then the run finishes with every
// cell passed and its artifact equal to a replay.
func TestPauseNowOnADriverThatCannotFreeze(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newCtlRun(t, ctx, 4, nil)
	r.host.Off = []sandbox.Ability{sandbox.AbilityFreezer, sandbox.AbilityThawer}
	stop := r.services(t, ctx, func() *bus.Bus { return r.connect(t) },
		[]launcher.Config{{Node: "n1", Concurrency: 1}, {Node: "n2", Concurrency: 1}}, 1)
	defer func() { _ = stop() }()
	r.publish(t, ctx, r.b)
	r.waitStates(t, ctx, "two cells running", func(s map[string]int) bool { return s[projection.StateRunning] == 2 })
	poll(t, ctx, "two solves running", func() bool { return r.solves.Load() == 2 })
	p := r.project(t, ctx)
	var running []string
	var idx []int
	for i, job := range r.jobs {
		if p.CellState(job.CellID) == projection.StateRunning {
			running, idx = append(running, job.CellID), append(idx, i)
		}
	}
	ctl := r.connect(t)
	mark, err := lifecycle.SolveMark(ctx, ctl, r.run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lifecycle.Pause(ctx, ctl, r.run, true, "tester", "look closer"); err != nil {
		t.Fatal(err)
	}
	answers := map[string]events.SolveFrozenData{}
	missing, err := lifecycle.AwaitSolves(ctx, ctl, r.run, mark, events.SolveFrozen, running, func(e events.Envelope) {
		var d events.SolveFrozenData
		if err := events.Into(e, &d); err != nil {
			t.Error(err)
		}
		answers[e.CellID] = d
	})
	if err != nil || len(missing) > 0 {
		t.Fatalf("answers: missing %v, %v", missing, err)
	}
	for _, c := range running {
		d := answers[c]
		if d.Frozen || d.Driver == "" || !strings.Contains(d.Reason, "cannot freeze") || d.Node == "" {
			t.Errorf("cell %s: %+v, want not frozen: the driver cannot freeze", c, d)
		}
	}
	if frozen, err := lifecycle.FrozenSolves(ctx, ctl, r.run); err != nil || len(frozen) != 0 {
		t.Errorf("frozen solves %v, %v; want none", frozen, err)
	}
	// Not frozen: the solves end when released, and pass.
	r.release(idx...)
	r.waitStates(t, ctx, "the two running cells passed", func(s map[string]int) bool { return s[artifact.OutcomePassed] == 2 })
	poll(t, ctx, "both launchers holding a job", func() bool { return consumerPending(t, ctx, r.b) == 2 })
	if s := r.project(t, ctx).States(); s[projection.StateQueued] != 2 {
		t.Fatalf("states while paused: %v, want 2 queued", s)
	}
	if _, err := lifecycle.Continue(ctx, ctl, r.run, "tester", "go on"); err != nil {
		t.Fatal(err)
	}
	r.release(0, 1, 2, 3)
	rec := waitFinished(t, ctx, r.b, r.run)
	rows := r.rows(t, ctx, rec)
	for _, job := range r.jobs {
		if row := rows[job.CellID]; row.Outcome != artifact.OutcomePassed {
			t.Errorf("cell %s: %s %s", job.CellID, row.Outcome, row.Error)
		}
	}
	r.noneLeft(t)
}

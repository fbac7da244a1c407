package cli

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestProgressServiceFailure: `tasks run` with its services in process,
// where the launcher's Run returns an error once the run is planned (the
// real planner and aggregator run beside it). The command must exit with
// that error promptly, not wait for a RunFinished nobody will publish,
// and end the run as failed with the artifact of what finished (the
// planned cell an errored row).
func TestProgressServiceFailure(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeRoot(t, harborTask("fix-it", "version = \"1.0\"\n", nil))
	out := t.TempDir()
	boom := errors.New("launcher: the sandbox engine went away")
	var stdout, stderr testutil.SyncBuffer
	g := testGlobals(t, &stdout, &stderr)
	g.startServices = func(ctx context.Context, grp *errgroup.Group, b *bus.Bus, cfg stackConfig) (*stack, error) {
		cfg.services = []string{"planner", "aggregator"}
		st, err := g.startStack(ctx, grp, b, cfg)
		if err != nil {
			return nil, err
		}
		grp.Go(func() error { // the failing launcher
			// It fails once the run is planned and the progress follower
			// has printed the plan, so the follower is waiting for cells.
			err := b.Follow(ctx, []string{events.RunSubject("*", events.RunPlanned)}, func(events.Envelope) error { return bus.ErrStop })
			if err != nil {
				return err
			}
			for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "planned 1 cell\n"); {
				if time.Now().After(deadline) {
					return errors.New("the progress follower never printed the plan")
				}
				time.Sleep(10 * time.Millisecond) // polling stderr
			}
			return boom
		})
		return st, nil
	}
	f := &runFlags{tasksRoot: root, tasks: []string{"fix-it"}, models: []string{"default"}, repeats: 1,
		outputDir: out, agentGrace: 10, concurrency: 1}
	f.harnesses.vals = []string{"oracle"}

	done := make(chan error, 1)
	go func() { done <- g.tasksRun(context.Background(), f) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("tasks run still waiting 60 s after its launcher failed; stderr:\n%s", stderr.String())
	}
	if !errors.Is(err, boom) || errors.Is(err, ErrInterrupted) {
		t.Fatalf("tasks run returned %v, want the launcher's error", err)
	}
	if !strings.Contains(stdout.String(), " failed: ") {
		t.Errorf("no failed result line; stdout:\n%s", stdout.String())
	}
	arts, _ := filepath.Glob(filepath.Join(out, "*", "task_runs.json"))
	if len(arts) != 1 {
		t.Fatalf("artifacts %v, want the failed run's one", arts)
	}
	a, err := artifact.Read(arts[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Results) != 1 || a.Results[0].Outcome != artifact.OutcomeErrored || a.Results[0].ErrorClass != artifact.ErrorInfra {
		t.Errorf("rows %+v, want the one planned cell errored (infra)", a.Results)
	}
}

// TestProgressFollowsAResumedRun: the progress of `runs resume` (its
// epoch 1) goes past the RunFinished that closed epoch 0 to the cell run
// again, and ends at epoch 1's RunFinished; the log before the resume is
// not printed again (cell a's line, the plan), only what runs again.
func TestProgressFollowsAResumedRun(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	r := testutil.NewResumedRun("oracle", t.TempDir())
	if err := b.PutRun(ctx, r.Record); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, r.Before...); err != nil {
		t.Fatal(err)
	}
	var stderr testutil.SyncBuffer
	g := testGlobals(t, io.Discard, &stderr)
	done := make(chan struct{})
	go func() { defer close(done); g.progress(ctx, b, r.ID, 1) }()
	if err := b.PublishAll(ctx, r.After...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the progress did not end at epoch 1's RunFinished:\n%s", stderr.String())
	}
	if want := "[2/2] " + r.Cells[1] + " reward 1\n"; stderr.String() != want {
		t.Errorf("progress %q, want only the line %q of the cell run again", stderr.String(), want)
	}
}

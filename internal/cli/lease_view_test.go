package cli

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestRunsShowExpiredLeaseOnACluster: on a cluster (--nats), a run whose
// owner stopped renewing its lease is shown stale ("running*") with the
// way to continue it, and a run whose lease is current is shown running.
func TestRunsShowExpiredLeaseOnACluster(t *testing.T) {
	t.Parallel()
	now := time.Now()
	dead := bus.RunRecord{ID: "01DEADRUN000000000000000000", Status: bus.StatusRunning, Owner: "host-a/4242",
		StartedAt: now.Add(-time.Hour).UTC().Format(time.RFC3339), Spec: events.RunSpec{Harnesses: []string{"oracle"}}}
	dead.Renew(now.Add(-10*time.Minute), time.Minute)
	live := bus.RunRecord{ID: "01LIVERUN000000000000000000", Status: bus.StatusRunning, Owner: "host-b/7",
		StartedAt: now.UTC().Format(time.RFC3339), Spec: events.RunSpec{Harnesses: []string{"oracle"}}}
	live.Renew(now, time.Hour)
	url := runsOnABus(t, dead, live)

	list := mustProctor(t, "runs", "list", "--nats", url)
	if !strings.Contains(list, dead.ID[:10]+"  running*") {
		t.Errorf("the run with an expired lease is not shown stale:\n%s", list)
	}
	if !strings.Contains(list, live.ID[:10]+"  running ") {
		t.Errorf("the run with a current lease is not shown running:\n%s", list)
	}
	show := mustProctor(t, "runs", "show", dead.ID, "--nats", url)
	if !strings.Contains(show, "lease ended at "+dead.LeaseUntil) || !strings.Contains(show, "host-a/4242") ||
		!strings.Contains(show, "proctor runs resume "+dead.ID) {
		t.Errorf("runs show of the expired run:\n%s", show)
	}
	if show := mustProctor(t, "runs", "show", live.ID, "--nats", url); strings.Contains(show, "note ") {
		t.Errorf("runs show of the live run has a note:\n%s", show)
	}
}

// runsOnABus gives the test its own PROCTOR_HOME and a bus holding runs in
// its index, and returns the bus's URL for --nats.
func runsOnABus(t *testing.T, runs ...bus.RunRecord) string {
	t.Helper()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	b, e := bustest.Bus(t)
	for _, r := range runs {
		if err := b.PutRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return e.ClientURL()
}

// TestRunsShowDeadRunOnTheEmbeddedStore: on the embedded store, a run
// whose process died (running, no proctor serving the store) is shown
// stale with the way to continue it, `proctor runs resume RUN`, beside
// replay.
func TestRunsShowDeadRunOnTheEmbeddedStore(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	g := testGlobals(t, io.Discard, io.Discard)
	conn, err := g.connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dead := bus.RunRecord{ID: events.NewID(), Status: bus.StatusRunning, Owner: "vm/4242",
		StartedAt: time.Now().UTC().Format(time.RFC3339), Spec: events.RunSpec{Harnesses: []string{"oracle"}}}
	if err := conn.PutRun(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	conn.Close() // the run's process is gone: nothing serves the store
	if list := mustProctor(t, "runs", "list"); !strings.Contains(list, dead.ID[:10]+"  running*") {
		t.Errorf("the dead run is not shown stale:\n%s", list)
	}
	show := mustProctor(t, "runs", "show", dead.ID)
	if !strings.Contains(show, "the run's process died; `proctor runs resume "+dead.ID+"` continues it; `proctor replay "+dead.ID+"` projects what finished") {
		t.Errorf("runs show of the dead run does not say how to continue it:\n%s", show)
	}
}

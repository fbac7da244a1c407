package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// TestFetchAnErroredCellsOutput: a cell whose last terminal event is a
// CellErrored naming a stored output (a worker stored its logs before
// erroring it) is materialised by the driver as a verdict's is: its
// files, under the output directory asked for; a cell whose errored event
// names none (errored off the worker) is left alone.
func TestFetchAnErroredCellsOutput(t *testing.T) {
	ctx := context.Background()
	b, store, run, specOut, worker := storedOutputsFixture(t, bus.StatusRunning, "errored (sandbox): no space\n")
	stored, err := trees.PutOutput(ctx, store, trees.OutputName(run, "t/oracle/m/1", 1), worker)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cell, dir string
		out       *events.OutputObject
	}{
		{"t/oracle/m/1", "t", &events.OutputObject{Object: stored.Name, Digest: stored.Digest}},
		{"u/oracle/m/1", "u", nil},
	} {
		plan := events.CellPlannedData{Harness: "oracle", OutputDir: filepath.Join(specOut, c.dir)}
		for _, e := range []events.Envelope{
			events.Must(events.CellPlanned, run, c.cell, 1, "planner", plan),
			events.Must(events.CellErrored, run, c.cell, 1, "launcher", events.CellErroredData{ErrorClass: "sandbox", Error: "no space", Output: c.out}),
		} {
			if err := b.Publish(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	f, err := newOutputFetcher(ctx, b, run, elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := f.all(ctx)
	if err != nil || n != 1 {
		t.Fatalf("fetched %d outputs (%v), want 1", n, err)
	}
	log, err := os.ReadFile(filepath.Join(elsewhere, "t", "run.log"))
	if err != nil || string(log) != "errored (sandbox): no space\n" {
		t.Errorf("the errored cell's run.log under the output directory: %q, %v", log, err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "u")); err == nil {
		t.Error("a directory was written for the cell that stored nothing")
	}
}

// TestFetchOfOutputsGCRemoved: a run whose stored outputs gc removed
// (one of two here) fetches what is left and fails with one error that
// counts the outputs gone and says why and what rebuilds the run's
// results, not one not-found line per cell.
func TestFetchOfOutputsGCRemoved(t *testing.T) {
	ctx := context.Background()
	b, store, run, specOut, worker := storedOutputsFixture(t, bus.StatusFinished, "passed\n")
	for _, c := range []struct{ cell, dir string }{{"t/oracle/m/1", "t"}, {"u/oracle/m/1", "u"}} {
		o, err := trees.PutOutput(ctx, store, trees.OutputName(run, c.cell, 1), worker)
		if err != nil {
			t.Fatal(err)
		}
		plan := events.CellPlannedData{Harness: "oracle", OutputDir: filepath.Join(specOut, c.dir)}
		for _, e := range []events.Envelope{
			events.Must(events.CellPlanned, run, c.cell, 1, "planner", plan),
			events.Must(events.Verdict, run, c.cell, 1, "verifier", events.VerdictData{Output: &events.OutputObject{Object: o.Name, Digest: o.Digest}}),
		} {
			if err := b.Publish(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if c.dir == "t" {
			if err := store.Delete(ctx, o.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	f, err := newOutputFetcher(ctx, b, run, elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	n, stored, err := f.all(ctx)
	if n != 1 || stored != 2 {
		t.Errorf("fetched %d of %d stored outputs, want 1 of 2", n, stored)
	}
	want := "1 of the run's 2 stored cell outputs is no longer in the bucket: proctor gc removes the stored outputs of ended runs " +
		"(the run's artifact and report are rebuilt from its log by proctor replay " + run + ")"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "u", "run.log")); err != nil {
		t.Errorf("the output still stored was not written: %v", err)
	}
}

// signalHandler is a slog handler that closes ch at its first warning.
type signalHandler struct {
	once *sync.Once
	ch   chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestOutputFetchRetriesWhileTheServerIsDown: a cell's stored output
// fetched while the NATS server is down (a node of a cluster lost as the
// driver writes a run's outputs) is fetched once the server is back, not
// given up: the first try fails, the server restarts on its store, and
// the output's files land whole at the cell's directory.
func TestOutputFetchRetriesWhileTheServerIsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startRestartable(t)
	b, bucket := srv.b, srv.bucket
	cell := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cell, "logs", "verifier"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cell, "logs", "verifier", "reward.txt"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := trees.PutOutput(ctx, bucket, trees.OutputName("R", "t/oracle/default/1", 1), cell)
	if err != nil {
		t.Fatal(err)
	}
	srv.shutdown()

	failed := make(chan struct{})
	out := t.TempDir()
	f := &outputFetcher{b: b, runID: "R", specOut: out, fetched: map[string]bool{},
		log: slog.New(signalHandler{once: &sync.Once{}, ch: failed})}
	dest := filepath.Join(out, "t", "oracle", "default", "1")
	done := make(chan error, 1)
	// The driver's context has no deadline, so the JetStream client
	// bounds each request by its own timeout; so does this one's.
	fctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, err := f.fetch(fctx, events.OutputObject{Object: o.Name, Digest: o.Digest}, dest)
		done <- err
	}()
	select {
	case <-failed: // the first try failed with the server down
	case err := <-done:
		t.Fatalf("fetch ended with the server down: %v", err)
	case <-ctx.Done():
		t.Fatal("the fetch neither failed nor ended")
	}
	srv.restart(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fetch after the restart: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the fetch did not end after the restart")
	}
	if b, err := os.ReadFile(filepath.Join(dest, "logs", "verifier", "reward.txt")); err != nil || string(b) != "1\n" {
		t.Errorf("reward.txt at the cell's directory: %q, %v", b, err)
	}
}

// TestOutputsAllRetriesWhileTheServerIsDown: the driver's last pass over
// a run's outputs (outputFetcher.all), begun while the NATS server is
// down, reads the run's log once the server is back and writes the
// cell's output, not giving up at the first timed-out read.
func TestOutputsAllRetriesWhileTheServerIsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startRestartable(t)
	b, bucket := srv.b, srv.bucket
	cell := t.TempDir()
	if err := os.WriteFile(filepath.Join(cell, "reward.txt"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const run, id = "R", "t/oracle/default/1"
	o, err := trees.PutOutput(ctx, bucket, trees.OutputName(run, id, 1), cell)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	dest := filepath.Join(out, "t", "oracle", "default", "1")
	reward := 1.0
	if err := b.PublishAll(ctx,
		events.Must(events.RunRequested, run, "", 0, "test", events.RunRequestedData{}),
		events.Must(events.CellPlanned, run, id, 0, "planner", events.CellPlannedData{OutputDir: dest}),
		events.Must(events.Verdict, run, id, 1, "verifier", events.VerdictData{Reward: &reward, Output: &events.OutputObject{Object: o.Name, Digest: o.Digest}}),
	); err != nil {
		t.Fatal(err)
	}
	srv.shutdown()

	failed := make(chan struct{})
	f := &outputFetcher{b: b, runID: run, specOut: out, fetched: map[string]bool{},
		log: slog.New(signalHandler{once: &sync.Once{}, ch: failed})}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	fctx, stop := context.WithCancel(context.Background()) // no deadline, as the driver's
	defer stop()
	go func() {
		n, _, err := f.all(fctx)
		done <- result{n, err}
	}()
	select {
	case <-failed: // the first read failed with the server down
	case r := <-done:
		t.Fatalf("all ended with the server down: %d, %v", r.n, r.err)
	case <-ctx.Done():
		t.Fatal("all neither failed nor ended")
	}
	srv.restart(t)
	select {
	case r := <-done:
		if r.err != nil || r.n != 1 {
			t.Fatalf("all after the restart: %d written, %v; want 1", r.n, r.err)
		}
	case <-ctx.Done():
		t.Fatal("all did not end after the restart")
	}
	if b, err := os.ReadFile(filepath.Join(dest, "reward.txt")); err != nil || string(b) != "1\n" {
		t.Errorf("reward.txt at the cell's directory: %q, %v", b, err)
	}
}

// restartable is an embedded NATS server that a test shuts down and
// starts again on the same store and port, with a client connected
// through both and the PROCTOR_TREES bucket opened.
type restartable struct {
	store  string
	port   int
	srv    *bus.Embedded
	b      *bus.Bus
	bucket jetstream.ObjectStore
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{store: t.TempDir(), port: testutil.FreePorts(t, 1)[0]}
	r.restart(t)
	b, err := bus.Connect(context.Background(), r.srv.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if r.bucket, err = trees.Open(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	r.b = b
	return r
}

func (r *restartable) shutdown() { r.srv.Shutdown() }

func (r *restartable) restart(t *testing.T) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: r.store, Port: r.port})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	t.Cleanup(srv.Shutdown)
}

// storedOutputsFixture gives a fetch test a bus with its object store, a
// run in the index with status whose planned output directory is specOut,
// and a worker's cell directory holding a run.log of log.
func storedOutputsFixture(t *testing.T, status, log string) (b *bus.Bus, store jetstream.ObjectStore, run, specOut, worker string) {
	t.Helper()
	ctx := context.Background()
	b, _ = bustest.Bus(t)
	store, err := trees.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	run = events.NewID()
	specOut = filepath.Join(t.TempDir(), "planned")
	if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: status, Spec: events.RunSpec{OutputDir: specOut}}); err != nil {
		t.Fatal(err)
	}
	worker = t.TempDir()
	if err := os.WriteFile(filepath.Join(worker, "run.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	return b, store, run, specOut, worker
}

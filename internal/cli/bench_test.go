package cli

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

func benchCells() int {
	if n, err := strconv.Atoi(os.Getenv("PROCTOR_BENCH_CELLS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// BenchmarkOracleCell measures the per-cell cost of whole oracle runs
// (embedded NATS, planner, launcher, verifier, aggregator, artifact) of a
// task whose solve and verify do nothing, one cell at a time, against the
// bare Docker API doing the least a cell needs: create + start of a
// `--network none` container, two execs, forced remove. The per-cell cost
// is the slope between runs of n and 3n cells; the run's fixed cost is
// reported apart (run-fixed-ms). Target: ratio <= 1.2.
func BenchmarkOracleCell(b *testing.B) {
	cli := testutil.Docker(b)
	testutil.RequireImage(b, cli, "debian:bookworm-slim")
	n := benchCells()
	root, _ := filepath.Abs("testdata/true-root")
	ctx := context.Background()
	exec := func(id string) {
		ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var sink bytes.Buffer
		_, _ = sink.ReadFrom(att.Reader)
		att.Close()
	}
	// Build the task image once, outside the measurement.
	b.Setenv("PROCTOR_HOME", b.TempDir())
	if code := Main([]string{"tasks", "run", "--tasks-root", root, "--all", "--output-dir", b.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
		b.Fatalf("warm-up run exit %d", code)
	}
	run := func(cells int) time.Duration {
		var stderr bytes.Buffer
		t0 := time.Now()
		code := Main([]string{"tasks", "run", "--tasks-root", root, "--all", "--repeats", strconv.Itoa(cells), "--concurrency", "1",
			"--output-dir", b.TempDir()}, &bytes.Buffer{}, &stderr)
		if code != 0 {
			b.Fatalf("run exit %d: %s", code, stderr.String())
		}
		return time.Since(t0)
	}
	// The marginal cost of a cell is the slope between a run of n cells and
	// one of 3n: what a run pays once (starting the embedded server,
	// planning, writing the artifact) cancels out and is reported apart.
	var rawTotal, small, large time.Duration
	for b.Loop() {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			c, err := cli.ContainerCreate(ctx, &container.Config{Image: "debian:bookworm-slim", Entrypoint: []string{"sleep", "600"}},
				&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
			if err != nil {
				b.Fatal(err)
			}
			if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
				b.Fatal(err)
			}
			exec(c.ID)
			exec(c.ID)
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
				b.Fatal(err)
			}
		}
		rawTotal += time.Since(t0)
		small += run(n)
		large += run(3 * n)
	}
	rawCell := float64(rawTotal.Milliseconds()) / float64(b.N*n)
	cell := float64((large - small).Milliseconds()) / float64(b.N*2*n)
	fixed := float64(small.Milliseconds())/float64(b.N) - cell*float64(n)
	b.ReportMetric(rawCell, "raw-ms/cell")
	b.ReportMetric(cell, "proctor-ms/cell")
	b.ReportMetric(fixed, "run-fixed-ms")
	b.ReportMetric(cell/rawCell, "ratio")
}

// BenchmarkCellThroughput measures cells per second at concurrency 4
// through proctor's whole pipeline (embedded NATS, planner, launcher,
// verifier, aggregator, artifact; the docker driver) for a task whose
// solve and verify are `true`, against the floor: bare Docker API
// lifecycles at concurrency 4 with the same client, each the least a cell
// needs (create + start of a `--network none` container, two execs,
// forced remove), and nothing else (no event log, no files, no image
// check, no copies in or out). Each side's rate is the slope between a
// run of 4 cells (one wave: what a run pays once, starting the server,
// planning, writing the artifact, the ramp-up and drain) and one of 4+n
// (n = 32, PROCTOR_BENCH_THROUGHPUT_CELLS), so only the steady state is
// compared. The latency is the median over the larger run: a cell's
// elapsed_sec from the artifact (its own time, the wait for a slot apart)
// against a bare lifecycle's duration. Targets: ratio_vs_floor (cells/s)
// >= 0.8, latency_ratio <= 1.2.
func BenchmarkCellThroughput(b *testing.B) {
	cli := testutil.Docker(b)
	testutil.RequireImage(b, cli, "debian:bookworm-slim")
	const conc = 4
	n := 32
	if v, err := strconv.Atoi(os.Getenv("PROCTOR_BENCH_THROUGHPUT_CELLS")); err == nil && v > 0 {
		n = v
	}
	root, _ := filepath.Abs("testdata/true-root")
	ctx := context.Background()
	b.Setenv("PROCTOR_HOME", b.TempDir())
	if code := Main([]string{"tasks", "run", "--tasks-root", root, "--all", "--output-dir", b.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
		b.Fatalf("warm-up run exit %d", code)
	}
	exec := func(id string) error {
		ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			return err
		}
		att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
		if err != nil {
			return err
		}
		var sink bytes.Buffer
		_, _ = sink.ReadFrom(att.Reader)
		att.Close()
		return nil
	}
	lifecycle := func() (time.Duration, error) {
		t0 := time.Now()
		c, err := cli.ContainerCreate(ctx, &container.Config{Image: "debian:bookworm-slim", Entrypoint: []string{"sleep", "600"},
			Labels: map[string]string{"proctor.bench": "throughput"}},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			return 0, err
		}
		defer func() { _ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }()
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			return 0, err
		}
		if err := exec(c.ID); err != nil {
			return 0, err
		}
		if err := exec(c.ID); err != nil {
			return 0, err
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	// floor runs cells bare lifecycles, conc at a time, and returns the
	// wall time and each lifecycle's duration.
	floor := func(cells int) (time.Duration, []float64) {
		jobs := make(chan struct{}, cells)
		for range cells {
			jobs <- struct{}{}
		}
		close(jobs)
		var mu sync.Mutex
		var lat []float64
		var wg sync.WaitGroup
		errs := make(chan error, conc)
		t0 := time.Now()
		for range conc {
			wg.Go(func() {
				for range jobs {
					d, err := lifecycle()
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					lat = append(lat, d.Seconds())
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		wall := time.Since(t0)
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		return wall, lat
	}
	run := func(cells int) (time.Duration, []float64) {
		var stderr bytes.Buffer
		out := b.TempDir()
		t0 := time.Now()
		code := Main([]string{"tasks", "run", "--tasks-root", root, "--all", "--repeats", strconv.Itoa(cells), "--concurrency", strconv.Itoa(conc),
			"--output-dir", out}, &bytes.Buffer{}, &stderr)
		wall := time.Since(t0)
		if code != 0 {
			b.Fatalf("run exit %d: %s", code, stderr.String())
		}
		arts, _ := filepath.Glob(filepath.Join(out, "*", "task_runs.json"))
		if len(arts) != 1 {
			b.Fatalf("artifacts %v, want 1", arts)
		}
		a, err := artifact.Read(arts[0])
		if err != nil {
			b.Fatal(err)
		}
		var lat []float64
		for _, r := range a.Results {
			if !r.Passed {
				b.Fatalf("cell %s: outcome %s, want passed", r.CellID, r.Outcome)
			}
			lat = append(lat, r.ElapsedSec)
		}
		if len(lat) != cells {
			b.Fatalf("%d rows, want %d", len(lat), cells)
		}
		return wall, lat
	}
	var floorWall, procWall time.Duration
	var floorLat, procLat []float64
	for b.Loop() {
		w0, _ := floor(conc)
		w1, lat := floor(conc + n)
		floorWall += w1 - w0
		floorLat = append(floorLat, lat...)
		w0, _ = run(conc)
		w1, lat = run(conc + n)
		procWall += w1 - w0
		procLat = append(procLat, lat...)
	}
	floorRate := float64(b.N*n) / floorWall.Seconds()
	procRate := float64(b.N*n) / procWall.Seconds()
	fm, pm := median(floorLat), median(procLat)
	b.ReportMetric(floorRate, "floor-cells/s")
	b.ReportMetric(procRate, "proctor-cells/s")
	b.ReportMetric(procRate/floorRate, "ratio_vs_floor")
	b.ReportMetric(fm*1000, "floor-median-ms")
	b.ReportMetric(pm*1000, "proctor-median-ms")
	b.ReportMetric(pm/fm, "latency_ratio")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkColdStart measures `proctor runs list` on a store holding
// PROCTOR_BENCH_EVENTS events (100,000 by default; 1000000 for the
// issue's size) of one finished run, with no proctor serving it (so the
// command starts the embedded server on the store itself), against the
// floor: the bare embedded server restarted on the same store, a client
// connected, and the event stream's info read, nothing else. Each is
// timed 3 times, alternating, and the median kept. Target: proctor_s <=
// 1.5 × floor_s + 0.5 s, reported as budget_ratio = proctor_s / (1.5 ×
// floor_s + 0.5) <= 1; ratio_vs_floor is proctor_s / floor_s.
func BenchmarkColdStart(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("PROCTOR_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	home := b.TempDir()
	b.Setenv("PROCTOR_HOME", home)
	store := filepath.Join(home, "jetstream")
	ctx := context.Background()
	runID := events.NewID()
	{
		e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: store})
		if err != nil {
			b.Fatal(err)
		}
		bs, err := bus.Connect(ctx, e.ClientURL(), nil)
		if err != nil {
			b.Fatal(err)
		}
		cost := 0.0042
		for i := range n {
			cell := events.CellID(fmt.Sprintf("task-%03d", i%1000/10), "oracle", "m", i%10+1)
			if err := bs.Publish(ctx, events.Must(events.Usage, runID, cell, 1, "bench",
				events.UsageData{Model: "m", PromptTokens: events.Count(1834), CompletionTokens: events.Count(212), CostUSD: &cost, Calls: events.Count(1)})); err != nil {
				b.Fatal(err)
			}
		}
		if err := bs.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := bs.PutRun(ctx, bus.RunRecord{ID: runID, Status: bus.StatusFinished, Cells: 1000, Counts: map[string]int{"passed": 1000},
			StartedAt: "2025-01-15T10:00:00Z", FinishedAt: "2025-01-15T11:00:00Z", Spec: events.RunSpec{Harnesses: []string{"oracle"}}}); err != nil {
			b.Fatal(err)
		}
		bs.Close()
		e.Shutdown()
	}
	floor := func() time.Duration {
		t0 := time.Now()
		e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: store})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Shutdown()
		nc, err := nats.Connect(e.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		s, err := js.Stream(ctx, bus.EventsStream)
		if err != nil {
			b.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if info.State.Msgs != uint64(n) {
			b.Fatalf("stream holds %d events, want %d", info.State.Msgs, n)
		}
		return d
	}
	list := func() time.Duration {
		var stdout, stderr bytes.Buffer
		t0 := time.Now()
		code := Main([]string{"runs", "list"}, &stdout, &stderr)
		d := time.Since(t0)
		if code != 0 || !strings.Contains(stdout.String(), runID[:10]) {
			b.Fatalf("runs list exit %d: %s%s", code, stdout.String(), stderr.String())
		}
		return d
	}
	var fs, ps []float64
	for b.Loop() {
		for range 3 {
			fs = append(fs, floor().Seconds())
			ps = append(ps, list().Seconds())
		}
	}
	f, p := median(fs), median(ps)
	b.ReportMetric(f, "floor_s")
	b.ReportMetric(p, "proctor_s")
	b.ReportMetric(p/f, "ratio_vs_floor")
	b.ReportMetric(p/(1.5*f+0.5), "budget_ratio")
}

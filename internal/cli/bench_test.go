package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/internal/testutil"
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

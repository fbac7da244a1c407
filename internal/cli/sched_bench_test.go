package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// schedTask writes an oracle task whose solve sleeps solveSec (the
// stand-in for a model's minutes) and whose verifier writes reward 1; its
// Dockerfile carries mark so each benchmark run builds its own image.
// test replaces the verifier's script when not "".
func schedTask(b *testing.B, root, name, mark string, solveSec, verifySec float64, test string) {
	b.Helper()
	if test == "" {
		test = "#!/bin/bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
	}
	for p, body := range map[string]string{
		"task.toml":              fmt.Sprintf("version = \"1.0\"\n[verifier]\ntimeout_sec = %g\n[agent]\ntimeout_sec = %g\n", verifySec, solveSec+60),
		"instruction.md":         "Wait.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nLABEL proctor.bench-sched=" + mark + "\nRUN echo " + name + " > /etc/task-name\nWORKDIR /app\n",
		"solution/solve.sh":      fmt.Sprintf("#!/bin/bash\nsleep %g\n", solveSec),
		"tests/test.sh":          test,
	} {
		p = filepath.Join(root, name, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			b.Fatal(err)
		}
	}
}

// schedRun is one `tasks run` of a scheduling benchmark: its wall time,
// artifact and events by cell.
type schedRun struct {
	t0   time.Time
	wall time.Duration
	a    *artifact.Artifact
	evs  map[string][]events.Envelope
}

func runSched(b *testing.B, home, root string, conc, repeats int, extra ...string) schedRun {
	b.Helper()
	out := b.TempDir()
	js := filepath.Join(out, "a.json")
	var stderr bytes.Buffer
	args := append([]string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle",
		"--repeats", strconv.Itoa(repeats), "--concurrency", strconv.Itoa(conc), "--output-dir", out, "--out-json", js}, extra...)
	t0 := time.Now()
	code := Main(args, &bytes.Buffer{}, &stderr)
	wall := time.Since(t0)
	if code != 0 && code != 1 {
		b.Fatalf("run exit %d: %s", code, stderr.String())
	}
	a, err := artifact.Read(js)
	if err != nil {
		b.Fatalf("%v: %s", err, stderr.String())
	}
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "jetstream")})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown()
	bb, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	evs := map[string][]events.Envelope{}
	if err := bb.ReadRun(context.Background(), a.Run.ID, func(e events.Envelope) error {
		evs[e.CellID] = append(evs[e.CellID], e)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return schedRun{t0: t0, wall: wall, a: a, evs: evs}
}

// solves returns each cell's solve span (Started, and Finished's
// duration_sec after it) and its image wait (ImageBuilt's build_sec).
func (r schedRun) solves() (starts, ends []time.Time, imageWait []float64) {
	for _, evs := range r.evs {
		var st time.Time
		for _, e := range evs {
			switch e.Type {
			case events.ImageBuilt:
				var d events.ImageBuiltData
				if events.Into(e, &d) == nil {
					imageWait = append(imageWait, d.BuildSec)
				}
			case events.Started:
				st = e.At
			case events.Finished:
				var d events.FinishedData
				if !st.IsZero() && events.Into(e, &d) == nil {
					starts = append(starts, st)
					ends = append(ends, st.Add(time.Duration(d.DurationSec*float64(time.Second))))
				}
			}
		}
	}
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	slices.SortFunc(ends, func(x, y time.Time) int { return x.Compare(y) })
	return starts, ends, imageWait
}

// refills are the slot-refill latencies of a run at concurrency conc, in
// ms: the k-th solve end to the (k+conc)-th solve start, both sorted (a
// slot freed is the next one taken).
func refills(starts, ends []time.Time, conc int) []float64 {
	var out []float64
	for k := 0; k+conc < len(starts) && k < len(ends); k++ {
		out = append(out, float64(starts[k+conc].Sub(ends[k]).Microseconds())/1000)
	}
	slices.Sort(out)
	return out
}

func pctl(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkScheduling measures whether the scheduler wastes slots
// (issue: a scheduler that wastes no slot), with oracle cells whose solve
// sleeps PROCTOR_BENCH_SCHED_SLEEP seconds (20) and whose verifier is
// trivial, through the whole pipeline (embedded NATS, `tasks run`):
//
//   - prebuilt: PROCTOR_BENCH_SCHED_CELLS cells (48) of one task whose
//     image is built by a warm-up run of one cell at concurrency 1 (its
//     wall time less the sleep is one cell's fixed cost), at concurrency
//     PROCTOR_BENCH_SCHED_CONC (8). ideal_s = cells/conc × sleep + the
//     fixed cost; efficiency = ideal_s / makespan_s (target ≥ 0.95). The
//     slot-refill latency (a solve's end to the next solve's start, from
//     the events) is reported at p50 and p99 (refill_p50_ms,
//     refill_p99_ms).
//   - builds: the same number of cells over 3 tasks whose images are
//     new (built in the run): build_makespan_s against build_ideal_s (the
//     prebuilt ideal plus the longest image wait), and how long cells
//     waited for their images (image_wait_p50_s, image_wait_max_s:
//     ImageBuilt's build_sec, a cell's wait for its own image's build).
//   - a wedge: conc cells of one task plus one cell whose verifier ignores
//     SIGTERM and sleeps forever (verifier budget 5 s): the run ends, the
//     wedged cell ends with its cause (verifier_timeout, scored 0 as
//     Harbor does, or an errored outcome), never passed or failed, and the
//     run's wall time less its budget (one wave: the sleep, the fixed
//     cost, and 30 s of slack for the wedge's verifier budget, its grace
//     before SIGKILL and the freeze) is wedge_over_budget_s (target ≤ 0).
//
// PROCTOR_BENCH_SCHED_PARTS, a comma-separated list of "prebuilt",
// "builds" and "wedge", runs only those parts (default all).
func BenchmarkScheduling(b *testing.B) {
	cli := testutil.Docker(b)
	testutil.RequireImage(b, cli, "debian:bookworm-slim")
	sleep := 20.0
	if v, err := strconv.ParseFloat(os.Getenv("PROCTOR_BENCH_SCHED_SLEEP"), 64); err == nil && v > 0 {
		sleep = v
	}
	part := func(name string) bool {
		v := os.Getenv("PROCTOR_BENCH_SCHED_PARTS")
		return v == "" || slices.Contains(strings.Split(v, ","), name)
	}
	cells := envInt("PROCTOR_BENCH_SCHED_CELLS", 48)
	conc := envInt("PROCTOR_BENCH_SCHED_CONC", 8)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	mark := hex.EncodeToString(rnd[:])
	b.Cleanup(func() { removeLabelled(cli, "proctor.bench-sched="+mark) })
	for b.Loop() {
		home := b.TempDir()
		b.Setenv("PROCTOR_HOME", home)
		// Prebuilt.
		root := filepath.Join(b.TempDir(), "one")
		schedTask(b, root, "sched-one", mark, sleep, 30, "")
		warm := runSched(b, home, root, 1, 1)
		fixed := warm.wall.Seconds() - sleep
		ideal := float64((cells+conc-1)/conc)*sleep + fixed
		b.ReportMetric(fixed, "fixed_s")
		if part("prebuilt") {
			r := runSched(b, home, root, conc, cells)
			if n := passed(r.a); n != cells {
				b.Errorf("%d of %d cells passed: %s", n, cells, notPassed(r.a))
			}
			starts, ends, _ := r.solves()
			ref := refills(starts, ends, conc)
			b.ReportMetric(r.wall.Seconds(), "makespan_s")
			b.ReportMetric(ideal, "ideal_s")
			b.ReportMetric(ideal/r.wall.Seconds(), "efficiency")
			// Where the makespan beyond the solves goes: the run's start to
			// its conc-th solve (every slot solving), and its last solve's end
			// to the run's end.
			if len(starts) >= conc && len(ends) > 0 {
				b.ReportMetric(starts[conc-1].Sub(r.t0).Seconds(), "head_s")
				b.ReportMetric(r.t0.Add(r.wall).Sub(ends[len(ends)-1]).Seconds(), "tail_s")
			}
			b.ReportMetric(pctl(ref, 0.5), "refill_p50_ms")
			b.ReportMetric(pctl(ref, 0.99), "refill_p99_ms")
		}
		if part("builds") {
			// Three images to build.
			root3 := filepath.Join(b.TempDir(), "three")
			for i := range 3 {
				schedTask(b, root3, fmt.Sprintf("sched-build-%d", i), mark, sleep, 30, "")
			}
			r3 := runSched(b, home, root3, conc, (cells+2)/3)
			if n := passed(r3.a); n != 3*((cells+2)/3) {
				b.Errorf("%d of %d cells passed: %s", n, 3*((cells+2)/3), notPassed(r3.a))
			}
			_, _, waits := r3.solves()
			b.ReportMetric(r3.wall.Seconds(), "build_makespan_s")
			b.ReportMetric(ideal+slices.Max(waits), "build_ideal_s")
			b.ReportMetric((ideal+slices.Max(waits))/r3.wall.Seconds(), "build_efficiency")
			b.ReportMetric(pctl(waits, 0.5), "image_wait_p50_s")
			b.ReportMetric(slices.Max(waits), "image_wait_max_s")

		}
		if part("wedge") {
			// A wedged verifier.
			rootW := filepath.Join(b.TempDir(), "wedge")
			schedTask(b, rootW, "sched-ok", mark, sleep, 30, "")
			schedTask(b, rootW, "sched-wedge", mark, 1, 5, "#!/bin/bash\ntrap '' TERM INT HUP\nwhile true; do sleep 1000 & wait; done\n")
			rw := runSched(b, home, rootW, conc, conc/2)
			var wedge *artifact.Result
			for i := range rw.a.Results {
				if rw.a.Results[i].Task == "sched-wedge" && rw.a.Results[i].Repeat == 1 {
					wedge = &rw.a.Results[i]
				}
			}
			// Ended with its cause, never a hang: verifier_timeout (scored
			// 0, as Harbor does: docs/results.md) or an errored outcome.
			if wedge == nil || wedge.Outcome == "passed" || wedge.Outcome == "failed" {
				b.Fatalf("the wedged cell: %+v, want verifier_timeout or an errored outcome naming its cause", wedge)
			}
			b.Logf("wedged cell: outcome %s, error %q", wedge.Outcome, wedge.Error)
			budget := sleep + fixed + 30
			b.ReportMetric(rw.wall.Seconds(), "wedge_makespan_s")
			b.ReportMetric(budget, "wedge_budget_s")
			b.ReportMetric(rw.wall.Seconds()-budget, "wedge_over_budget_s")
		}
	}
}

func passed(a *artifact.Artifact) int {
	n := 0
	for _, r := range a.Results {
		if r.Passed {
			n++
		}
	}
	return n
}

// notPassed describes the cells of a that did not pass.
func notPassed(a *artifact.Artifact) string {
	var out []string
	for _, r := range a.Results {
		if !r.Passed {
			out = append(out, fmt.Sprintf("%s: %s %s (%s)", r.CellID, r.Outcome, r.ErrorClass, r.Error))
		}
	}
	return strings.Join(out, "; ")
}

// removeLabelled removes the images carrying label (k=v).
func removeLabelled(cli *client.Client, label string) {
	ctx := context.Background()
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return
	}
	for _, im := range imgs {
		_, _ = cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	}
}

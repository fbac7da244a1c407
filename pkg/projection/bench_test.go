package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Benchmarks of the projection and of replay's read, each against its
// bare floor (floorFold, floorMessages: what the bare client library does
// with no proctor code) measured in the same run. The synthetic log has
// benchCells cells and PROCTOR_BENCH_EVENTS events, published with
// bus.Publish into one embedded server shared by the benchmarks.
//
// The floors read the stream without a per-run filter (the log holds one
// run): a consumer filtered on proctor.run.<id>.> is served 5-8× slower on
// a file store with ~12,000 subjects, which is why bus.ReadRun scans the
// run's sequence range instead. The default size is 100,000 events to keep
// `make bench` short; PROCTOR_BENCH_EVENTS=1000000 runs the full size.

const benchCells = 1000

// benchConcurrency is how many cells run at once in the synthetic log, so
// their events interleave as a launcher's do.
const benchConcurrency = 8

type benchLog struct {
	dir    string
	e      *bus.Embedded
	b      *bus.Bus
	runID  string
	events int
	bytes  int64
	pubSec float64
}

var (
	benchOnce sync.Once
	bench     *benchLog
	benchErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bench != nil {
		bench.b.Close()
		bench.e.Shutdown()
		os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

func benchEvents() (int, error) {
	s := os.Getenv("PROCTOR_BENCH_EVENTS")
	if s == "" {
		return 100_000, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < benchCells*10 {
		return 0, fmt.Errorf("PROCTOR_BENCH_EVENTS=%q: want an integer >= %d", s, benchCells*10)
	}
	return n, nil
}

// getBenchLog publishes the synthetic log once per test binary.
func getBenchLog(b *testing.B) *benchLog {
	b.Helper()
	benchOnce.Do(func() { bench, benchErr = newBenchLog() })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return bench
}

func newBenchLog() (*benchLog, error) {
	n, err := benchEvents()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "proctor-bench-")
	if err != nil {
		return nil, err
	}
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: dir})
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	b, err := bus.Connect(ctx, e.ClientURL(), nil)
	if err != nil {
		e.Shutdown()
		return nil, err
	}
	l := &benchLog{dir: dir, e: e, b: b, runID: events.NewID()}
	start := time.Now()
	if err := l.publish(ctx, n); err != nil {
		return nil, err
	}
	l.pubSec = time.Since(start).Seconds()
	info, err := b.Events.Info(ctx)
	if err != nil {
		return nil, err
	}
	l.bytes = int64(info.State.Bytes)
	return l, nil
}

// publish writes RunRequested, RunPlanned, then per cell CellPlanned,
// ImageBuilt, SandboxStarted, Started, a telemetry stream (Usage about
// half, ToolCall, Command, Message, Operation), Finished, VerifyStarted and
// Verdict, with benchConcurrency cells interleaved, then RunFinished: n
// events in all.
func (l *benchLog) publish(ctx context.Context, n int) error {
	t0 := time.Date(2025, 1, 15, 10, 0, 0, 0, time.UTC)
	clock := t0
	pub := func(t events.Type, cell string, data any) error {
		e := events.Must(t, l.runID, cell, 1, "bench", data)
		clock = clock.Add(time.Millisecond)
		e.At = clock
		l.events++
		return l.b.Publish(ctx, e)
	}
	spec := events.RunSpec{TasksRoot: "/tasks", All: true, Harnesses: []string{"oracle", "agent:bench"}, Models: []string{"m"}, Repeats: 5, OutputDir: "/out"}
	if err := pub(events.RunRequested, "", events.RunRequestedData{Spec: spec, ProctorVersion: "bench"}); err != nil {
		return err
	}
	if err := pub(events.RunPlanned, "", events.RunPlannedData{Cells: benchCells}); err != nil {
		return err
	}
	perCell := (n - 3) / benchCells
	extra := (n - 3) % benchCells
	cellID := func(i int) (string, string, string, int) {
		task := fmt.Sprintf("task-%03d", i/10)
		h := "oracle"
		if i%2 == 1 {
			h = "agent:bench"
		}
		rep := (i%10)/2 + 1
		return events.CellID(task, h, "m", rep), task, h, rep
	}
	for i := 0; i < benchCells; i++ {
		id, task, h, rep := cellID(i)
		if err := pub(events.CellPlanned, id, events.CellPlannedData{Task: task, Harness: h, Model: "m", Repeat: rep,
			TaskDir: "/tasks/" + task, TaskRevision: "0123456789ab", OutputDir: "/out/" + id,
			TaskMeta: map[string]any{"difficulty": "medium", "category": "bench", "tags": []string{"a", "b"}}}); err != nil {
			return err
		}
	}
	cost := 0.0042
	exit0 := 0
	for lo := 0; lo < benchCells; lo += benchConcurrency {
		hi := min(lo+benchConcurrency, benchCells)
		steps := make([]int, hi-lo)
		total := make([]int, hi-lo)
		for j := range total {
			total[j] = perCell - 1 // CellPlanned is out already
			if lo+j < extra {
				total[j]++
			}
		}
		for more := true; more; {
			more = false
			for j := range steps {
				if steps[j] >= total[j] {
					continue
				}
				more = true
				id, _, h, _ := cellID(lo + j)
				k, last := steps[j], total[j]-1
				steps[j]++
				var err error
				switch {
				case k == 0:
					err = pub(events.ImageBuilt, id, events.ImageBuiltData{Image: "proctor-task/x:0123456789ab", Cached: true, BuildSec: 0.01})
				case k == 1:
					err = pub(events.SandboxStarted, id, events.SandboxStartedData{Driver: "docker", ID: "3f2a9c0d1e4b", Node: "n1"})
				case k == 2:
					err = pub(events.Started, id, events.StartedData{Harness: h, Model: "m"})
				case k == last-2:
					err = pub(events.Finished, id, events.FinishedData{Reason: "exit 0", DurationSec: 12.5, StdoutTail: "all tests passed\n"})
				case k == last-1:
					err = pub(events.VerifyStarted, id, events.VerifyStartedData{Node: "n1"})
				case k == last:
					r := float64((lo + j) % 3 / 2)
					err = pub(events.Verdict, id, events.VerdictData{Reward: &r, Rewards: map[string]float64{"reward": r}, ReturnCode: &exit0, DurationSec: 1.25})
				default:
					switch k % 20 {
					case 0, 1, 2, 3, 4, 5, 6, 7, 8, 9:
						err = pub(events.Usage, id, events.UsageData{Model: "claude-sonnet-4", PromptTokens: events.Count(1834), CompletionTokens: events.Count(212), CacheReadTokens: events.Count(1536), CostUSD: &cost, Calls: events.Count(1)})
					case 10, 11, 12, 13:
						err = pub(events.ToolCall, id, events.ToolCallData{Name: []string{"bash", "edit", "read"}[k%3], Input: map[string]any{"cmd": "pytest -q tests/"}})
					case 14, 15, 16, 17:
						err = pub(events.Command, id, events.CommandData{Command: "pytest -q tests/", ExitCode: &exit0, Output: "....                                   [100%]\n4 passed in 0.12s\n"})
					case 18:
						err = pub(events.Message, id, events.MessageData{Role: "assistant", Text: "Running the tests again to check the fix."})
					default:
						err = pub(events.Operation, id, events.OperationData{OpType: "db_query", Fields: map[string]any{"rows": 3, "ms": 1.5}})
					}
				}
				if err != nil {
					return err
				}
			}
		}
	}
	if err := pub(events.RunFinished, "", events.RunFinishedData{Status: bus.StatusFinished}); err != nil {
		return err
	}
	return l.b.Flush(ctx)
}

// peak samples the heap in use every millisecond until stop is called,
// which returns the peak in bytes.
func peak() (stop func() uint64) {
	var max atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > max.Load() {
				max.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return max.Load() }
}

// measure runs f after a GC and returns its wall time, the peak heap in
// use and the bytes allocated.
func measure(b *testing.B, f func() error) (sec float64, peakHeap, alloc uint64) {
	b.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := peak()
	start := time.Now()
	err := f()
	sec = time.Since(start).Seconds()
	peakHeap = stop()
	runtime.ReadMemStats(&after)
	if err != nil {
		b.Fatal(err)
	}
	return sec, peakHeap, after.TotalAlloc - before.TotalAlloc
}

// floorMessages is the bare floor of reading the log: one ordered
// consumer on the whole stream (the benchmark's log holds this run only)
// with a Consume() callback, no per-message metadata parse; it stops after
// n messages, the count of stored messages known in advance (proctor's
// reader looks up the run's last sequence instead). It does not decode,
// dedupe, check versions or skip other runs' events. fn gets each
// message's data on the client's delivery goroutine.
func floorMessages(ctx context.Context, js jetstream.JetStream, n int, fn func([]byte) error) error {
	cons, err := js.OrderedConsumer(ctx, bus.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	seen := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if seen >= n {
			return
		}
		seen++
		if err := fn(m.Data()); err != nil {
			seen = n
			done <- err
			return
		}
		if seen == n {
			done <- nil
		}
	}, jetstream.PullMaxMessages(2048))
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rawCell is the state a hand-written projection keeps per cell.
type rawCell struct {
	plan                      events.CellPlannedData
	prompt, completion, calls int64
	cost                      float64
	tools                     map[string]int
	ops                       int
	verdict                   *events.VerdictData
	finished                  *events.FinishedData
}

// floorFold is the bare floor of the projection: floorMessages, each
// envelope decoded with encoding/json into a typed struct and its data
// into the event's typed struct, folded into per-cell sums. It does not
// dedupe, track attempts, count decode errors, keep operations, build the
// artifact or render anything.
func floorFold(ctx context.Context, js jetstream.JetStream, n int) (map[string]*rawCell, error) {
	cells := map[string]*rawCell{}
	err := floorMessages(ctx, js, n, func(data []byte) error {
		var e events.Envelope
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		if e.CellID == "" {
			return nil
		}
		c := cells[e.CellID]
		if c == nil {
			c = &rawCell{}
			cells[e.CellID] = c
		}
		switch e.Type {
		case events.CellPlanned:
			return json.Unmarshal(e.Data, &c.plan)
		case events.Usage:
			var u events.UsageData
			if err := json.Unmarshal(e.Data, &u); err != nil {
				return err
			}
			if u.PromptTokens != nil {
				c.prompt += *u.PromptTokens
			}
			if u.CompletionTokens != nil {
				c.completion += *u.CompletionTokens
			}
			if u.Calls != nil {
				c.calls += *u.Calls
			} else {
				c.calls++
			}
			if u.CostUSD != nil {
				c.cost += *u.CostUSD
			}
		case events.ToolCall:
			var t events.ToolCallData
			if err := json.Unmarshal(e.Data, &t); err != nil {
				return err
			}
			if c.tools == nil {
				c.tools = map[string]int{}
			}
			c.tools[t.Name]++
		case events.Operation:
			var o events.OperationData
			if err := json.Unmarshal(e.Data, &o); err != nil {
				return err
			}
			c.ops++
		case events.Finished:
			c.finished = new(events.FinishedData)
			return json.Unmarshal(e.Data, c.finished)
		case events.Verdict:
			c.verdict = new(events.VerdictData)
			return json.Unmarshal(e.Data, c.verdict)
		}
		return nil
	})
	return cells, err
}

// benchRounds is how many times each benchmark alternates its measured
// code and its baselines; the fastest round of each is reported, so a
// burst of load from other processes on a shared machine does not decide
// a ratio. PROCTOR_BENCH_ROUNDS overrides the default of 2.
func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("PROCTOR_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// best keeps the fastest time, the highest peak heap and the lowest
// allocation of the rounds of one measured function.
type best struct {
	sec         float64
	peak, alloc uint64
}

func (m *best) add(sec float64, peak, alloc uint64) {
	if m.sec == 0 || sec < m.sec {
		m.sec = sec
	}
	m.peak = max(m.peak, peak)
	if m.alloc == 0 || alloc < m.alloc {
		m.alloc = alloc
	}
}

// BenchmarkProjection projects the synthetic log into the task_runs.v1
// artifact and report (Project + Render) and compares it with floorFold,
// the bare floor, in the same run, alternating the two benchRounds times.
// Metrics: proctor_s and floor_s (seconds, fastest round), ratio_vs_floor
// (proctor time / floor time; target <= 1.5), events/s, peak heap in use
// during each (MB; the embedded server runs in the same process, so its
// caches are included) and bytes allocated by the projection (MB).
func BenchmarkProjection(b *testing.B) {
	l := getBenchLog(b)
	ctx := context.Background()
	b.ResetTimer()
	var floor, got best
	var js []byte
	for b.Loop() {
		for range benchRounds() {
			floor.add(measure(b, func() error {
				cells, err := floorFold(ctx, l.b.JS, l.events)
				if err == nil && len(cells) != benchCells {
					err = fmt.Errorf("floor fold saw %d cells", len(cells))
				}
				return err
			}))
			got.add(measure(b, func() error {
				p, err := Project(ctx, l.b, l.runID)
				if err != nil {
					return err
				}
				js, _, err = Render(p, "bench")
				return err
			}))
		}
	}
	b.StopTimer()
	if len(js) == 0 {
		b.Fatal("no artifact")
	}
	b.ReportMetric(float64(l.events), "events")
	b.ReportMetric(got.sec, "proctor_s")
	b.ReportMetric(floor.sec, "floor_s")
	b.ReportMetric(got.sec/floor.sec, "ratio_vs_floor")
	b.ReportMetric(float64(l.events)/got.sec, "events/s")
	b.ReportMetric(float64(got.peak)/1e6, "peak_heap_MB")
	b.ReportMetric(float64(floor.peak)/1e6, "floor_peak_heap_MB")
	b.ReportMetric(float64(got.alloc)/1e6, "alloc_MB")
	b.Logf("%d events over %d cells (%.0f MB stored, published in %.1f s): projection %.2f s, floor %.2f s, ratio %.2f (target <= 1.5); peak heap %.0f MB vs %.0f MB, %.0f MB allocated",
		l.events, benchCells, float64(l.bytes)/1e6, l.pubSec, got.sec, floor.sec, got.sec/floor.sec, float64(got.peak)/1e6, float64(floor.peak)/1e6, float64(got.alloc)/1e6)
}

// BenchmarkReplayRead reads the synthetic log as replay does
// (bus.ReadRun, which decodes each envelope) and with floorMessages, the
// bare floor that only counts messages, alternating them benchRounds
// times. ratio_vs_floor is ReadRun's throughput over the floor's (target
// >= 0.8); ratio_vs_floor_decode compares with the floor that also decodes
// each envelope with encoding/json.
func BenchmarkReplayRead(b *testing.B) {
	l := getBenchLog(b)
	ctx := context.Background()
	b.ResetTimer()
	var floor, floorDecode, got best
	for b.Loop() {
		for range benchRounds() {
			n := 0
			floor.add(measure(b, func() error {
				return floorMessages(ctx, l.b.JS, l.events, func([]byte) error { n++; return nil })
			}))
			if n != l.events {
				b.Fatalf("floor read %d events, want %d", n, l.events)
			}
			floorDecode.add(measure(b, func() error {
				return floorMessages(ctx, l.b.JS, l.events, func(d []byte) error {
					var e events.Envelope
					return json.Unmarshal(d, &e)
				})
			}))
			n = 0
			got.add(measure(b, func() error {
				return l.b.ReadRun(ctx, l.runID, func(events.Envelope) error { n++; return nil })
			}))
			if n != l.events {
				b.Fatalf("ReadRun read %d events, want %d", n, l.events)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(l.events), "events")
	b.ReportMetric(got.sec, "proctor_s")
	b.ReportMetric(floor.sec, "floor_s")
	b.ReportMetric(floor.sec/got.sec, "ratio_vs_floor")
	b.ReportMetric(floorDecode.sec/got.sec, "ratio_vs_floor_decode")
	b.ReportMetric(float64(l.events)/got.sec, "events/s")
	b.Logf("%d events: ReadRun %.2f s (%.0f events/s), floor %.2f s, floor + decode %.2f s; throughput ratio %.2f vs floor (target >= 0.8), %.2f vs floor + decode",
		l.events, got.sec, float64(l.events)/got.sec, floor.sec, floorDecode.sec, floor.sec/got.sec, floorDecode.sec/got.sec)
}

package task

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// genRoot writes n tasks under root: two in three in the Harbor layout,
// the rest in the BenchFlow layout, grouped 100 to a suite directory, plus
// one author's note per suite.
func genRoot(tb testing.TB, root string, n int) {
	tb.Helper()
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			tb.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		dir := fmt.Sprintf("suite-%03d/task-%05d", i/100, i)
		if i%100 == 0 {
			write(fmt.Sprintf("suite-%03d/notes/task.md", i/100), "# Notes for authors\n", 0o644)
		}
		write(dir+"/environment/Dockerfile", "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY data.txt /app/\n", 0o644)
		write(dir+"/environment/data.txt", fmt.Sprintf("data for task %d\n", i), 0o644)
		if i%3 != 2 {
			write(dir+"/task.toml", fmt.Sprintf("version = \"1.0\"\n\n[metadata]\ndifficulty = \"easy\"\ncategory = \"c%d\"\ncreated = 2021-11-09\n\n[verifier]\ntimeout_sec = 60.0\n\n[verifier.env]\nMODE = \"strict\"\n\n[agent]\ntimeout_sec = 300\n\n[environment]\nmemory = \"2G\"\nstorage = \"10G\"\n", i%7), 0o644)
			write(dir+"/instruction.md", fmt.Sprintf("Solve task %d.\n", i), 0o644)
			write(dir+"/solution/solve.sh", "#!/bin/bash\necho ok > /app/done\n", 0o755)
			write(dir+"/tests/test.sh", "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n", 0o755)
		} else {
			write(dir+"/task.md", fmt.Sprintf("---\nschema_version: \"1.3\"\nmetadata:\n  difficulty: medium\n  category: c%d\n  created: 2026-03-08\n  tags: [a, b]\nverifier:\n  timeout_sec: 60\n  env:\n    MIN: \"3\"\nsandbox:\n  cpus: 1\n  memory_mb: 512\n---\nNotes.\n\n## prompt\n\nSolve task %d.\n\n## role:reviewer\n\nHidden.\n", i%7, i), 0o644)
			write(dir+"/oracle/solve.sh", "#!/bin/bash\necho ok > /app/done\n", 0o755)
			write(dir+"/verifier/test.sh", "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n", 0o755)
		}
	}
}

// BenchmarkDiscover10k discovers a generated root of 10,000 tasks (mixed
// layouts, generated once) and reports seconds per discovery and the peak
// live heap seen while discovering (sampled every millisecond), and the CPU
// seconds per discovery. Target: under 2 s per discovery on a 2-core
// machine.
func BenchmarkDiscover10k(b *testing.B) {
	const n = 10000
	root := b.TempDir()
	genRoot(b, root, n)

	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				metrics.Read(samples)
				if v := samples[0].Value.Uint64(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()

	b.ReportAllocs()
	cpu0 := cpuSeconds()
	start := time.Now()
	runs := 0
	for b.Loop() {
		d, err := Discover(root)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Tasks) != n || len(d.Skipped) != n/100 {
			b.Fatalf("discovered %d tasks and %d notes, want %d and %d", len(d.Tasks), len(d.Skipped), n, n/100)
		}
		runs++
	}
	elapsed := time.Since(start)
	cpu := cpuSeconds() - cpu0
	close(stop)
	wg.Wait()
	b.ReportMetric(elapsed.Seconds()/float64(runs), "s/discover")
	b.ReportMetric(cpu/float64(runs), "cpu-s/discover")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
}

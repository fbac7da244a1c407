package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// soakSample is one reading of this process (proctor's services and the
// embedded nats-server run in it): resident memory, Go heap in use,
// goroutines and open file descriptors.
type soakSample struct {
	cells      int
	rssMB      float64
	heapMB     float64
	goroutines int
	fds        int
}

func readSample(cells int) soakSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := soakSample{cells: cells, heapMB: float64(ms.HeapInuse) / (1 << 20), goroutines: runtime.NumGoroutine()}
	if raw, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				s.rssMB = kb / 1024
			}
		}
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.fds = len(ents)
	}
	return s
}

// TestSoak (the long-test set: `make soak`, PROCTOR_SOAK=1; not in `make
// test`) runs PROCTOR_SOAK_CELLS oracle cells (500) of a trivial task
// whose solve prints PROCTOR_SOAK_MB of output (5 MB) at concurrency 8,
// on the embedded server, as runs of PROCTOR_SOAK_EVERY cells (50) in this
// one process, and samples after each run the process's RSS (proctor's
// services and the embedded server share it), its Go heap, goroutines
// and open file descriptors (the table is logged). Targets: from the
// sample at 100 cells (or the first, on a shorter soak) to the last, RSS
// grows at most 50 MB; between runs the goroutines and descriptors are
// back at the first sample's (at most 5 more).
func TestSoak(t *testing.T) {
	if os.Getenv("PROCTOR_SOAK") != "1" {
		t.Skip("the soak is in the long-test set: make soak (PROCTOR_SOAK=1)")
	}
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	total := envInt("PROCTOR_SOAK_CELLS", 500)
	every := envInt("PROCTOR_SOAK_EVERY", 50)
	mb := envInt("PROCTOR_SOAK_MB", 5)
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root := filepath.Join(t.TempDir(), "tasks")
	solve := fmt.Sprintf("#!/bin/bash\nhead -c %d /dev/zero | tr '\\0' x | fold -w 99\necho hello > /app/out.txt\n", mb<<20)
	for p, body := range map[string]string{
		"task.toml":              "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n",
		"instruction.md":         "Print.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      solve,
		"tests/test.sh":          "#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /app/out.txt)\" = hello ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
	} {
		p = filepath.Join(root, "soak", p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var samples []soakSample
	start := time.Now()
	for done := 0; done < total; {
		n := min(every, total-done)
		out := t.TempDir()
		js := filepath.Join(out, "a.json")
		var stderr bytes.Buffer
		if code := mainT(t, []string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--repeats", strconv.Itoa(n),
			"--concurrency", "8", "--output-dir", out, "--out-json", js}, &bytes.Buffer{}, &stderr); code != 0 {
			t.Fatalf("run exit %d: %s", code, stderr.String())
		}
		a, err := artifact.Read(js)
		if err != nil {
			t.Fatal(err)
		}
		if p := passed(a); p != n {
			for _, r := range a.Results {
				if !r.Passed {
					t.Logf("cell %s %s repeat %d: %s %s", r.Task, r.Harness, r.Repeat, r.Outcome, r.ErrorClass)
				}
			}
			t.Fatalf("%d of %d cells passed (the others above)", p, n)
		}
		// The cells' directories (5 MB logs each) are this test's, not
		// proctor's: removed so the disk does not fill.
		_ = os.RemoveAll(out)
		done += n
		samples = append(samples, readSample(done))
		s := samples[len(samples)-1]
		t.Logf("cells %4d  rss %7.1f MB  heap %6.1f MB  goroutines %4d  fds %4d  (%.0f s)", s.cells, s.rssMB, s.heapMB, s.goroutines, s.fds, time.Since(start).Seconds())
	}
	base := samples[0]
	from := base
	for _, s := range samples {
		if s.cells <= 100 {
			from = s
		}
	}
	last := samples[len(samples)-1]
	if g := last.rssMB - from.rssMB; g > 50 {
		t.Errorf("RSS grew %.1f MB from %d cells to %d (%.1f → %.1f), want at most 50", g, from.cells, last.cells, from.rssMB, last.rssMB)
	}
	for _, s := range samples[1:] {
		if s.goroutines > base.goroutines+5 || s.fds > base.fds+5 {
			t.Errorf("after %d cells: %d goroutines, %d fds; the first run left %d and %d", s.cells, s.goroutines, s.fds, base.goroutines, base.fds)
		}
	}
}

package process

import (
	"context"
	"io"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// samples collects durations and summarises them.
type samples []time.Duration

func (s samples) mean() time.Duration {
	if len(s) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s))
}

// pct returns the p-th percentile (0 < p <= 100), nearest rank.
func (s samples) pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := append(samples(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	k := int(float64(len(c))*p/100+0.999999) - 1
	return c[max(0, min(k, len(c)-1))]
}

// BenchmarkProcessExec measures the process driver running /bin/true in a
// started sandbox against a bare os/exec fork/exec of /bin/true. Target:
// ratio <= 3 (mean and p99).
func BenchmarkProcessExec(b *testing.B) {
	p := &Driver{BaseDir: b.TempDir()}
	ctx := context.Background()
	h, err := p.Start(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Destroy(ctx, h)
	var raw, drv samples
	for b.Loop() {
		for range 200 { // enough samples for a p99 in one iteration
			t0 := time.Now()
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
			raw = append(raw, time.Since(t0))
			t0 = time.Now()
			if res, err := p.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"/bin/true"}, Stdout: io.Discard, Stderr: io.Discard}); err != nil || res.ExitCode != 0 {
				b.Fatalf("%+v %v", res, err)
			}
			drv = append(drv, time.Since(t0))
		}
	}
	b.ReportMetric(float64(raw.mean())/1e3, "raw-us")
	b.ReportMetric(float64(drv.mean())/1e3, "driver-us")
	b.ReportMetric(float64(raw.pct(99))/1e3, "raw-p99-us")
	b.ReportMetric(float64(drv.pct(99))/1e3, "driver-p99-us")
	b.ReportMetric(float64(drv.mean())/float64(raw.mean()), "ratio")
	b.ReportMetric(float64(drv.pct(99))/float64(raw.pct(99)), "p99-ratio")
}

package process

import (
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

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
	var raw, drv testutil.Samples
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
	b.ReportMetric(float64(raw.Mean())/1e3, "raw-us")
	b.ReportMetric(float64(drv.Mean())/1e3, "driver-us")
	b.ReportMetric(float64(raw.Pct(99))/1e3, "raw-p99-us")
	b.ReportMetric(float64(drv.Pct(99))/1e3, "driver-p99-us")
	b.ReportMetric(float64(drv.Mean())/float64(raw.Mean()), "ratio")
	b.ReportMetric(float64(drv.Pct(99))/float64(raw.Pct(99)), "p99-ratio")
}

package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
)

// systemFloor is the plainest listing of what the root scan adds on
// python:3.11-slim: the same fields of the same entries (PATH's
// directories, the system's Python, the libraries' shared objects, the
// loader's configuration) printed by three bare finds in one exec, with
// no dedupe, no link resolution and no parse.
var systemFloor = []string{"sh", "-c", `F='S\0%p\0%y %i %s %T@ %C@\0x\0'
find -H /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin -maxdepth 1 -mindepth 1 -printf "$F"
find -H /usr/lib /usr/local/lib -xdev -path '*/python3*' -prune -o \( -name '*.so' -o -name '*.so.*' \) ! -type d -printf "$F"
find -H /usr/lib/python3 /usr/lib/python3.11 /etc/python3 /etc/python3.11 /etc/ld.so.cache /etc/ld.so.conf /etc/ld.so.conf.d -xdev -printf "$F"`}

// BenchmarkTamperScan measures what the tamper scan costs a cell (the
// listing before the solve and the one after it, Findings included) on
// python:3.11-slim with nothing changed: sealed (the work tree and the
// import path only), root (--agent-user task: the system's directories
// too), and the floor of what root adds, two execs of one bare find over
// the same directories (systemFloor), alternated in the same run.
// Reported: sealed_ms, root_ms, floor_ms per cell (medians of wall time,
// mostly the execs' latency on a loaded machine), the container's CPU
// for each (sealed_cpu_ms, root_cpu_ms, floor_cpu_ms, from its cgroup's
// usage before and after), and added_cpu_vs_floor, (root - sealed) / floor
// in CPU.
func BenchmarkTamperScan(b *testing.B) {
	cli := testutil.Docker(b)
	testutil.RequireImage(b, cli, "python:3.11-slim")
	d, err := docker.New(docker.Options{Client: cli})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: "python:3.11-slim", Lifetime: 30 * time.Minute, RunID: "bench-" + events.NewID()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Destroy(context.Background(), h) })
	var out bytes.Buffer
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"mkdir", "-p", "/app"}, Stdout: &out, Stderr: &out, Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
		b.Fatalf("mkdir /app: %+v %v: %s", res, err, out.String())
	}
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	scan := func(system bool) time.Duration {
		t0 := time.Now()
		snap, err := SnapshotShadows(ctx, d, h, "/app", env, system)
		if err != nil {
			b.Fatal(err)
		}
		if f, err := snap.Findings(ctx, d, h); err != nil || len(f) != 0 {
			b.Fatalf("findings %+v, %v", f, err)
		}
		return time.Since(t0)
	}
	floor := func() time.Duration {
		t0 := time.Now()
		for range 2 {
			var out bytes.Buffer
			res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: systemFloor, Stdout: &out, Timeout: time.Minute})
			if err != nil || res.ExitCode != 0 || out.Len() == 0 {
				b.Fatalf("floor: %+v %v", res, err)
			}
		}
		return time.Since(t0)
	}
	cpu := func() time.Duration {
		resp, err := cli.ContainerStatsOneShot(ctx, h.ID)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var st container.StatsResponse
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			b.Fatal(err)
		}
		return time.Duration(st.CPUStats.CPUUsage.TotalUsage)
	}
	var sealed, root, fl, sealedCPU, rootCPU, flCPU testutil.Samples
	measure := func(wall, used *testutil.Samples, f func() time.Duration) {
		c0 := cpu()
		*wall = append(*wall, f())
		*used = append(*used, cpu()-c0)
	}
	for b.Loop() {
		measure(&sealed, &sealedCPU, func() time.Duration { return scan(false) })
		measure(&root, &rootCPU, func() time.Duration { return scan(true) })
		measure(&fl, &flCPU, floor)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(sealed.Pct(50)), "sealed_ms")
	b.ReportMetric(ms(root.Pct(50)), "root_ms")
	b.ReportMetric(ms(fl.Pct(50)), "floor_ms")
	b.ReportMetric(ms(sealedCPU.Pct(50)), "sealed_cpu_ms")
	b.ReportMetric(ms(rootCPU.Pct(50)), "root_cpu_ms")
	b.ReportMetric(ms(flCPU.Pct(50)), "floor_cpu_ms")
	b.ReportMetric(float64(rootCPU.Pct(50)-sealedCPU.Pct(50))/float64(flCPU.Pct(50)), "added_cpu_vs_floor")
}

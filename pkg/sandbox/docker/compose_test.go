package docker

import (
	"archive/tar"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// pyFetch prints the body of a URL, or "FAIL: why" with exit 3.
const pyFetch = `import sys,urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except Exception as e:
    print("FAIL:", e); sys.exit(3)
`

// pyEscape is a sidecar's attempt to leave the cell: through the proxy its
// environment names (an HTTP request to the outside host) and straight to
// the host's address. It prints one line per attempt, then serves them.
const pyEscape = `import os,socket,urllib.request
out=[]
try:
    urllib.request.urlopen("http://outside.test/", timeout=5).read()
    out.append("proxy: reached")
except Exception as e:
    out.append("proxy: blocked %s" % e)
try:
    socket.create_connection((os.environ["OUTSIDE_IP"], 80), timeout=3)
    out.append("direct: reached")
except OSError as e:
    out.append("direct: blocked %s" % e)
os.makedirs("/srv", exist_ok=True)
open("/srv/result","w").write("\n".join(out)+"\n")
`

// TestDockerComposeServices starts a cell with two sidecars on its internal
// network behind an egress proxy that allows nothing, with a test host (on
// a network the test made) outside: main waits until `web` is healthy and
// `escape` has completed, reaches `web` by its name, sees that neither it
// nor the `escape` sidecar reached the outside host (through the proxy: a
// denial in the egress log; directly: no route), and Destroy and GC
// leave no container or network of the run.
func TestDockerComposeServices(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	d, err := New(Options{Client: cli, ProxyBinary: testutil.ProctorBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	upNet := testutil.TestNetwork(t, cli)
	outsideIP := testutil.HTTPHost(t, cli, upNet, "outside.test", "outside")
	run := "compose-" + randomHex(4)
	h, err := d.Start(ctx, sandbox.Spec{
		RunID: run, CellID: "t/oracle/-/0", Image: "python:3.11-slim", Network: sandbox.NetworkInternal, Lifetime: 5 * time.Minute,
		Egress: &sandbox.Egress{Upstream: upNet},
		Services: []sandbox.Service{
			{
				Name: "web", Image: "python:3.11-slim",
				Cmd: []string{"sh", "-c", "mkdir -p /srv && echo served-by-web > /srv/index.html && exec python3 -m http.server 8000 -d /srv"},
				Healthcheck: &sandbox.Healthcheck{
					Test:     []string{"CMD", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000"},
					Interval: 200 * time.Millisecond, Timeout: 30 * time.Second, Retries: 300,
				},
			},
			{
				Name: "escape", Image: "python:3.11-slim", Env: map[string]string{"OUTSIDE_IP": outsideIP},
				Cmd:       []string{"python3", "-c", pyEscape},
				DependsOn: map[string]string{"web": sandbox.ConditionHealthy},
			},
		},
		DependsOn: map[string]string{"web": sandbox.ConditionHealthy, "escape": sandbox.ConditionCompleted},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	if n := len(strings.Split(h.State["services"], ",")); n != 2 {
		t.Fatalf("services state %q, want 2 ids", h.State["services"])
	}

	code, out := execOut(t, d, h, nil, "python3", "-c", pyFetch, "http://web:8000/")
	if code != 0 || strings.TrimSpace(out) != "served-by-web" {
		t.Fatalf("main -> web: exit %d, %q", code, out)
	}
	// The escape sidecar left its result in its own (exited) container.
	rc, _, err := cli.CopyFromContainer(ctx, serviceID(t, h, 1), "/srv/result")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(tr)
	res := string(b)
	if !strings.Contains(res, "proxy: blocked") || !strings.Contains(res, "direct: blocked") {
		t.Fatalf("the sidecar reached the outside host:\n%s", res)
	}
	// main: through the proxy and directly.
	code, out = execOut(t, d, h, sandbox.ProxyEnv(h), "python3", "-c", pyFetch, "http://outside.test/")
	if code != 3 || !strings.Contains(out, "403") {
		t.Fatalf("main through the proxy: exit %d, %q (want a 403 denial)", code, out)
	}
	code, out = execOut(t, d, h, nil, "python3", "-c", pyDirect, outsideIP, "80")
	if code != 4 {
		t.Fatalf("main straight to the outside host: exit %d, %q", code, out)
	}
	log, err := d.EgressLog(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, r := range parseEgress(t, log) {
		if r.Host == "outside.test" && r.Decision == "denied" {
			denied++
		}
		if r.Decision == "allowed" {
			t.Errorf("egress allowed: %+v", r)
		}
	}
	if denied != 2 {
		t.Fatalf("egress log has %d denials of outside.test, want 2 (the sidecar's and main's):\n%s", denied, log)
	}

	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after Destroy: %d containers, %d networks of the run left", c, n)
	}
}

// TestDockerComposeUnhealthyFailsClean: a service whose healthcheck fails
// stops Start with an error naming it and its last check, and nothing of
// the run is left; a service left behind by a dead proctor is removed by
// GC.
func TestDockerComposeUnhealthyFailsClean(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	run := "compose-bad-" + randomHex(4)
	spec := sandbox.Spec{
		RunID: run, CellID: "t/oracle/-/0", Image: "debian:bookworm-slim", Network: sandbox.NetworkInternal, Lifetime: time.Minute,
		Services: []sandbox.Service{{
			Name: "db", Image: "debian:bookworm-slim", Cmd: []string{"sleep", "60"},
			Healthcheck: &sandbox.Healthcheck{Test: []string{"CMD-SHELL", "echo not ready; exit 1"}, Interval: 100 * time.Millisecond, Retries: 1},
		}},
		DependsOn: map[string]string{"db": sandbox.ConditionHealthy},
	}
	_, err := d.Start(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "service db is unhealthy") || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("Start = %v, want the unhealthy service named with its last check", err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after a failed Start: %d containers, %d networks left", c, n)
	}

	// A started cell whose proctor died: GC finds its services by label.
	spec.Services[0].Healthcheck, spec.DependsOn = nil, map[string]string{"db": sandbox.ConditionStarted}
	h, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if c, n := labelled(t, cli, run); c != 2 || n != 1 {
		t.Fatalf("started: %d containers, %d networks labelled, want 2 and 1", c, n)
	}
	if _, _, err := d.GC(ctx, run); err != nil {
		t.Fatal(err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after GC: %d containers, %d networks left", c, n)
	}
	_ = d.Destroy(ctx, h)

	// Refused specs: services on no network, a dependency that is not a
	// service, a cycle.
	for _, bad := range []sandbox.Spec{
		{Image: "x", Network: sandbox.NetworkNone, Services: []sandbox.Service{{Name: "a", Image: "x"}}},
		{Image: "x", Network: sandbox.NetworkInternal, Services: []sandbox.Service{{Name: "a", Image: "x"}}, DependsOn: map[string]string{"b": sandbox.ConditionStarted}},
		{Image: "x", Network: sandbox.NetworkInternal, Services: []sandbox.Service{
			{Name: "a", Image: "x", DependsOn: map[string]string{"b": sandbox.ConditionStarted}},
			{Name: "b", Image: "x", DependsOn: map[string]string{"a": sandbox.ConditionStarted}},
		}},
	} {
		if _, err := d.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "invalid spec") {
			t.Errorf("Start(%+v) = %v, want an invalid spec", bad.Services, err)
		}
	}
}

// serviceID is the i-th service container id of h.
func serviceID(t *testing.T, h *sandbox.Handle, i int) string {
	t.Helper()
	ids := strings.Split(h.State["services"], ",")
	if i >= len(ids) {
		t.Fatalf("no service %d in %q", i, h.State["services"])
	}
	return ids[i]
}

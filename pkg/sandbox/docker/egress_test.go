package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// egressRecord is the part of an egress.jsonl line the tests look at.
type egressRecord struct {
	Method   string `json:"method"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Closed   bool   `json:"closed"`
}

func parseEgress(t *testing.T, b []byte) []egressRecord {
	t.Helper()
	var out []egressRecord
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r egressRecord
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("egress line %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

// execOut runs cmd as the agent's uid with env and returns exit code and
// combined output.
func execOut(t *testing.T, d *Driver, h *sandbox.Handle, env map[string]string, cmd ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	res, err := d.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: cmd, User: "10001:10001", Env: env, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode, out.String()
}

const pyGet = `import sys,urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
except urllib.error.HTTPError as e:
    print("HTTP", e.code); sys.exit(3)
`

const pyConnect = `import socket,sys
s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=10)
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"%(sys.argv[3],sys.argv[3])).encode())
head=s.recv(4096).decode()
if " 200 " not in head.split("\r\n")[0]:
    print(head.split("\r\n")[0]); sys.exit(3)
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
b=b""
while True:
    c=s.recv(65536)
    if not c: break
    b+=c
print(b.decode(errors="replace"))
`

const pyDirect = `import socket,sys
try:
    socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=3)
except OSError as e:
    print("refused:", e); sys.exit(4)
print("connected")
`

// TestEgressProxySidecar runs a sandbox on an internal network behind the
// egress proxy, with a test host (a container on a network the test made)
// as the only way out: the allowed host is reached through the proxy
// (plain HTTP and CONNECT), a host not listed is refused, an agent that
// bypasses the proxy (its variables unset, a direct connect to the host's
// address) reaches nothing, the proxy does not listen on its upstream
// side, every decision is in its log, and Destroy and GC leave nothing.
func TestEgressProxySidecar(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	d, err := New(Options{Client: cli, ProxyBinary: testutil.ProctorBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	upNet := testutil.TestNetwork(t, cli)
	allowedIP := testutil.HTTPHost(t, cli, upNet, "allowed.test", "hello through the proxy")
	testutil.HTTPHost(t, cli, upNet, "denied.test", "the answer")
	run := "egress-" + randomHex(4)
	h, err := d.Start(ctx, sandbox.Spec{
		RunID: run, CellID: "t/agent/-/0", Image: "python:3.11-slim", Network: sandbox.NetworkInternal, Lifetime: 5 * time.Minute,
		Egress: &sandbox.Egress{Allow: []string{"private:allowed.test:80"}, Upstream: upNet},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	env := sandbox.ProxyEnv(h)
	if env == nil || env["HTTPS_PROXY"] != "http://"+h.State["proxy"] || env["no_proxy"] != sandbox.NoProxy {
		t.Fatalf("proxy env %v (state %v)", env, h.State)
	}
	proxy, err := netip.ParseAddrPort(h.State["proxy"])
	if err != nil || proxy.Port() != sandbox.ProxyPort {
		t.Fatalf("proxy address %q: %v", h.State["proxy"], err)
	}

	if code, out := execOut(t, d, h, env, "python3", "-c", pyGet, "http://allowed.test/"); code != 0 || !strings.Contains(out, "hello through the proxy") {
		t.Errorf("GET of the allowed host: exit %d: %s", code, out)
	}
	if code, out := execOut(t, d, h, env, "python3", "-c", pyConnect, proxy.Addr().String(), "3128", "allowed.test:80"); code != 0 || !strings.Contains(out, "hello through the proxy") {
		t.Errorf("CONNECT to the allowed host: exit %d: %s", code, out)
	}
	if code, out := execOut(t, d, h, env, "python3", "-c", pyGet, "http://denied.test/"); code != 3 || strings.Contains(out, "the answer") || !strings.Contains(out, "HTTP 403") {
		t.Errorf("GET of a host not listed: exit %d: %s", code, out)
	}
	// A cheating agent: no proxy variables, straight to the host's address.
	if code, out := execOut(t, d, h, nil, "python3", "-c", pyDirect, allowedIP, "80"); code != 4 {
		t.Errorf("a direct connect to the test host's address: exit %d: %s", code, out)
	}
	if code, out := execOut(t, d, h, map[string]string{"HTTP_PROXY": "", "http_proxy": ""}, "python3", "-c", pyGet, "http://"+allowedIP+"/"); code == 0 || strings.Contains(out, "hello") {
		t.Errorf("a GET with the proxy variables unset: exit %d: %s", code, out)
	}
	// The proxy listens on its internal address only: from the upstream
	// network its port is closed.
	ins, err := cli.ContainerInspect(ctx, h.State["proxy_container"])
	if err != nil {
		t.Fatal(err)
	}
	if ins.Config.Labels[sandbox.LabelRun] != run || ins.Config.Labels[LabelRole] != "egress-proxy" {
		t.Errorf("sidecar labels %v", ins.Config.Labels)
	}
	// The sidecar exits on its own after 4 h (its sandbox lives 5 min).
	if cmd := strings.Join(ins.Config.Cmd, " "); !strings.Contains(cmd, "--lifetime 4h0m0s") {
		t.Errorf("sidecar command %q lacks --lifetime 4h0m0s", cmd)
	}
	upIP := ins.NetworkSettings.Networks[upNet].IPAddress
	if upIP == "" {
		t.Fatalf("the sidecar is not on %s: %v", upNet, ins.NetworkSettings.Networks)
	}
	if code, out := execOut(t, d, h, nil, "python3", "-c", pyDirect, upIP, "3128"); code != 4 {
		t.Errorf("the sidecar's upstream address reached from the sandbox: exit %d: %s", code, out)
	}

	log, err := d.EgressLog(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	recs := parseEgress(t, log)
	var allowedGet, allowedConnect, denied bool
	for _, r := range recs {
		switch {
		case r.Host == "allowed.test" && r.Method == "GET" && r.Decision == "allowed" && !r.Closed:
			allowedGet = true
		case r.Host == "allowed.test" && r.Method == "CONNECT" && r.Decision == "allowed" && !r.Closed:
			allowedConnect = true
		case r.Host == "denied.test" && r.Decision == "denied" && strings.Contains(r.Reason, "not on the allowlist"):
			denied = true
		case r.Host == allowedIP:
			t.Errorf("the proxy saw the bypass attempt as %+v", r)
		}
	}
	if !allowedGet || !allowedConnect || !denied {
		t.Errorf("egress log lacks a decision (GET %v, CONNECT %v, denied %v):\n%s", allowedGet, allowedConnect, denied, log)
	}
	again, err := d.EgressLog(ctx, h)
	if err != nil || !bytes.Equal(again, log) {
		t.Errorf("a second EgressLog: %v, %d bytes vs %d", err, len(again), len(log))
	}

	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerInspect(ctx, h.State["proxy_container"]); !cerrdefs.IsNotFound(err) {
		t.Errorf("the sidecar outlived Destroy: %v", err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Errorf("after Destroy: %d containers, %d networks of the run", c, n)
	}

	// GC finds a sidecar by its run label.
	h2, err := d.Start(ctx, sandbox.Spec{RunID: run, CellID: "t/agent/-/1", Image: "python:3.11-slim", Network: sandbox.NetworkInternal,
		Lifetime: 5 * time.Minute, Egress: &sandbox.Egress{Upstream: upNet}})
	if err != nil {
		t.Fatal(err)
	}
	nc, nn, err := d.GC(ctx, run)
	if err != nil || nc != 2 || nn != 1 {
		t.Errorf("GC: %d containers, %d networks, %v; want 2, 1", nc, nn, err)
	}
	if _, err := cli.ContainerInspect(ctx, h2.State["proxy_container"]); !cerrdefs.IsNotFound(err) {
		t.Errorf("the sidecar outlived GC: %v", err)
	}
}

// TestEgressNeedsInternalNetwork: a proxy on another network mode is a
// spec error, before anything is created.
func TestEgressNeedsInternalNetwork(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	run := "egress-" + randomHex(4)
	_, err := d.Start(context.Background(), sandbox.Spec{RunID: run, Image: testImage, Network: sandbox.NetworkBridge, Egress: &sandbox.Egress{}})
	if err == nil || !strings.Contains(err.Error(), "internal") {
		t.Fatalf("Start: %v, want an error naming the internal network", err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Errorf("%d containers, %d networks left", c, n)
	}
}

// TestProxyLifetime: an egress sidecar exits on its own after 4 h, or
// with its sandbox when that lives longer.
func TestProxyLifetime(t *testing.T) {
	for _, c := range []struct{ life, want time.Duration }{
		{0, 4 * time.Hour}, {5 * time.Minute, 4 * time.Hour}, {6 * time.Hour, 6 * time.Hour},
	} {
		if got := proxyLifetime(sandbox.Spec{Lifetime: c.life}); got != c.want {
			t.Errorf("sandbox lifetime %s: sidecar lifetime %s, want %s", c.life, got, c.want)
		}
	}
}

package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestProxyCommand runs `proctor proxy` as the sidecar will: a denied host
// and a listed loopback upstream are both refused (the command has no way
// to allow loopback) and both decisions are lines of --egress-log.
func TestProxyCommand(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	logFile := filepath.Join(t.TempDir(), "egress.jsonl")
	var stdout, stderr testutil.SyncBuffer
	root := newRoot(&stdout, &stderr, os.Getenv)
	root.SetArgs([]string{"proxy", "--listen", "127.0.0.1:0", "--allow", "allowed.test," + up.Addr().String(),
		"--egress-log", logFile, "--cell", "c9"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if s, ok := strings.CutPrefix(strings.TrimSpace(stdout.String()), "listening on "); ok {
			addr = s
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening line; stdout %q stderr %q", stdout.String(), stderr.String())
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, target := range []string{"denied.test:443", up.Addr().String()} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		c.Close()
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("CONNECT %s: %v %v, want 403", target, resp, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy command: %v (stderr %q)", err, stderr.String())
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("egress log has %d lines, want 2:\n%s", len(lines), b)
	}
	for i, want := range []string{"not on the allowlist", "loopback"} {
		var r struct{ Cell, Decision, Reason string }
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.Cell != "c9" || r.Decision != "denied" || !strings.Contains(r.Reason, want) {
			t.Errorf("line %d = %s, want denied: %s", i+1, lines[i], want)
		}
	}

	// A bad entry is a usage error naming it.
	if code := mainT(t, []string{"proxy", "--listen", "127.0.0.1:0", "--allow", "*.example.com"}, io.Discard, &stderr); code != ExitUsage ||
		!strings.Contains(stderr.String(), `"*.example.com"`) {
		t.Errorf("bad --allow: exit %d, stderr %q", code, stderr.String())
	}
}

// TestProxyLifetime: with --lifetime the proxy exits on its own, status 0,
// once that much time has passed (a cell's sidecar gets 4 h, so one a
// killed proctor left behind does not serve forever).
func TestProxyLifetime(t *testing.T) {
	var stdout, stderr testutil.SyncBuffer
	start := time.Now()
	done := make(chan int, 1)
	go func() {
		done <- mainT(t, []string{"proxy", "--listen", "127.0.0.1:0", "--allow", "allowed.test", "--lifetime", "300ms"}, &stdout, &stderr)
	}()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stdout.String(), "lifetime 300ms over") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Errorf("exited after %s, before its lifetime", el)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy still serves 30 s after a 300 ms lifetime")
	}
}

// TestServeProxyLoggerPublishesDecisions runs `proctor serve proxy-logger`
// against an in-process NATS server: a plain-HTTP GET to an allowed
// loopback upstream and a CONNECT to a host not on the list become two
// decision events (allowed, then denied) of the run and cell named on the
// command line, plus the close record of the allowed connection with its
// byte counts; --egress-log holds the same three records.
func TestServeProxyLoggerPublishesDecisions(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	allowLoopbackUpstreams = true
	t.Cleanup(func() { allowLoopbackUpstreams = false })
	b, srv := bustest.Bus(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "http://")
	logFile := filepath.Join(t.TempDir(), "egress.jsonl")
	const runID, cellID = "r-proxy", "t1/agent:x/m/1"
	var stdout, stderr testutil.SyncBuffer
	root := newRoot(&stdout, &stderr, os.Getenv)
	root.SetArgs([]string{"serve", "proxy-logger", "--nats", srv.ClientURL(), "--run", runID, "--cell", cellID,
		"--listen", "127.0.0.1:0", "--allow", upAddr, "--egress-log", logFile})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if s, ok := strings.CutPrefix(strings.TrimSpace(stdout.String()), "listening on "); ok {
			addr = s
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening line; stdout %q stderr %q", stdout.String(), stderr.String())
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	resp, err := client.Get(up.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "hello" {
		t.Fatalf("allowed GET: %d %q", resp.StatusCode, body)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")
	dresp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	c.Close()
	if err != nil || dresp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT denied.test: %v %v, want 403", dresp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve proxy-logger: %v (stderr %q)", err, stderr.String())
	}

	var got []events.Envelope
	if err := b.ReadRun(context.Background(), runID, func(e events.Envelope) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var decisions, closes []events.EgressDecisionData
	for _, e := range got {
		if e.Type != events.EgressDecision || e.CellID != cellID || e.Attempt != 1 || e.Source != proxyLoggerSource {
			t.Fatalf("unexpected event %+v", e)
		}
		var d events.EgressDecisionData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Closed {
			closes = append(closes, d)
		} else {
			decisions = append(decisions, d)
		}
	}
	if len(decisions) != 2 || decisions[0].Decision != "allowed" || decisions[0].Method != http.MethodGet ||
		decisions[1].Decision != "denied" || decisions[1].Host != "denied.test" || decisions[1].Method != http.MethodConnect {
		t.Fatalf("decision events = %+v, want allowed GET then denied CONNECT denied.test", decisions)
	}
	if len(closes) != 1 || closes[0].Conn != decisions[0].Conn || closes[0].BytesDown == 0 {
		t.Fatalf("close events = %+v, want one of conn %d with bytes down", closes, decisions[0].Conn)
	}
	lines, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lines), "\n"); n != len(got) {
		t.Errorf("egress log has %d lines, %d events:\n%s", n, len(got), lines)
	}

	// Without --run there is no run to publish into: a usage error.
	var errOut bytes.Buffer
	if code := mainT(t, []string{"serve", "proxy-logger", "--nats", srv.ClientURL(), "--listen", "127.0.0.1:0"}, io.Discard, &errOut); code != ExitUsage ||
		!strings.Contains(errOut.String(), "--run ID") {
		t.Errorf("no --run: exit %d, stderr %q", code, errOut.String())
	}
}

// TestUpstreamFromEnv: the operator's proxy is chained and given to
// builds with its credentials, the model gateway's host joins no_proxy,
// a loopback proxy (unreachable from a container) is left out with a
// warning that shows no credentials, and a CA file must hold a
// certificate.
func TestUpstreamFromEnv(t *testing.T) {
	env := map[string]string{
		"HTTPS_PROXY": "http://u:pw-1@proxy.corp:3128", "http_proxy": "proxy.corp:8080", "NO_PROXY": ".corp",
		"ANTHROPIC_BASE_URL": "https://llm.internal:8443",
	}
	var warns []string
	u, err := upstreamFromEnv(func(k string) string { return env[k] }, func(w string) { warns = append(warns, w) })
	if err != nil {
		t.Fatal(err)
	}
	if u.proxy.HTTPSProxy != "http://u:pw-1@proxy.corp:3128" || u.proxy.HTTPProxy != "http://proxy.corp:8080" || u.proxy.NoProxy != ".corp,llm.internal" {
		t.Errorf("proxy %+v", u.proxy)
	}
	if u.build["https_proxy"] != "http://u:pw-1@proxy.corp:3128" || u.build["NO_PROXY"] != ".corp,llm.internal" || u.build["HTTP_PROXY"] != "http://proxy.corp:8080" || len(warns) != 0 {
		t.Errorf("build %v warnings %v", u.build, warns)
	}
	u, _ = upstreamFromEnv(func(k string) string {
		return map[string]string{"HTTPS_PROXY": "http://u:pw-2@127.0.0.1:3128"}[k]
	}, func(w string) { warns = append(warns, w) })
	if !u.proxy.IsZero() || u.build != nil || len(warns) != 1 || !strings.Contains(warns[0], "loopback") || strings.Contains(warns[0], "pw-2") {
		t.Errorf("loopback proxy: %+v %v %v", u.proxy, u.build, warns)
	}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	if _, err := upstreamFromEnv(func(k string) string { return map[string]string{EnvUpstreamCA: bad}[k] }, func(string) {}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}

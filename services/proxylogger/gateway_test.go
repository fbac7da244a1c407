package proxylogger

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/llmtest"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// The credentials the tests give the gateway; the placeholders are what
// the agent holds.
const (
	realAnthropic = "sk-ant-REAL-0123456789"
	realGemini    = "AIza-REAL-gemini-987"
	phAnthropic   = providers.PlaceholderPrefix + "00000000000000000000000000000a01"
	phGemini      = providers.PlaceholderPrefix + "00000000000000000000000000000b02"
)

// seenRequest is what a fake provider got: its host, path, query and
// headers.
type seenRequest struct {
	Host, Path, Query string
	Header            http.Header
}

// fakeProvider is an HTTPS server under the given names, with a
// certificate from its own test CA, answering the Messages API (JSON or
// SSE by the request's "stream"), Gemini's generateContent, and echoing
// anything else. It records every request.
type fakeProvider struct {
	addr  string
	roots *x509.CertPool
	mu    sync.Mutex
	seen  []seenRequest
	conns atomic.Int64
}

func startFakeProvider(t testing.TB, names ...string) *fakeProvider {
	t.Helper()
	ca, err := tlsca.New("test upstream CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := tlsca.ServerCert(ca, names...)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots, _ := ca.Pool()
	fp := &fakeProvider{roots: roots}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	fp.addr = ln.Addr().String()
	srv := &http.Server{Handler: fp, ErrorLog: log.New(io.Discard, "", 0), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			fp.conns.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fp
}

func (fp *fakeProvider) requests() []seenRequest {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return append([]seenRequest(nil), fp.seen...)
}

func (fp *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fp.mu.Lock()
	fp.seen = append(fp.seen, seenRequest{Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone()})
	fp.mu.Unlock()
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	switch {
	case r.URL.Path == "/v1/messages" && req.Stream:
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for _, ev := range []string{
			`{"type":"message_start","message":{"model":"` + req.Model + `","usage":{"input_tokens":120,"output_tokens":1,"cache_read_input_tokens":30,"cache_creation_input_tokens":4}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":17}}`,
			`{"type":"message_stop"}`,
		} {
			fmt.Fprintf(w, "event: x\ndata: %s\n\n", ev)
			fl.Flush()
		}
	case r.URL.Path == "/v1/messages":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"type":"message","model":%q,"content":[],"usage":{"input_tokens":11,"output_tokens":7,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}`, req.Model)
	case strings.HasSuffix(r.URL.Path, ":generateContent"):
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"candidates":[],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":3},"modelVersion":"gemini-2.5-pro"}`)
	default:
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "echo %s %s", r.Method, r.URL.Path)
	}
}

// callCollector is a ModelSink keeping every call.
type callCollector struct {
	mu    sync.Mutex
	calls []ModelCall
}

func (c *callCollector) sink(m ModelCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, m)
}

func (c *callCollector) waitFor(t *testing.T, n int) []ModelCall {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		got := append([]ModelCall(nil), c.calls...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("have %d model calls, want %d: %+v", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gatewaySetup is a proxy with a gateway in front of one fake provider
// answering as api.anthropic.com, generativelanguage.googleapis.com and
// other.example (an allowed host that is no provider's), all resolving to
// its loopback address.
type gatewaySetup struct {
	fp     *fakeProvider
	ca     *tlsca.CA
	proxy  string
	port   string
	recs   *collector
	calls  *callCollector
	minter func() int
}

func newGatewaySetup(t *testing.T, extraAllow []string, mod func(*Config)) *gatewaySetup {
	t.Helper()
	fp := startFakeProvider(t, "api.anthropic.com", "generativelanguage.googleapis.com", "other.example")
	_, port, _ := net.SplitHostPort(fp.addr)
	ca, err := tlsca.New("run CA")
	if err != nil {
		t.Fatal(err)
	}
	hp := func(h string) string { return h + ":" + port }
	gw := &Gateway{CA: ca, Routes: []providers.Route{
		{Provider: "anthropic", Hosts: []string{hp("api.anthropic.com")}, AuthHeaders: []string{"x-api-key", "Authorization"},
			Credentials: []providers.Credential{{Env: "ANTHROPIC_API_KEY", Placeholder: phAnthropic, Value: realAnthropic}}},
		{Provider: "gemini", Hosts: []string{hp("generativelanguage.googleapis.com")}, AuthHeaders: []string{"X-Goog-Api-Key"}, AuthQuery: []string{"key"},
			Credentials: []providers.Credential{{Env: "GEMINI_API_KEY", Placeholder: phGemini, Value: realGemini}}},
	}}
	recs, calls := &collector{}, &callCollector{}
	cfg := Config{
		Policy:   policy(t, append([]string{hp("api.anthropic.com"), hp("generativelanguage.googleapis.com"), hp("other.example")}, extraAllow...)...),
		Resolver: mapResolver{"api.anthropic.com": loopback, "generativelanguage.googleapis.com": loopback, "other.example": loopback},
		Sink:     recs.sink, ModelSink: calls.sink, AllowLoopbackUpstreams: true,
		Gateway: gw, UpstreamRoots: fp.roots,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &gatewaySetup{fp: fp, ca: ca, proxy: ln.Addr().String(), port: port, recs: recs, calls: calls,
		minter: func() int {
			if p.gw == nil {
				return 0
			}
			return p.gw.minter.Minted()
		}}
}

// client returns an HTTP client through the proxy that trusts only roots.
func (g *gatewaySetup) client(roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: g.proxy}),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func (g *gatewaySetup) url(host, path string) string {
	return "https://" + host + ":" + g.port + path
}

func post(t *testing.T, c *http.Client, u string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestGatewayInterceptsSubstitutesAndRecordsCalls(t *testing.T) {
	g := newGatewaySetup(t, nil, nil)
	runRoots, _ := g.ca.Pool()
	c := g.client(runRoots)
	resp, body := post(t, c, g.url("api.anthropic.com", "/v1/messages"), map[string]string{"x-api-key": phAnthropic},
		`{"model":"claude-sonnet-4-5","stream":true,"messages":[]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, "message_stop") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	// A second request on the same client connection: one upstream
	// connection, two calls.
	resp, body = post(t, c, g.url("api.anthropic.com", "/v1/messages"), map[string]string{"Authorization": "Bearer " + phAnthropic},
		`{"model":"claude-haiku-4-5","messages":[]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"output_tokens":7`) {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	seen := g.fp.requests()
	if len(seen) != 2 || seen[0].Header.Get("X-Api-Key") != realAnthropic || seen[1].Header.Get("Authorization") != "Bearer "+realAnthropic {
		t.Fatalf("the provider did not get the real key: %+v", seen)
	}
	if seen[0].Header.Get("Accept-Encoding") != "identity" {
		t.Errorf("Accept-Encoding %q, want identity on an API whose usage is read", seen[0].Header.Get("Accept-Encoding"))
	}
	if n := g.fp.conns.Load(); n != 1 {
		t.Errorf("%d upstream connections for two requests on one client connection, want 1", n)
	}
	calls := g.calls.waitFor(t, 2)
	want := []string{"claude-sonnet-4-5 120 17 30 4 stream", "claude-haiku-4-5 11 7 0 0 json"}
	for i, m := range calls {
		got := fmtUsage(Usage{Model: m.Model, Input: m.InputTokens, Output: m.OutputTokens, CacheRead: m.CacheReadTokens, CacheWrite: m.CacheWriteTokens})
		got += map[bool]string{true: " stream", false: " json"}[m.Stream]
		if got != want[i] {
			t.Errorf("call %d: %s, want %s", i, got, want[i])
		}
		if m.Provider != "anthropic" || m.Host != "api.anthropic.com" || m.Path != "/v1/messages" || m.API != APIAnthropicMessages ||
			m.Status != 200 || m.Error != "" || m.RequestBytes == 0 || m.ResponseBytes == 0 || m.DurationSec < m.TTFBSec || m.TTFBSec <= 0 {
			t.Errorf("call %d: %+v", i, m)
		}
	}
	if g.minter() != 1 {
		t.Errorf("minted %d leaves, want 1 (cached per host)", g.minter())
	}
	// The connection's close record counts the client's bytes.
	c.CloseIdleConnections()
	recs := g.recs.waitFor(t, 2)
	if recs[0].Decision != Allowed || recs[1].Reason != "gateway connection closed" || recs[1].BytesUp == 0 || recs[1].BytesDown == 0 {
		t.Errorf("records %+v", recs)
	}
}

func TestGatewaySubstitutesOnlyForTheProvidersHosts(t *testing.T) {
	g := newGatewaySetup(t, nil, nil)
	runRoots, _ := g.ca.Pool()
	// The agent trusts the run CA and the provider's own (for the tunnel
	// to other.example, which is not intercepted).
	both := runRoots.Clone()
	both.AddCert(fpCert(t, g))
	c := g.client(both)
	// Anthropic's placeholder to another provider's host, and to an
	// allowed host no provider owns: sent on unchanged.
	post(t, c, g.url("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent"),
		map[string]string{"x-api-key": phAnthropic, "Authorization": "Bearer " + phAnthropic, "X-Goog-Api-Key": phAnthropic}, `{}`)
	post(t, c, g.url("other.example", "/upload"), map[string]string{"x-api-key": phAnthropic, "X-Goog-Api-Key": phGemini}, `{}`)
	// The provider's placeholder outside an auth header: unchanged.
	post(t, c, g.url("api.anthropic.com", "/v1/messages"), map[string]string{"X-Note": phAnthropic}, `{"model":"m"}`)
	// Gemini's ?key= is replaced, and the call's path has no query.
	post(t, c, g.url("generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent?key="+phGemini+"&alt=json"), nil, `{}`)
	seen := g.fp.requests()
	if len(seen) != 4 {
		t.Fatalf("%d requests: %+v", len(seen), seen)
	}
	for i, s := range seen[:3] {
		for k, vs := range s.Header {
			for _, v := range vs {
				if strings.Contains(v, "REAL") {
					t.Errorf("request %d to %s: %s carries a real key", i, s.Host, k)
				}
			}
		}
	}
	if seen[0].Header.Get("X-Goog-Api-Key") != phAnthropic || seen[1].Header.Get("X-Api-Key") != phAnthropic || seen[2].Header.Get("X-Note") != phAnthropic {
		t.Errorf("a placeholder was changed where it must not be: %+v", seen[:3])
	}
	if q, _ := url.ParseQuery(seen[3].Query); q.Get("key") != realGemini || q.Get("alt") != "json" {
		t.Errorf("gemini query %q", seen[3].Query)
	}
	calls := g.calls.waitFor(t, 3)
	for _, m := range calls {
		b, _ := json.Marshal(m)
		if strings.Contains(string(b), "REAL") || strings.Contains(string(b), "key=") {
			t.Errorf("a model call holds a key: %s", b)
		}
	}
	if calls[2].Model != "gemini-2.5-pro" || *calls[2].InputTokens != 9 {
		t.Errorf("gemini call %+v", calls[2])
	}
	// other.example went through a plain tunnel: no model call, and no leaf
	// minted for it.
	for _, m := range calls {
		if m.Host == "other.example" {
			t.Errorf("a model call for a tunnelled host: %+v", m)
		}
	}
	if g.minter() != 2 {
		t.Errorf("minted %d leaves, want 2 (the two provider hosts)", g.minter())
	}
}

// fpCert is the fake provider's leaf, as the tunnel to other.example
// presents it.
func fpCert(t *testing.T, g *gatewaySetup) *x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", g.fp.addr, &tls.Config{RootCAs: g.fp.roots, ServerName: "other.example"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

func TestGatewayRefusesDeniedHostsBeforeTLS(t *testing.T) {
	g := newGatewaySetup(t, nil, nil)
	// A denied host gets the plain-text 403 before any TLS: the client's
	// bytes after the CONNECT head are never read as a handshake, no leaf
	// is minted, the upstream sees nothing.
	resp, body := rawRequest(t, g.proxy, "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n\x16\x03\x01\x00\x05hello")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not on the allowlist") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	// A provider's host on another port is not the route's host either.
	resp, _ = rawRequest(t, g.proxy, "CONNECT api.anthropic.com:444 HTTP/1.1\r\nHost: api.anthropic.com:444\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("%d", resp.StatusCode)
	}
	if g.minter() != 0 || g.fp.conns.Load() != 0 || len(g.calls.calls) != 0 {
		t.Errorf("minted %d, upstream connections %d, calls %d", g.minter(), g.fp.conns.Load(), len(g.calls.calls))
	}
}

func TestGatewayRefusesAnotherHostInsideTheTunnel(t *testing.T) {
	g := newGatewaySetup(t, nil, nil)
	runRoots, _ := g.ca.Pool()
	c, err := net.Dial("tcp", g.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT api.anthropic.com:%s HTTP/1.1\r\nHost: api.anthropic.com:%s\r\n\r\n", g.port, g.port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{RootCAs: runRoots, ServerName: "api.anthropic.com"})
	fmt.Fprintf(tc, "POST /v1/messages HTTP/1.1\r\nHost: other.example\r\nx-api-key: %s\r\nContent-Length: 2\r\n\r\n{}", phAnthropic)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("%v %v", resp, err)
	}
	if len(g.fp.requests()) != 0 {
		t.Error("the request reached the upstream")
	}
}

func TestGatewayVerifiesTheUpstream(t *testing.T) {
	// Without the upstream's CA among the roots the gateway does not send
	// the key to it: 502, and the call is recorded with the error.
	g := newGatewaySetup(t, nil, func(c *Config) { c.UpstreamRoots = x509.NewCertPool() })
	runRoots, _ := g.ca.Pool()
	resp, body := post(t, g.client(runRoots), g.url("api.anthropic.com", "/v1/messages"), map[string]string{"x-api-key": phAnthropic}, `{"model":"m"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if len(g.fp.requests()) != 0 {
		t.Error("a request reached an unverified upstream")
	}
	calls := g.calls.waitFor(t, 1)
	if calls[0].Status != 0 || !strings.Contains(calls[0].Error, "certificate") {
		t.Errorf("%+v", calls[0])
	}
	// The agent's client does not trust the upstream's own certificate
	// through the gateway: it sees only the run CA's leaf.
	if _, err := g.client(g.fp.roots).Get(g.url("api.anthropic.com", "/v1/models")); err == nil {
		t.Error("the client verified the gateway's leaf against the upstream's CA")
	}
}

// parentProxy is a test-made upstream proxy that requires Basic
// credentials and serves CONNECT (tunnel) and absolute-form plain HTTP.
type parentProxy struct {
	addr, user, pass string
	mu               sync.Mutex
	got              []string // request lines it served
	refused          int
}

func startParent(t *testing.T, user, pass string) *parentProxy {
	pp := &parentProxy{user: user, pass: pass}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pp.addr = ln.Addr().String()
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go pp.serve(c)
		}
	}()
	return pp
}

func (pp *parentProxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(pp.user+":"+pp.pass))
	pp.mu.Lock()
	ok := req.Header.Get("Proxy-Authorization") == want
	if ok {
		pp.got = append(pp.got, req.Method+" "+req.RequestURI)
	} else {
		pp.refused++
	}
	pp.mu.Unlock()
	if !ok {
		io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
		return
	}
	// Every name resolves to loopback here.
	_, port, _ := net.SplitHostPort(req.Host)
	if port == "" {
		port = "80"
	}
	up, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if req.Method == http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n")
	} else {
		req.Header.Del("Proxy-Authorization")
		req.Write(up)
	}
	go io.Copy(up, br)
	io.Copy(c, up)
}

func TestUpstreamProxyChainedWithItsCredentials(t *testing.T) {
	const user, pass = "corp-user", "corp-s3cret-pw"
	pp := startParent(t, user, pass)
	plain := startPlainUpstream(t)
	var logs strings.Builder
	var logMu sync.Mutex
	g := newGatewaySetup(t, []string{"plain.example:" + plain}, func(c *Config) {
		c.Upstream = &UpstreamProxy{HTTPSProxy: "http://" + user + ":" + pass + "@" + pp.addr, HTTPProxy: "http://" + user + ":" + pass + "@" + pp.addr}
		c.Resolver = mapResolver{} // nothing resolves here: the upstream proxy resolves
		c.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	runRoots, _ := g.ca.Pool()
	resp, _ := post(t, g.client(runRoots), g.url("api.anthropic.com", "/v1/messages"), map[string]string{"x-api-key": phAnthropic}, `{"model":"m"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("through the upstream proxy: %d", resp.StatusCode)
	}
	r2, err := g.client(runRoots).Get("http://plain.example:" + plain + "/x")
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("plain HTTP through the upstream proxy: %v %v", r2, err)
	}
	r2.Body.Close()
	pp.mu.Lock()
	got, refused := append([]string(nil), pp.got...), pp.refused
	pp.mu.Unlock()
	if len(got) != 2 || !strings.HasPrefix(got[0], "CONNECT api.anthropic.com:") || !strings.HasPrefix(got[1], "GET http://plain.example:") || refused != 0 {
		t.Errorf("the upstream proxy served %v (refused %d)", got, refused)
	}
	// The credentials are in no record, no model call, no log line.
	var all strings.Builder
	for _, d := range g.recs.all() {
		b, _ := json.Marshal(d)
		all.Write(b)
	}
	for _, m := range g.calls.waitFor(t, 1) {
		b, _ := json.Marshal(m)
		all.Write(b)
	}
	logMu.Lock()
	all.WriteString(logs.String())
	logMu.Unlock()
	for _, s := range []string{pass, user, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))} {
		if strings.Contains(all.String(), s) {
			t.Errorf("%q appears in the records or logs", s)
		}
	}
}

func TestUpstreamProxyFailureDoesNotShowItsCredentials(t *testing.T) {
	pp := startParent(t, "u", "right")
	g := newGatewaySetup(t, nil, func(c *Config) {
		c.Upstream = &UpstreamProxy{HTTPSProxy: "http://u:wrong-pass-42@" + pp.addr}
	})
	runRoots, _ := g.ca.Pool()
	resp, body := post(t, g.client(runRoots), g.url("api.anthropic.com", "/v1/messages"), map[string]string{"x-api-key": phAnthropic}, `{}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "407") || strings.Contains(body, "wrong-pass-42") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	for _, m := range g.calls.waitFor(t, 1) {
		if strings.Contains(m.Error, "wrong-pass-42") || !strings.Contains(m.Error, "407") {
			t.Errorf("%+v", m)
		}
	}
	if _, err := New(Config{Upstream: &UpstreamProxy{HTTPSProxy: "ftp://u:pw-77@x"}}); err == nil || strings.Contains(err.Error(), "pw-77") {
		t.Errorf("a bad upstream proxy URL: %v", err)
	}
}

// startPlainUpstream serves plain HTTP on loopback and returns its port.
func startPlainUpstream(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "plain") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func TestGatewayConfigErrors(t *testing.T) {
	ca, _ := tlsca.New("c")
	for name, g := range map[string]*Gateway{
		"no CA":              {Routes: nil},
		"bad host":           {CA: ca, Routes: []providers.Route{{Provider: "a", Hosts: []string{"*.x"}}}},
		"host of two":        {CA: ca, Routes: []providers.Route{{Provider: "a", Hosts: []string{"h"}}, {Provider: "b", Hosts: []string{"h:443"}}}},
		"credential unbound": {CA: ca, Routes: []providers.Route{{Provider: "a", Hosts: []string{"h"}, Credentials: []providers.Credential{{Env: "K", Value: "v"}}}}},
	} {
		if _, err := New(Config{Gateway: g}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestGatewayUsageOfEveryShape sends one request of each API and shape
// the scripted model speaks through the gateway: each call's observed
// usage is the script's, in the gateway's terms (input without cached
// input, cached input as cache reads).
func TestGatewayUsageOfEveryShape(t *testing.T) {
	s, err := llmtest.ParseScript([]byte(`
model: claude-sonnet-4-5
replies:
  - text: "Let me look."
    tool_use: [{name: Bash, input: {command: ls}}, {name: Read, input: {path: /a}}]
    usage: {input_tokens: 1200, output_tokens: 40, cache_read_input_tokens: 5000, cache_creation_input_tokens: 300}
`))
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsca.New("upstream CA")
	certPEM, keyPEM, _ := tlsca.ServerCert(ca, "model.test")
	srv := llmtest.New(s)
	base, stop, err := srv.ListenTLS("127.0.0.1:0", certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	u, _ := url.Parse(base)
	runCA, _ := tlsca.New("run CA")
	upRoots, _ := ca.Pool()
	calls := &callCollector{}
	host := "model.test:" + u.Port()
	proxy := startProxy(t, Config{
		Policy: policy(t, host), Resolver: mapResolver{"model.test": loopback}, AllowLoopbackUpstreams: true,
		Gateway: &Gateway{CA: runCA, Routes: []providers.Route{{Provider: "anthropic", Hosts: []string{host},
			AuthHeaders: []string{"x-api-key"}, Credentials: []providers.Credential{{Env: "K", Placeholder: phAnthropic, Value: realAnthropic}}}}},
		UpstreamRoots: upRoots, ModelSink: calls.sink,
	})
	roots, _ := runCA.Pool()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	msg := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct{ path, body, api string }{
		{"/v1/messages", `{"model":"m",` + msg + `}`, APIAnthropicMessages},
		{"/v1/messages", `{"model":"m","stream":true,` + msg + `}`, APIAnthropicMessages},
		{"/v1/chat/completions", `{"model":"m",` + msg + `}`, APIOpenAIChat},
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + msg + `}`, APIOpenAIChat},
		{"/v1/responses", `{"model":"m","input":"hi"}`, APIOpenAIResponses},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, APIOpenAIResponses},
		{"/v1beta/models/gemini-2.5-pro:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, APIGeminiGenerate},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", `{"contents":[]}`, APIGeminiGenerate},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", `{"contents":[]}`, APIGeminiGenerate},
	}
	for _, cs := range cases {
		resp, body := post(t, c, "https://"+host+cs.path, map[string]string{"x-api-key": phAnthropic}, cs.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", cs.path, resp.StatusCode, body)
		}
	}
	got := calls.waitFor(t, len(cases))
	for i, m := range got {
		// Anthropic reports cache writes; OpenAI and Gemini bill none.
		want := "claude-sonnet-4-5 1200 40 5000 300"
		if cases[i].api != APIAnthropicMessages {
			want = "claude-sonnet-4-5 1200 40 5000 0"
		}
		g := fmtUsage(Usage{Model: m.Model, Input: m.InputTokens, Output: m.OutputTokens, CacheRead: m.CacheReadTokens, CacheWrite: m.CacheWriteTokens})
		if g != want || m.API != cases[i].api {
			t.Errorf("%s %s: %s (%s), want %s", cases[i].path, cases[i].body[:20], g, m.API, want)
		}
		if strings.Contains(m.Path, "?") {
			t.Errorf("path with a query: %s", m.Path)
		}
	}
	for _, r := range srv.Requests() {
		if r.APIKey != realAnthropic {
			t.Errorf("%s reached the model with %q", r.Path, r.APIKey)
		}
	}
}

// TestGatewayStreamsEachEventAtOnce: an event of a stream reaches the
// client before the upstream sends the next (which it sends only once the
// client has the first): the gateway holds nothing back, whether the event
// is a model's usual few hundred bytes or larger than a TLS record (which
// the gateway writes from where it was read). The client gets every byte
// the upstream sent.
func TestGatewayStreamsEachEventAtOnce(t *testing.T) {
	for _, size := range []int{10, 40 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) { streamEachEventAtOnce(t, size) })
	}
}

func streamEachEventAtOnce(t *testing.T, size int) {
	ca, _ := tlsca.New("upstream CA")
	certPEM, keyPEM, _ := tlsca.ServerCert(ca, "api.anthropic.com")
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	got1 := make(chan struct{})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	text := make([]byte, size)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	first := "data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"" + string(text) + "\"}}\n\n"
	second := "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"" + string(text[:size/2]) + "\"}}\n\n" +
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, first)
		w.(http.Flusher).Flush()
		select {
		case <-got1:
		case <-time.After(10 * time.Second):
			return // the client never got the first event: the test fails below
		}
		io.WriteString(w, second)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := "api.anthropic.com:" + port
	runCA, _ := tlsca.New("run CA")
	upRoots, _ := ca.Pool()
	calls := &callCollector{}
	proxy := startProxy(t, Config{Policy: policy(t, host), Resolver: mapResolver{"api.anthropic.com": loopback}, AllowLoopbackUpstreams: true,
		UpstreamRoots: upRoots, ModelSink: calls.sink,
		Gateway: &Gateway{CA: runCA, Routes: []providers.Route{{Provider: "anthropic", Hosts: []string{host}}}}})
	roots, _ := runCA.Pool()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := c.Post("https://"+host+"/v1/messages", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make([]byte, len(first))
	if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != first {
		t.Fatalf("first events: %d bytes, %v; equal to the upstream's: %v", len(got), err, string(got) == first)
	}
	close(got1)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != second {
		t.Fatalf("the second events did not follow whole: %d bytes of %d", len(rest), len(second))
	}
	if m := calls.waitFor(t, 1)[0]; *m.InputTokens != 3 || *m.OutputTokens != 9 || !m.Stream {
		t.Errorf("%+v", m)
	}
}

// TestGatewayClientLeavesMidStream: a client that closes its connection
// after the first event does not stall the gateway: the gateway closes
// the upstream connection as the client's own going would have (the model
// stops generating; nothing more is read or billed on its behalf), and
// the call is recorded as ended early with the usage seen so far.
func TestGatewayClientLeavesMidStream(t *testing.T) {
	ca, _ := tlsca.New("upstream CA")
	certPEM, keyPEM, _ := tlsca.ServerCert(ca, "api.anthropic.com")
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	gone, upstreamSawClose := make(chan struct{}), make(chan struct{})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		<-gone
		// A model goes on generating at its pace (or sends its pings);
		// the stream ends only when its connection does.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		end := time.After(10 * time.Second)
		for {
			select {
			case <-r.Context().Done():
				close(upstreamSawClose)
				return
			case <-end:
				return
			case <-tick.C:
				io.WriteString(w, "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"more\"}}\n\n")
				w.(http.Flusher).Flush()
			}
		}
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := "api.anthropic.com:" + port
	runCA, _ := tlsca.New("run CA")
	upRoots, _ := ca.Pool()
	calls := &callCollector{}
	proxy := startProxy(t, Config{Policy: policy(t, host), Resolver: mapResolver{"api.anthropic.com": loopback}, AllowLoopbackUpstreams: true,
		UpstreamRoots: upRoots, ModelSink: calls.sink,
		Gateway: &Gateway{CA: runCA, Routes: []providers.Route{{Provider: "anthropic", Hosts: []string{host}}}}})
	roots, _ := runCA.Pool()
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), TLSClientConfig: &tls.Config{RootCAs: roots}}
	resp, err := (&http.Client{Transport: tr}).Post("https://"+host+"/v1/messages", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(first, "message_start") {
		t.Fatalf("first line %q, %v", first, err)
	}
	resp.Body.Close() // closes the connection: the body was not read to its end
	close(gone)
	select {
	case <-upstreamSawClose:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection was kept open after the client left")
	}
	m := calls.waitFor(t, 1)[0]
	if *m.InputTokens != 3 || *m.OutputTokens != 1 || !strings.Contains(m.Error, "ended before its end") {
		t.Errorf("%+v", m)
	}
}

package proxylogger

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mapResolver answers names from a map and fails every other lookup, so no
// test ever asks a real resolver.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// collector is a Sink that keeps every record.
type collector struct {
	mu   sync.Mutex
	recs []Decision
}

func (c *collector) sink(d Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, d)
}

func (c *collector) all() []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Decision(nil), c.recs...)
}

// waitFor polls until n records are in, or fails the test after 10 s.
func (c *collector) waitFor(t *testing.T, n int) []Decision {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := c.all()
		if len(r) >= n {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("have %d records, want %d: %+v", len(r), n, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startProxy serves a Proxy with cfg on a loopback port and returns its
// address; cleanup stops it and checks Serve returned nil.
func startProxy(t testing.TB, cfg Config) string {
	t.Helper()
	if cfg.Resolver == nil {
		cfg.Resolver = mapResolver{}
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
	return ln.Addr().String()
}

func policy(t testing.TB, entries ...string) *Policy {
	t.Helper()
	p, err := ParsePolicy(entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func port(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// rawRequest sends head to the proxy and returns its response (body read).
func rawRequest(t *testing.T, proxy, head string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", head, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// tlsClient returns a client through proxy that trusts srv's certificate
// under the name example.com (httptest's certificate names it).
func tlsClient(srv *httptest.Server, proxy string) *http.Client {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.ServerName = "example.com"
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	return &http.Client{Transport: tr}
}

func TestConnectAllowedTunnelsBytes(t *testing.T) {
	body := strings.Repeat("x", 100_000)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	p := port(t, srv.URL)
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, "allowed.test:"+p), Sink: col.sink, Cell: "c1",
		Resolver: mapResolver{"allowed.test": loopback}, AllowLoopbackUpstreams: true})
	client := tlsClient(srv, proxy)
	client.Transport.(*http.Transport).DisableKeepAlives = true
	resp, err := client.Get("https://allowed.test:" + p + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != body {
		t.Fatalf("tunnelled body is %d bytes, want %d", len(got), len(body))
	}
	recs := col.waitFor(t, 2)
	d, c := recs[0], recs[1]
	if d.Decision != Allowed || d.Closed || d.Method != "CONNECT" || d.Host != "allowed.test" || strconv.Itoa(d.Port) != p ||
		d.Cell != "c1" || len(d.Resolved) != 1 || d.Resolved[0] != "127.0.0.1" {
		t.Errorf("decision record = %+v", d)
	}
	if c.Decision != Allowed || !c.Closed || c.Conn != d.Conn || c.Upstream != "127.0.0.1:"+p ||
		c.BytesDown < int64(len(body)) || c.BytesUp == 0 || c.Duration <= 0 {
		t.Errorf("close record = %+v", c)
	}
}

func TestConnectPendingIsRecordedBeforeConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, ln.Addr().String()), Sink: col.sink, AllowLoopbackUpstreams: true})
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", ln.Addr())
	up, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	// The upstream connection exists: the allowed record must already be
	// there, and nothing else (the tunnel is pending).
	recs := col.all()
	if len(recs) != 1 || recs[0].Decision != Allowed || recs[0].Closed {
		t.Fatalf("records while the CONNECT is pending = %+v, want one allowed decision", recs)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT answer %v, %v", resp, err)
	}
	// Bytes go through both ways and are counted.
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(up, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("upstream read %q, %v", buf, err)
	}
	io.WriteString(up, "pong!")
	up.Close()
	got, _ := io.ReadAll(c)
	if string(got) != "pong!" {
		t.Fatalf("client read %q", got)
	}
	c.Close()
	recs = col.waitFor(t, 2)
	if recs[1].BytesUp != 4 || recs[1].BytesDown != 5 || !recs[1].Closed {
		t.Errorf("close record = %+v, want 4 bytes up and 5 down", recs[1])
	}
}

func TestConnectDenied(t *testing.T) {
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, "allowed.test"), Sink: col.sink, AllowLoopbackUpstreams: true})
	for _, target := range []string{"denied.test:443", "allowed.test:8443", "ALLOWED.test.:444"} {
		resp, _ := rawRequest(t, proxy, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("CONNECT %s: status %d, want 403", target, resp.StatusCode)
		}
	}
	recs := col.all()
	if len(recs) != 3 {
		t.Fatalf("records = %+v, want 3", recs)
	}
	for _, r := range recs {
		if r.Decision != Denied || r.Method != "CONNECT" || r.Reason != "not on the allowlist" || r.Status != 403 || r.Closed {
			t.Errorf("record = %+v", r)
		}
	}
	if recs[0].Host != "denied.test" || recs[0].Port != 443 || recs[2].Host != "allowed.test" || recs[2].Port != 444 {
		t.Errorf("hosts/ports recorded: %+v", recs)
	}
}

func TestPlainHTTPForwardedInOriginForm(t *testing.T) {
	type seen struct {
		uri, host, proxyAuth, hop string
		close                     bool
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.RequestURI, r.Host, r.Header.Get("Proxy-Authorization"), r.Header.Get("X-Hop"), r.Close}
		w.Header().Set("X-Upstream", "yes")
		io.WriteString(w, "hello")
	}))
	defer srv.Close()
	p := port(t, srv.URL)
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, "127.0.0.1:"+p), Sink: col.sink, AllowLoopbackUpstreams: true})
	resp, body := rawRequest(t, proxy, "GET http://127.0.0.1:"+p+"/a/b?q=1 HTTP/1.1\r\nHost: 127.0.0.1:"+p+
		"\r\nProxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello" || resp.Header.Get("X-Upstream") != "yes" || !resp.Close {
		t.Fatalf("response %d %q %v close=%v", resp.StatusCode, body, resp.Header, resp.Close)
	}
	s := <-got
	if s.uri != "/a/b?q=1" || s.host != "127.0.0.1:"+p || s.proxyAuth != "" || s.hop != "" || !s.close {
		t.Errorf("upstream saw %+v; want origin-form, Host rebuilt, no proxy or hop-by-hop headers, Connection: close", s)
	}
	recs := col.waitFor(t, 2)
	if recs[0].Decision != Allowed || recs[0].Method != "GET" || recs[1].Status != 200 || !recs[1].Closed ||
		recs[1].BytesUp == 0 || recs[1].BytesDown == 0 {
		t.Errorf("records = %+v", recs)
	}

	// The same server by a name that is not listed: 403, and no request.
	resp, _ = rawRequest(t, proxy, "GET http://denied.test:"+p+"/ HTTP/1.1\r\nHost: denied.test:"+p+"\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("denied host: status %d", resp.StatusCode)
	}
	if r := col.all(); len(r) != 3 || r[2].Decision != Denied || r[2].Host != "denied.test" {
		t.Errorf("records = %+v", r)
	}
	select {
	case s := <-got:
		t.Errorf("the upstream got a denied request: %+v", s)
	default:
	}
}

// TestRefusedRequests plays a client that tries to smuggle a request past
// the allowlist: each attempt is refused with 400, recorded, and never
// reaches the upstream.
func TestRefusedRequests(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	p := port(t, srv.URL)
	a := "127.0.0.1:" + p
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, a, "allowed.test:"+p), Sink: col.sink,
		Resolver: mapResolver{"allowed.test": loopback}, AllowLoopbackUpstreams: true})
	cases := []struct{ name, head, reason string }{
		{"host mismatch", "GET http://" + a + "/ HTTP/1.1\r\nHost: other.test:" + p + "\r\n\r\n", "does not match"},
		{"host mismatch by name", "GET http://allowed.test:" + p + "/ HTTP/1.1\r\nHost: " + a + "\r\n\r\n", "does not match"},
		{"duplicate host", "GET http://" + a + "/ HTTP/1.1\r\nHost: " + a + "\r\nHost: " + a + "\r\n\r\n", "duplicate Host"},
		{"duplicate host differing", "GET http://" + a + "/ HTTP/1.1\r\nHost: " + a + "\r\nHost: evil.test\r\n\r\n", "duplicate Host"},
		{"absolute https", "GET https://" + a + "/ HTTP/1.1\r\nHost: " + a + "\r\n\r\n", "absolute https://"},
		{"ip literal not listed", "GET http://127.0.0.2:" + p + "/ HTTP/1.1\r\nHost: 127.0.0.2:" + p + "\r\n\r\n", "IP literal"},
		{"ip literal not listed, CONNECT", "CONNECT 10.9.9.9:443 HTTP/1.1\r\nHost: 10.9.9.9:443\r\n\r\n", "IP literal"},
		{"different port", "GET http://" + a + "/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", "port"},
		{"default port in Host", "GET http://" + a + "/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "port"},
		{"connect host mismatch", "CONNECT " + a + " HTTP/1.1\r\nHost: evil.test:" + p + "\r\n\r\n", "does not match"},
		{"origin form", "GET / HTTP/1.1\r\nHost: " + a + "\r\n\r\n", "absolute http://"},
		{"malformed", "GARBAGE\r\n\r\n", "malformed"},
	}
	for i, c := range cases {
		resp, _ := rawRequest(t, proxy, c.head)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", c.name, resp.StatusCode)
		}
		recs := col.all()
		if len(recs) != i+1 {
			t.Fatalf("%s: %d records, want %d: %+v", c.name, len(recs), i+1, recs)
		}
		r := recs[i]
		if r.Decision != Denied || r.Status != 400 || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: record %+v, want denied with a reason about %q", c.name, r, c.reason)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the upstream served %d refused requests", n)
	}
}

// TestLoopbackRefusedByDefault: with the default Config an allowed name or
// literal that is (or resolves to) loopback, link-local or an unflagged
// private address is denied before any connection is made.
func TestLoopbackRefusedByDefault(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	col := &collector{}
	proxy := startProxy(t, Config{
		Policy: policy(t, "127.0.0.1:"+p, "rebind.test:"+p, "v6.test:"+p, "private.test:"+p, "169.254.169.254:80", "mixed.test:"+p, "metadata.test:80"),
		Sink:   col.sink,
		Resolver: mapResolver{
			"rebind.test":  loopback,
			"v6.test":      {netip.MustParseAddr("::1")},
			"private.test": {netip.MustParseAddr("10.1.2.3")},
			"mixed.test":   {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")},
			// An allowed name rebound to the cloud metadata address.
			"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		},
	})
	cases := []struct{ target, reason string }{
		{"127.0.0.1:" + p, "loopback"},
		{"rebind.test:" + p, "loopback"},
		{"v6.test:" + p, "loopback"},
		{"private.test:" + p, "private"},
		{"169.254.169.254:80", "link-local"},
		{"mixed.test:" + p, "loopback"},
		{"metadata.test:80", "link-local"},
	}
	for i, c := range cases {
		for _, head := range []string{
			"CONNECT " + c.target + " HTTP/1.1\r\nHost: " + c.target + "\r\n\r\n",
			"GET http://" + c.target + "/ HTTP/1.1\r\nHost: " + c.target + "\r\n\r\n",
		} {
			resp, _ := rawRequest(t, proxy, head)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", head, resp.StatusCode)
			}
		}
		recs := col.all()
		for _, r := range recs[2*i:] {
			if r.Decision != Denied || !strings.Contains(r.Reason, c.reason) || len(r.Resolved) == 0 {
				t.Errorf("%s: record %+v, want denied for %s", c.target, r, c.reason)
			}
		}
	}
	if n := len(col.all()); n != 2*len(cases) {
		t.Errorf("%d records, want %d", n, 2*len(cases))
	}
	// No connection reached the listener: the first one it accepts is ours.
	mine, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.RemoteAddr().String() != mine.LocalAddr().String() {
		t.Errorf("the loopback listener was reached from %s before the test's own connection", first.RemoteAddr())
	}
}

func TestRedact(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://user:pw@proxy:3128", "http://REDACTED@proxy:3128"},
		{"dial HTTPS://tok@gw.test/x failed", "dial HTTPS://REDACTED@gw.test/x failed"},
		{"a http://u:p@h1 b socks5://x:y@h2:1080", "a http://REDACTED@h1 b socks5://REDACTED@h2:1080"},
		{"http://proxy:3128/path@x", "http://proxy:3128/path@x"},
		{"user@example.com", "user@example.com"},
		{"no url here", "no url here"},
		{"", ""},
	}
	for _, c := range cases {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRecordsAreRedacted: a client whose request carries credentials in a
// URL never sees them written to egress.jsonl or an event.
func TestRecordsAreRedacted(t *testing.T) {
	var buf bytes.Buffer
	j := NewJSONL(&buf)
	var evs []string
	proxy := startProxy(t, Config{Policy: policy(t, "allowed.test"), Cell: "http://cell:secret@x", Sink: Tee(j.Record, func(d Decision) {
		b, _ := json.Marshal(EventData(d))
		evs = append(evs, string(b))
	})})
	rawRequest(t, proxy, "GET http://user:secret@[bad/ HTTP/1.1\r\nHost: x\r\n\r\n")
	rawRequest(t, proxy, "GET http://user:secret@denied.test/ HTTP/1.1\r\n\r\n")
	rawRequest(t, proxy, "GET http://user:secret@allowed.test:443/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if err := j.Err(); err != nil {
		t.Fatal(err)
	}
	all := buf.String() + strings.Join(evs, "\n")
	if strings.Contains(all, "secret") || len(evs) != 3 {
		t.Errorf("records leak a credential or are missing:\n%s", all)
	}
}

// TestEgressJSONLLines: every record is one line that parses, with the
// fields of DESIGN §6.
func TestEgressJSONLLines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	p := port(t, srv.URL)
	var buf bytes.Buffer
	j := NewJSONL(&buf)
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, "127.0.0.1:"+p), Cell: "cell-7", Sink: Tee(j.Record, col.sink), AllowLoopbackUpstreams: true})
	rawRequest(t, proxy, "GET http://127.0.0.1:"+p+"/ HTTP/1.1\r\nHost: 127.0.0.1:"+p+"\r\n\r\n")
	// The client has the whole response before the proxy's close record:
	// wait for it, so the lines come in the order the test reads them.
	col.waitFor(t, 2)
	rawRequest(t, proxy, "CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
	col.waitFor(t, 3)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	type rec struct {
		Time        time.Time `json:"time"`
		Cell        string    `json:"cell"`
		Conn        uint64    `json:"conn"`
		Method      string    `json:"method"`
		Host        string    `json:"host"`
		Port        int       `json:"port"`
		Decision    string    `json:"decision"`
		Reason      string    `json:"reason"`
		Closed      bool      `json:"closed"`
		BytesUp     *int64    `json:"bytes_up"`
		BytesDown   *int64    `json:"bytes_down"`
		DurationSec *float64  `json:"duration_sec"`
	}
	var rs []rec
	for i, l := range lines {
		var r rec
		dec := json.NewDecoder(strings.NewReader(l))
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
		if r.Time.IsZero() || r.Cell != "cell-7" || r.Conn == 0 || r.Method == "" || r.Host == "" || r.Port == 0 ||
			r.BytesUp == nil || r.BytesDown == nil || r.DurationSec == nil {
			t.Errorf("line %d lacks a field: %s", i+1, l)
		}
		rs = append(rs, r)
	}
	if rs[0].Decision != Allowed || rs[1].Decision != Allowed || !rs[1].Closed || *rs[1].BytesDown == 0 ||
		rs[2].Decision != Denied || rs[2].Host != "denied.test" {
		t.Errorf("lines = %+v", rs)
	}
	d := EventData(col.all()[1])
	if d.Decision != Allowed || !d.Closed || d.BytesDown == 0 || d.Host != "127.0.0.1" || d.Method != "GET" {
		t.Errorf("EventData = %+v", d)
	}
}

func TestUpstreamErrorRecorded(t *testing.T) {
	// A port with no listener: take one and close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	col := &collector{}
	proxy := startProxy(t, Config{Policy: policy(t, addr, "nxdomain.test"), Sink: col.sink, AllowLoopbackUpstreams: true})
	resp, _ := rawRequest(t, proxy, "CONNECT "+addr+" HTTP/1.1\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	resp, _ = rawRequest(t, proxy, "CONNECT nxdomain.test:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	recs := col.all()
	if len(recs) != 3 || recs[0].Decision != Allowed || recs[1].Decision != Error || !strings.Contains(recs[1].Reason, "connect") ||
		recs[2].Decision != Error || !strings.Contains(recs[2].Reason, "resolve") {
		t.Errorf("records = %+v", recs)
	}
}

func TestServeStopsOpenTunnels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, _ := New(Config{Policy: policy(t, ln.Addr().String()), AllowLoopbackUpstreams: true})
	pl, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, pl) }()
	c, err := net.Dial("tcp", pl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", ln.Addr())
	up, _ := ln.Accept()
	defer up.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended with a tunnel open")
	}
	if _, err := net.Dial("tcp", pl.Addr().String()); err == nil {
		t.Error("the listener still accepts after Serve returned")
	}
}

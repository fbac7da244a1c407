package proxylogger

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// Gateway makes the proxy the model gateway (DESIGN §6.1). A CONNECT to a
// host of one of its Routes is intercepted: the proxy answers the client's
// TLS with a leaf certificate minted from CA for that host, verifies the
// upstream's certificate itself (Config.UpstreamRoots), puts the route's
// real credentials where the client sent their placeholders, and records
// every request as a ModelCall. A CONNECT to any other allowed host stays a
// plain tunnel; a host off the allowlist is refused before any TLS.
type Gateway struct {
	// CA signs the leaf certificates; the agent trusts its certificate.
	CA *tlsca.CA
	// Routes are the providers served: their hosts (allowlist entries,
	// also needed on the Policy), credentials and auth headers.
	Routes []providers.Route
}

// gateway is a Gateway compiled for lookups.
type gateway struct {
	minter *tlsca.Minter
	routes map[hostPort]*route
}

type hostPort struct {
	host string
	port int
}

// route is a providers.Route with its substitutions ready.
type route struct {
	providers.Route
	repl    *strings.Replacer // placeholder → value
	scrub   *strings.Replacer // value → REDACTED
	headers []string          // canonical AuthHeaders
}

func newGateway(g *Gateway) (*gateway, error) {
	if g.CA == nil {
		return nil, errors.New("proxylogger: a gateway needs a CA")
	}
	m, err := tlsca.NewMinter(g.CA)
	if err != nil {
		return nil, err
	}
	gw := &gateway{minter: m, routes: map[hostPort]*route{}}
	for _, r := range g.Routes {
		rt := &route{Route: r}
		var repl, scrub []string
		for _, c := range r.Credentials {
			if c.Placeholder == "" || c.Value == "" {
				return nil, fmt.Errorf("proxylogger: route %s: credential %s without placeholder or value", r.Provider, c.Env)
			}
			repl = append(repl, c.Placeholder, c.Value)
		}
		for _, s := range r.Secrets() {
			scrub = append(scrub, s, Redacted)
		}
		rt.repl, rt.scrub = strings.NewReplacer(repl...), strings.NewReplacer(scrub...)
		for _, h := range r.AuthHeaders {
			rt.headers = append(rt.headers, http.CanonicalHeaderKey(h))
		}
		for _, h := range r.Hosts {
			e, err := egress.ParseEntry(h)
			if err != nil {
				return nil, fmt.Errorf("proxylogger: route %s: %w", r.Provider, err)
			}
			k := hostPort{e.Host, e.Port}
			if old, dup := gw.routes[k]; dup && old.Provider != r.Provider {
				return nil, fmt.Errorf("proxylogger: %s is a host of both %s and %s", e, old.Provider, r.Provider)
			}
			gw.routes[k] = rt
		}
	}
	return gw, nil
}

func (g *gateway) route(e Entry) *route {
	if g == nil {
		return nil
	}
	return g.routes[hostPort{e.Host, e.Port}]
}

// apply puts the route's real credentials where the request carries their
// placeholders (the route's auth headers and auth query parameters, never
// anywhere else), sets the route's extra headers, and asks for an
// uncompressed response on the APIs whose usage is read.
func (r *route) apply(h http.Header, u *url.URL, api string) {
	for _, name := range r.headers {
		vs := h.Values(name)
		for i, v := range vs {
			vs[i] = r.repl.Replace(v)
		}
	}
	if len(r.AuthQuery) > 0 && u.RawQuery != "" {
		q := u.Query()
		changed := false
		for _, k := range r.AuthQuery {
			vs := q[k]
			for i, v := range vs {
				if nv := r.repl.Replace(v); nv != v {
					vs[i], changed = nv, true
				}
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	for k, v := range r.Headers {
		h.Set(k, v)
	}
	if api != "" {
		h.Set("Accept-Encoding", "identity")
	}
}

// intercept serves a CONNECT to a route's host: it records the allowed
// decision, starts the upstream connection, answers 200, and serves the
// client's requests over TLS terminated with the host's minted leaf (or
// over plain HTTP when the client does not start TLS), each forwarded to
// the upstream (TLS verified against the upstream roots), with the route's
// credentials in place and recorded as a ModelCall. The connection's close
// record carries the bytes from and to the client.
func (c *conn) intercept(ctx context.Context, br *bufio.Reader, e Entry, r *route) {
	addrs, resolved, ok := c.resolve(ctx, e, true)
	if !ok {
		return
	}
	type dialed struct {
		c   net.Conn
		err error
	}
	first := make(chan dialed, 1)
	go func() {
		up, err := c.connectUpstream(ctx, e, addrs, true)
		first <- dialed{up, err}
	}()
	scheme := "http"
	x := &exchange{c: c, e: e, r: r}
	var firstOnce sync.Once
	dial := func(ctx context.Context) (net.Conn, error) {
		var d dialed
		used := true
		firstOnce.Do(func() { d, used = <-first, false })
		if used {
			d.c, d.err = c.connectUpstream(ctx, e, addrs, true)
		}
		if d.err != nil {
			return nil, d.err
		}
		x.mu.Lock()
		x.addr = d.c.RemoteAddr().String()
		x.mu.Unlock()
		return d.c, nil
	}
	defer func() {
		firstOnce.Do(func() {
			if d := <-first; d.c != nil {
				d.c.Close()
			}
		})
	}()
	if _, err := io.WriteString(c.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.record(Decision{Decision: Error, Reason: "answer client: " + err.Error(), Resolved: resolved, Closed: true})
		return
	}
	cc := &countConn{Conn: c.c, r: br}
	var client net.Conn = cc
	isTLS := false
	_ = c.c.SetReadDeadline(time.Now().Add(c.p.cfg.HeaderTimeout))
	if b, err := br.Peek(1); err == nil && b[0] == 0x16 {
		isTLS, scheme = true, "https"
		client = tls.Server(cc, &tls.Config{
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.p.gw.minter.Cert(e.Host) },
			NextProtos:     []string{"http/1.1"},
			MinVersion:     tls.VersionTLS12,
		})
	}
	_ = c.c.SetReadDeadline(time.Time{})
	tr := &http.Transport{
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	if isTLS {
		tr.DialTLSContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			raw, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			sn := e.Host
			tc := tls.Client(raw, &tls.Config{ServerName: sn, RootCAs: c.p.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
			if err := tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, fmt.Errorf("TLS with the upstream %s: %w", e.Host, err)
			}
			return tc, nil
		}
	} else {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
	}
	defer tr.CloseIdleConnections()
	x.scheme = scheme
	x.rp = &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
			pr.Out.Host = pr.In.Host
		},
		ModifyResponse: x.modifyResponse,
		ErrorHandler:   x.errorHandler,
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	srv := &http.Server{
		Handler:           x,
		ReadHeaderTimeout: c.p.cfg.HeaderTimeout,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	ln := newOneConn(client)
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			ln.done()
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	_ = srv.Serve(ln)
	if !ln.accepted() {
		client.Close() // closed before it served the connection
		ln.done()
	}
	ln.wait()
	c.record(Decision{Decision: Allowed, Status: http.StatusOK, Reason: "gateway connection closed", Resolved: resolved,
		Upstream: x.upstream(), Closed: true, BytesUp: cc.in.Load(), BytesDown: cc.out.Load()})
}

// exchange serves the requests of one intercepted connection.
type exchange struct {
	c      *conn
	e      Entry
	r      *route
	scheme string
	rp     *httputil.ReverseProxy

	mu   sync.Mutex
	addr string // the upstream's address, once connected
}

func (x *exchange) upstream() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.addr
}

type callKey struct{}

// ServeHTTP checks the request names the CONNECT's host, refuses upgrades,
// substitutes the route's credentials and forwards it.
func (x *exchange) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	defPort := 443
	if x.scheme == "http" {
		defPort = 80
	}
	host, port, err := splitAuthority(req.Host, defPort)
	if err == nil {
		host, _, err = egress.NormalizeHost(host)
	}
	if err != nil || host != x.e.Host || (port != x.e.Port && strings.Contains(req.Host, ":")) {
		x.c.record(Decision{Decision: Denied, Status: http.StatusMisdirectedRequest,
			Reason: fmt.Sprintf("Host %q of a request inside the tunnel is not the CONNECT target %s", req.Host, x.e)})
		http.Error(w, "proctor gateway: the Host header must name the CONNECT target", http.StatusMisdirectedRequest)
		return
	}
	if req.Header.Get("Upgrade") != "" {
		x.c.record(Decision{Decision: Denied, Status: http.StatusNotImplemented, Reason: "protocol upgrade inside the gateway is not proxied"})
		http.Error(w, "proctor gateway: protocol upgrades are not proxied", http.StatusNotImplemented)
		return
	}
	cl := x.c.newCall(x.r, x.e, req.Method, req.URL.Path)
	cl.reqHead = headSize(req.Method+" "+req.URL.RequestURI()+" HTTP/1.1", req.Header) + int64(len("Host: \r\n")+len(req.Host))
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = cl.requestBody(req.Body)
	}
	x.r.apply(req.Header, req.URL, cl.d.API)
	x.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), callKey{}, cl)))
}

func (x *exchange) modifyResponse(resp *http.Response) error {
	cl, _ := resp.Request.Context().Value(callKey{}).(*call)
	if cl == nil {
		return nil
	}
	cl.response(resp)
	return nil
}

func (x *exchange) errorHandler(w http.ResponseWriter, req *http.Request, err error) {
	cl, _ := req.Context().Value(callKey{}).(*call)
	// A *url.Error names the URL, whose query may hold a substituted key:
	// only its cause is kept, and every real value is scrubbed.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := x.r.scrub.Replace(Redact(err.Error()))
	if cl != nil {
		cl.fail(0, "upstream: "+msg)
	}
	if req.Context().Err() != nil {
		return // the client went
	}
	http.Error(w, "proctor gateway: upstream: "+msg, http.StatusBadGateway)
}

// call is one request on a route's host, becoming a ModelCall.
type call struct {
	c       *conn
	r       *route
	d       events.ModelCallData
	start   time.Time
	reqHead int64
	reqBody *countBody
	once    sync.Once
}

func (c *conn) newCall(r *route, e Entry, method, path string) *call {
	cl := &call{c: c, r: r, start: time.Now()}
	cl.d = events.ModelCallData{Provider: r.Provider, Host: e.Host, Port: e.Port, Method: method, Path: path, API: APIOf(path)}
	if cl.d.API == APIGeminiGenerate {
		cl.d.Model = geminiModel(path)
	}
	return cl
}

// maxSniff bounds the request body bytes kept to read its model from.
const maxSniff = 4 << 20

func (cl *call) requestBody(b io.ReadCloser) io.ReadCloser {
	cl.reqBody = &countBody{ReadCloser: b, keep: cl.d.API != ""}
	return cl.reqBody
}

// response wraps the upstream's response body: what the client reads
// through it is counted and parsed, and its end (EOF, or Close before it)
// records the call.
func (cl *call) response(resp *http.Response) {
	cl.d.Status = resp.StatusCode
	cl.d.TTFBSec = time.Since(cl.start).Seconds()
	sse := strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream")
	cl.d.Stream = sse
	api := cl.d.API
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		api = "" // compressed anyway: counted, not parsed
	}
	head := headSize(fmt.Sprintf("HTTP/1.1 %s", resp.Status), resp.Header)
	resp.Body = &respBody{ReadCloser: resp.Body, cl: cl, p: newUsageParser(api, sse), head: head}
}

// fail records the call as failed with status (0: no response) and why.
func (cl *call) fail(status int, why string) {
	cl.once.Do(func() {
		cl.d.Status = status
		cl.d.Error = why
		cl.emit(0, Usage{})
	})
}

func (cl *call) emit(respBytes int64, u Usage) {
	cl.d.DurationSec = time.Since(cl.start).Seconds()
	cl.d.RequestBytes = cl.reqHead
	if cl.reqBody != nil {
		cl.d.RequestBytes += cl.reqBody.n
		if cl.d.Model == "" && cl.reqBody.keep && !cl.reqBody.over {
			if m := gjson.GetBytes(cl.reqBody.buf.Bytes(), "model"); m.Type == gjson.String {
				cl.d.Model = m.String()
			}
		}
		cl.reqBody.buf = bytes.Buffer{}
	}
	cl.d.ResponseBytes = respBytes
	if u.Model != "" {
		cl.d.Model = u.Model
	}
	cl.d.InputTokens, cl.d.OutputTokens, cl.d.CacheReadTokens, cl.d.CacheWriteTokens = u.Input, u.Output, u.CacheRead, u.CacheWrite
	cl.c.recordCall(cl.d)
}

// countBody counts a request body and keeps its first maxSniff bytes
// when keep is set.
type countBody struct {
	io.ReadCloser
	n    int64
	keep bool
	over bool
	buf  bytes.Buffer
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.keep && !b.over {
		if b.buf.Len()+n > maxSniff {
			b.over = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	return n, err
}

// respBody counts and parses a response body as it is read; at EOF or
// Close the call is recorded (once).
type respBody struct {
	io.ReadCloser
	cl   *call
	p    *usageParser
	n    int64
	head int64
	eof  bool
}

func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.n += int64(n)
		_, _ = b.p.Write(p[:n])
	}
	if err == io.EOF {
		b.eof = true
		b.done("")
	}
	return n, err
}

func (b *respBody) Close() error {
	err := b.ReadCloser.Close()
	if !b.eof {
		b.done("the response ended before its end (the client or the upstream went)")
	}
	return err
}

func (b *respBody) done(why string) {
	b.cl.once.Do(func() {
		b.cl.d.Error = why
		b.cl.emit(b.head+b.n, b.p.Finish())
	})
}

// headSize is the size of a message head: its first line, header lines
// and the blank line.
func headSize(first string, h http.Header) int64 {
	n := int64(len(first) + 2)
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + 2 + len(v) + 2)
		}
	}
	return n + 2
}

// countConn is the client's connection with the bytes buffered after the
// CONNECT head read first, counting bytes in and out.
type countConn struct {
	net.Conn
	r       *bufio.Reader
	in, out atomic.Int64 // net/http may still read in the background as the connection closes
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

// oneConn is a listener that accepts one connection, then blocks until
// that connection is closed and reports the listener closed.
type oneConn struct {
	c      net.Conn
	mu     sync.Mutex
	given  bool
	closed chan struct{}
	once   sync.Once
}

func newOneConn(c net.Conn) *oneConn { return &oneConn{c: c, closed: make(chan struct{})} }

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.given {
		l.given = true
		l.mu.Unlock()
		return l.c, nil
	}
	l.mu.Unlock()
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) accepted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.given
}

func (l *oneConn) done()          { l.once.Do(func() { close(l.closed) }) }
func (l *oneConn) wait()          { <-l.closed }
func (l *oneConn) Close() error   { l.done(); return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// resolve resolves the entry's host (unless it goes through the upstream
// proxy, which resolves it), refuses forbidden addresses and records the
// allowed decision. On refusal it has answered the client and returns
// false.
func (c *conn) resolve(ctx context.Context, e Entry, tunnel bool) ([]netip.Addr, []string, bool) {
	if c.p.parentFor(e, tunnel) != nil {
		c.record(Decision{Decision: Allowed, Reason: "allowlist entry " + e.String() + " (through the upstream proxy)"})
		return nil, nil, true
	}
	rctx, cancel := context.WithTimeout(ctx, c.p.cfg.DialTimeout)
	defer cancel()
	addrs := []netip.Addr{e.IP}
	if !e.IP.IsValid() {
		var err error
		addrs, err = c.p.cfg.Resolver.LookupNetIP(rctx, "ip", e.Host)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			c.refuse(Error, http.StatusBadGateway, "resolve: "+err.Error())
			return nil, nil, false
		}
	}
	resolved := make([]string, len(addrs))
	for i, a := range addrs {
		resolved[i] = a.Unmap().String()
	}
	for _, a := range addrs {
		if why := forbidden(a, e, c.p.cfg.AllowLoopbackUpstreams); why != "" {
			c.record(Decision{Decision: Denied, Status: http.StatusForbidden, Reason: why, Resolved: resolved})
			c.answer(http.StatusForbidden, why)
			return nil, nil, false
		}
	}
	c.record(Decision{Decision: Allowed, Reason: "allowlist entry " + e.String(), Resolved: resolved})
	return addrs, resolved, true
}

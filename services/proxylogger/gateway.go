package proxylogger

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
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
// uncompressed response on the APIs whose usage is read (unless an AWS
// signature covers Accept-Encoding).
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
	if api != "" && !sigV4Signs(h, u, "accept-encoding") {
		h.Set("Accept-Encoding", "identity")
	}
}

// sigV4Signs reports whether the request is signed with AWS Signature
// Version 4 (Bedrock's access keys; in its Authorization header or a
// presigned query) over header name, which the gateway must then leave
// as it is: changing it would break the signature.
func sigV4Signs(h http.Header, u *url.URL, name string) bool {
	var signed string
	if auth := h.Get("Authorization"); strings.HasPrefix(auth, "AWS4-") {
		_, signed, _ = strings.Cut(auth, "SignedHeaders=")
		signed, _, _ = strings.Cut(signed, ",")
	} else if u.RawQuery != "" && strings.Contains(u.RawQuery, "X-Amz-SignedHeaders") {
		signed = u.Query().Get("X-Amz-SignedHeaders")
	}
	for _, s := range strings.Split(signed, ";") {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return true
		}
	}
	return false
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
	if cl.d.API != "" {
		cl.d.Model = modelOfPath(path)
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
	api := cl.d.API
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		api = "" // compressed anyway: counted, not parsed
	}
	p := newUsageParser(api, resp.Header.Get("Content-Type"))
	cl.d.Stream = p.streamed()
	head := headSize(fmt.Sprintf("HTTP/1.1 %s", resp.Status), resp.Header)
	resp.Body = &respBody{ReadCloser: resp.Body, cl: cl, p: p, head: head}
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
	// cut is set when the client has gone (see cutShort): an end of the
	// body read after it is the upstream's answer to the gateway hanging
	// up (its last chunk can still arrive as the connection closes), not
	// the response's own end, and Close records the call as ended early.
	cut atomic.Bool
}

func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.n += int64(n)
		_, _ = b.p.Write(p[:n])
	}
	if err == io.EOF && !b.cut.Load() {
		b.eof = true
		b.done("")
	}
	return n, err
}

// cutShort marks a call's response body (a respBody) as cut short by the
// client's going, before the gateway closes the upstream connection.
func cutShort(body io.ReadCloser) {
	if b, ok := body.(*respBody); ok {
		b.cut.Store(true)
	}
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

package proxylogger

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// UpstreamProxy is an operator's proxy the sidecar chains its upstream
// connections through (a corporate proxy): HTTPProxy for plain-HTTP
// targets, HTTPSProxy for CONNECT targets, NoProxy the hosts reached
// directly, with the semantics of the HTTP_PROXY, HTTPS_PROXY and NO_PROXY
// variables (golang.org/x/net/http/httpproxy; loopback is never proxied).
// A proxy URL's user name and password are sent as Proxy-Authorization
// (Basic) to that proxy and nowhere else; they never appear in a record,
// a log line or an answer to the client.
type UpstreamProxy = httpproxy.Config

// parentFor returns the upstream proxy for e (https: a CONNECT target,
// else a plain-HTTP one), or nil for a direct connection.
func (p *Proxy) parentFor(e Entry, https bool) *url.URL {
	if p.parent == nil {
		return nil
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	u, err := p.parent(&url.URL{Scheme: scheme, Host: net.JoinHostPort(e.Host, strconv.Itoa(e.Port))})
	if err != nil {
		return nil
	}
	return u
}

// connectUpstream connects to e: directly to one of addrs, or through the
// upstream proxy (tunnel: with a CONNECT to e, so the connection carries
// e's bytes; else plain, for the caller to send an absolute-form request).
func (c *conn) connectUpstream(ctx context.Context, e Entry, addrs []netip.Addr, tunnel bool) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.p.cfg.DialTimeout)
	defer cancel()
	if parent := c.p.parentFor(e, tunnel); parent != nil {
		return c.p.dialParent(ctx, parent, e, tunnel)
	}
	var d net.Dialer
	err := errors.New("no addresses")
	for _, a := range addrs {
		var up net.Conn
		up, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(e.Port)).String())
		if err == nil {
			return up, nil
		}
	}
	return nil, err
}

// parentAddr is the upstream proxy's host:port, with its scheme's port
// when the URL names none.
func parentAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// proxyAuth is the Proxy-Authorization value of u's user info, or "".
func proxyAuth(u *url.URL) string {
	if u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
}

// dialParent connects to the upstream proxy u (TLS when its scheme is
// https) and, for a tunnel, asks it to CONNECT to e. Errors name the
// proxy by host:port only.
func (p *Proxy) dialParent(ctx context.Context, u *url.URL, e Entry, tunnel bool) (net.Conn, error) {
	addr := parentAddr(u)
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", addr, err)
	}
	var pc net.Conn = raw
	if u.Scheme == "https" {
		tc := tls.Client(raw, &tls.Config{ServerName: u.Hostname(), RootCAs: p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("upstream proxy %s: TLS: %w", addr, err)
		}
		pc = tc
	}
	if !tunnel {
		return pc, nil
	}
	target := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if a := proxyAuth(u); a != "" {
		req.Header.Set("Proxy-Authorization", a)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = pc.SetDeadline(dl)
	} else {
		_ = pc.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	}
	if err := req.Write(pc); err != nil {
		pc.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", addr, err)
	}
	br := bufio.NewReader(pc)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		pc.Close()
		return nil, fmt.Errorf("upstream proxy %s answered the CONNECT to %s with %d", addr, target, resp.StatusCode)
	}
	_ = pc.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufConn{Conn: pc, r: br}, nil
	}
	return pc, nil
}

// bufConn reads through r (which holds bytes already read from Conn).
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

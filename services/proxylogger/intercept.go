package proxylogger

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/egress"
)

// Buffers of an intercepted connection: requests and responses pass
// through them, each response's body flushed to the client as it arrives
// from the upstream (a stream's events are never held back).
const (
	interceptBuf = 64 << 10
	// idleTimeout ends an intercepted connection with no request for
	// this long; an upstream connection idle this long is not reused.
	idleTimeout = 5 * time.Minute
	// upstreamReadBuf buffers the upstream's response heads and chunk
	// size lines; a body read of at least this size into an empty buffer
	// goes from the upstream's TLS straight into a piece, not through it.
	upstreamReadBuf = 4 << 10
)

// intercept serves a CONNECT to a route's host: it records the allowed
// decision, starts the upstream connection, answers 200, and serves the
// client's requests over TLS terminated with the host's minted leaf (or
// over plain HTTP when the client does not start TLS), one at a time on
// the connection (HTTP/1.1 keep-alive), each forwarded to the upstream
// (TLS verified against the upstream roots) on a connection kept alive
// too, with the route's credentials in place and recorded as a ModelCall.
// The connection's close record carries the bytes from and to the client.
func (c *conn) intercept(ctx context.Context, br *bufio.Reader, e Entry, r *route) {
	addrs, resolved, ok := c.resolve(ctx, e, true)
	if !ok {
		return
	}
	x := &exchange{c: c, e: e, r: r, addrs: addrs, ctx: ctx}
	// The upstream's TCP connect (and, for TLS, its handshake) runs while
	// the client does its handshake with the proxy.
	x.pending = make(chan dialed, 1)
	go func() {
		up, err := c.connectUpstream(ctx, e, addrs, true)
		x.pending <- dialed{up, err}
	}()
	defer x.close()
	if _, err := io.WriteString(c.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.record(Decision{Decision: Error, Reason: "answer client: " + err.Error(), Resolved: resolved, Closed: true})
		return
	}
	cc := &countConn{Conn: c.c, r: br}
	var client net.Conn = cc
	_ = c.c.SetReadDeadline(time.Now().Add(c.p.cfg.HeaderTimeout))
	if b, err := br.Peek(1); err == nil && b[0] == 0x16 {
		x.tls = true
		x.batch = &batchConn{Conn: cc}
		tc := tls.Server(x.batch, &tls.Config{
			GetCertificate:              func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.p.gw.minter.Cert(e.Host) },
			NextProtos:                  []string{"http/1.1"},
			MinVersion:                  tls.VersionTLS12,
			DynamicRecordSizingDisabled: true,
		})
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.c.SetReadDeadline(time.Time{})
			c.record(Decision{Decision: Error, Reason: "TLS with the client: " + err.Error(), Resolved: resolved,
				Closed: true, BytesUp: cc.in.Load(), BytesDown: cc.out.Load()})
			return
		}
		client = tc
	}
	_ = c.c.SetReadDeadline(time.Time{})
	x.serve(client)
	c.record(Decision{Decision: Allowed, Status: http.StatusOK, Reason: "gateway connection closed", Resolved: resolved,
		Upstream: x.upstreamAddr, Closed: true, BytesUp: cc.in.Load(), BytesDown: cc.out.Load()})
}

type dialed struct {
	c   net.Conn
	err error
}

// exchange serves the requests of one intercepted connection, one at a
// time.
type exchange struct {
	c     *conn
	e     Entry
	r     *route
	addrs []netip.Addr
	ctx   context.Context
	tls   bool

	pending chan dialed // the first upstream connection, being made
	upMu    sync.Mutex  // guards up for the ctx watcher's reads
	up      net.Conn    // the upstream connection kept alive, or nil
	upR     *bufio.Reader
	upW     *bufio.Writer
	upIdle  time.Time
	// peek, while the upstream connection is kept alive, delivers the
	// end of a read of its next byte: before a request it means the
	// upstream closed (or said something unasked); after it, the
	// response has begun.
	peek chan error
	// upstreamAddr is the last upstream's address, for the close record.
	upstreamAddr string
	closeOnce    sync.Once
	// batch is the client's connection under TLS (nil for plain HTTP).
	batch *batchConn
	// client is the connection requests are read from and responses
	// written to (TLS over batch, or the plain connection).
	client net.Conn
}

func (x *exchange) close() {
	x.closeOnce.Do(func() {
		if x.pending != nil {
			if d := <-x.pending; d.c != nil {
				d.c.Close()
			}
			x.pending = nil
		}
		x.closeUpstream()
	})
}

// serve reads the client's requests until it closes, asks for close, or
// a request cannot be answered on the connection any more.
func (x *exchange) serve(client net.Conn) {
	stop := context.AfterFunc(x.ctx, func() {
		client.Close()
		x.upMu.Lock()
		if x.up != nil {
			x.up.Close()
		}
		x.upMu.Unlock()
	})
	defer stop()
	x.client = client
	cr := bufio.NewReaderSize(client, interceptBuf)
	cw := bufio.NewWriterSize(client, interceptBuf)
	for {
		_ = client.SetReadDeadline(time.Now().Add(idleTimeout))
		if _, err := cr.Peek(1); err != nil {
			return // closed, or idle too long
		}
		_ = client.SetReadDeadline(time.Now().Add(x.c.p.cfg.HeaderTimeout))
		req, err := http.ReadRequest(cr)
		_ = client.SetReadDeadline(time.Time{})
		if err != nil {
			x.plain(cw, http.StatusBadRequest, "malformed request: "+err.Error(), true)
			return
		}
		if !x.one(req, cw) || req.Close || !req.ProtoAtLeast(1, 1) {
			return
		}
	}
}

// plain answers the client with a short text status (closing the
// connection when last).
func (x *exchange) plain(cw *bufio.Writer, status int, msg string, last bool) {
	body := "proctor gateway: " + msg + "\n"
	fmt.Fprintf(cw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n", status, http.StatusText(status), len(body))
	if last {
		io.WriteString(cw, "Connection: close\r\n")
	}
	io.WriteString(cw, "\r\n"+body)
	_ = x.flush(cw)
}

// one serves one request and reports whether the connection may carry
// another.
func (x *exchange) one(req *http.Request, cw *bufio.Writer) bool {
	defPort := 443
	if !x.tls {
		defPort = 80
	}
	host, port, err := splitAuthority(req.Host, defPort)
	if err == nil {
		host, _, err = egress.NormalizeHost(host)
	}
	if err != nil || host != x.e.Host || (port != x.e.Port && strings.Contains(req.Host, ":")) {
		x.c.record(Decision{Decision: Denied, Status: http.StatusMisdirectedRequest,
			Reason: fmt.Sprintf("Host %q of a request inside the tunnel is not the CONNECT target %s", req.Host, x.e)})
		x.plain(cw, http.StatusMisdirectedRequest, "the Host header must name the CONNECT target", true)
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		x.c.record(Decision{Decision: Denied, Status: http.StatusNotImplemented, Reason: "protocol upgrade inside the gateway is not proxied"})
		x.plain(cw, http.StatusNotImplemented, "protocol upgrades are not proxied", true)
		return false
	}
	cl := x.c.newCall(x.r, x.e, req.Method, req.URL.Path)
	cl.reqHead = headSize(req.Method+" "+req.URL.RequestURI()+" HTTP/1.1", req.Header) + int64(len("Host: \r\n")+len(req.Host))
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answered here: the upstream gets the body at once.
		io.WriteString(cw, "HTTP/1.1 100 Continue\r\n\r\n")
		if err := x.flush(cw); err != nil {
			return false
		}
	}
	out := &http.Request{
		Method: req.Method, URL: &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: req.Header.Clone(), Host: req.Host,
		ContentLength: req.ContentLength, TransferEncoding: req.TransferEncoding, Body: req.Body,
	}
	stripHopByHop(out.Header)
	out.Header.Del("Expect")
	if out.Body != nil && out.Body != http.NoBody {
		out.Body = cl.requestBody(out.Body)
	}
	x.r.apply(out.Header, out.URL, cl.d.API)
	resp, err := x.roundTrip(out)
	if err != nil {
		msg := x.r.scrub.Replace(Redact(err.Error()))
		cl.fail(0, "upstream: "+msg)
		x.plain(cw, http.StatusBadGateway, "upstream: "+msg, true)
		return false
	}
	cl.response(resp)
	keep := x.writeResponse(cw, resp)
	resp.Body.Close()
	if resp.Close || !keep {
		x.closeUpstream()
	} else {
		x.upIdle = time.Now()
		ch, r := make(chan error, 1), x.upR
		go func() { _, err := r.Peek(1); ch <- err }()
		x.peek = ch
	}
	return keep
}

// roundTrip writes out to the upstream (connecting first when no
// connection is kept alive) and reads the response head, skipping 1xx
// answers. A kept-alive connection the upstream has closed meanwhile is
// replaced before the request is written.
func (x *exchange) roundTrip(out *http.Request) (*http.Response, error) {
	if x.up != nil {
		select {
		case <-x.peek:
			x.closeUpstream() // the upstream closed it, or spoke unasked
		default:
			if time.Since(x.upIdle) > idleTimeout {
				x.closeUpstream()
			}
		}
	}
	if x.up == nil {
		if err := x.dial(); err != nil {
			return nil, err
		}
	}
	if err := out.Write(x.upW); err != nil {
		x.closeUpstream()
		return nil, fmt.Errorf("write the request: %w", err)
	}
	if err := x.upW.Flush(); err != nil {
		x.closeUpstream()
		return nil, fmt.Errorf("write the request: %w", err)
	}
	if x.peek != nil {
		err := <-x.peek
		x.peek = nil
		if err != nil {
			x.closeUpstream()
			return nil, fmt.Errorf("read the response: %w", err)
		}
	}
	for {
		resp, err := http.ReadResponse(x.upR, out)
		if err != nil {
			x.closeUpstream()
			return nil, fmt.Errorf("read the response: %w", err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Body.Close()
				x.closeUpstream()
				return nil, errors.New("the upstream switched protocols; upgrades are not proxied")
			}
			return resp, nil
		}
		resp.Body.Close()
	}
}

// dial makes the upstream connection: the one started at the CONNECT
// first, then new ones; TLS verified against the upstream roots when the
// client spoke TLS.
func (x *exchange) dial() error {
	var d dialed
	if x.pending != nil {
		d = <-x.pending
		x.pending = nil
	} else {
		d.c, d.err = x.c.connectUpstream(x.ctx, x.e, x.addrs, true)
	}
	if d.err != nil {
		return d.err
	}
	raw := d.c
	x.upstreamAddr = raw.RemoteAddr().String()
	conn := raw
	if x.tls {
		// TLS reads a record's header and then its body, each with a read
		// of its own; through a buffer, the connection is read 64 KiB at
		// a time instead, as the tunnel reads it.
		br := &bufReadConn{Conn: raw, r: bufio.NewReaderSize(raw, interceptBuf)}
		tc := tls.Client(br, &tls.Config{ServerName: x.e.Host, RootCAs: x.c.p.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12, DynamicRecordSizingDisabled: true})
		hctx, cancel := context.WithTimeout(x.ctx, x.c.p.cfg.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			raw.Close()
			return fmt.Errorf("TLS with the upstream %s: %w", x.e.Host, err)
		}
		conn = tc
	}
	x.upMu.Lock()
	x.up = conn
	x.upMu.Unlock()
	x.upR, x.upW = bufio.NewReaderSize(conn, upstreamReadBuf), bufio.NewWriterSize(conn, interceptBuf)
	return nil
}

func (x *exchange) closeUpstream() {
	x.upMu.Lock()
	defer x.upMu.Unlock()
	if x.up != nil {
		x.up.Close() // ends a pending peek
		x.up = nil
	}
	x.peek = nil
}

// writeResponse writes resp to the client: its head (hop-by-hop headers
// dropped; chunked when the upstream named no length), then its body. A
// goroutine of its own reads the body from the upstream while this one
// writes to the client; whatever has arrived by the time a write is done
// goes out in the next one, and nothing waits once nothing more is in
// hand (a stream's event is never held back for the next). It reports
// whether the connection may carry another request (the body was written
// whole).
func (x *exchange) writeResponse(cw *bufio.Writer, resp *http.Response) bool {
	stripHopByHop(resp.Header)
	bodyless := resp.Request.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200
	chunked := !bodyless && resp.ContentLength < 0
	fmt.Fprintf(cw, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode))))
	if resp.ContentLength >= 0 && !bodyless {
		resp.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if chunked {
		resp.Header.Set("Transfer-Encoding", "chunked")
	}
	if err := resp.Header.Write(cw); err != nil {
		return false
	}
	io.WriteString(cw, "\r\n")
	if bodyless {
		return x.flush(cw) == nil
	}
	pieces, stop := make(chan piece, relayDepth), make(chan struct{})
	go readPieces(resp.Body, pieces, stop)
	// drain, once the client is gone, closes the upstream connection (as
	// the client's own going would have: a model stops generating), ends
	// the reader and returns its buffers: the reader is gone before the
	// caller closes the body, and the call is recorded as ended early,
	// even when the upstream's last chunk, its answer to the hang-up,
	// arrives before the connection is closed (cutShort).
	drain := func() {
		cutShort(resp.Body)
		x.closeUpstream()
		close(stop)
		for p := range pieces {
			pieceBufs.Put(p.buf)
		}
	}
	// Under TLS the client's records gather in the batch while held and
	// go out when nothing more is in hand (or the batch is full).
	x.hold()
	defer x.unhold()
	ok := true
	for {
		var p piece
		var more bool
		select {
		case p, more = <-pieces:
		default:
			// Nothing more in hand: what is written goes out now.
			if err := x.push(cw); err != nil {
				drain()
				return false
			}
			p, more = <-pieces
		}
		if !more {
			break
		}
		if err := x.writePiece(cw, p, chunked); err != nil {
			pieceBufs.Put(p.buf)
			drain()
			return false
		}
		pieceBufs.Put(p.buf)
		if p.err != nil && p.err != io.EOF {
			ok = false
		}
	}
	if ok && chunked {
		io.WriteString(cw, "0\r\n\r\n")
	}
	return x.push(cw) == nil && ok
}

// writePiece writes one piece of a body to the client (as a chunk when
// chunked). Under TLS a large piece goes to the client's TLS connection
// as it lies in its buffer, its chunk framing written around it there:
// one copy fewer than through cw. Anything else is written to cw, which
// goes out at the next push, or now when the piece does not fit.
func (x *exchange) writePiece(cw *bufio.Writer, p piece, chunked bool) error {
	if p.n == 0 {
		return nil
	}
	if x.batch != nil && p.n >= directPiece {
		if err := cw.Flush(); err != nil { // into the held batch
			return err
		}
		b := (*p.buf)[:pieceHead+p.n]
		if chunked {
			b = append(b, "\r\n"...)
			var sb [8]byte
			size := strconv.AppendUint(sb[:0], uint64(p.n), 16)
			i := pieceHead - len(size) - 2
			copy(b[i:], size)
			b[pieceHead-2], b[pieceHead-1] = '\r', '\n'
			b = b[i:]
		} else {
			b = b[pieceHead:]
		}
		if _, err := x.client.Write(b); err != nil {
			return err
		}
		if x.batch.size() >= interceptBuf {
			return x.batch.push()
		}
		return nil
	}
	if cw.Available() < p.n+chunkFraming {
		if err := x.push(cw); err != nil {
			return err
		}
	}
	if chunked {
		fmt.Fprintf(cw, "%x\r\n", p.n)
	}
	cw.Write((*p.buf)[pieceHead : pieceHead+p.n])
	if chunked {
		io.WriteString(cw, "\r\n")
	}
	return nil
}

// hold starts gathering the client's TLS records in the batch (plain
// HTTP: nothing to gather, cw writes to the connection).
func (x *exchange) hold() {
	if x.batch != nil {
		x.batch.hold()
	}
}

// unhold ends a hold; what is still gathered is written.
func (x *exchange) unhold() {
	if x.batch != nil {
		_ = x.batch.release()
	}
}

// push writes what cw holds, and under TLS what the batch has gathered,
// to the client, in one write.
func (x *exchange) push(cw *bufio.Writer) error {
	err := cw.Flush()
	if x.batch != nil {
		if perr := x.batch.push(); err == nil {
			err = perr
		}
	}
	return err
}

// flush writes what cw holds to the client; the TLS records it makes go
// to the connection in one write.
func (x *exchange) flush(cw *bufio.Writer) error {
	if x.batch == nil {
		return cw.Flush()
	}
	x.batch.hold()
	err := cw.Flush()
	if rerr := x.batch.release(); err == nil {
		err = rerr
	}
	return err
}

// Pieces of a response body between its reader and its writer: up to
// relayDepth pieces of up to pieceSize bytes wait for the writer.
const (
	pieceSize    = 32 << 10
	relayDepth   = 4
	chunkFraming = 16 // a chunk's size line and its CRLF
	// pieceHead is the room before a piece's bytes in its buffer for its
	// chunk size line, and 2 bytes after them for its CRLF.
	pieceHead = 8
	// directPiece is the size from which a piece is written to the
	// client's TLS where it lies rather than copied into cw; a smaller
	// one (a model's event) shares cw, and a TLS record, with the head
	// and the pieces around it.
	directPiece = 4 << 10
)

var pieceBufs = sync.Pool{New: func() any { b := make([]byte, pieceHead+pieceSize+2); return &b }}

// piece is one read of a response body.
type piece struct {
	buf *[]byte
	n   int
	err error
}

// readPieces reads body into pieces until the body ends or fails (the
// last piece carries the error) or stop is closed; it closes pieces.
func readPieces(body io.Reader, pieces chan<- piece, stop <-chan struct{}) {
	defer close(pieces)
	for {
		bp := pieceBufs.Get().(*[]byte)
		n, err := body.Read((*bp)[pieceHead : pieceHead+pieceSize])
		if n == 0 && err == nil {
			pieceBufs.Put(bp)
			continue
		}
		select {
		case pieces <- piece{bp, n, err}:
		case <-stop:
			pieceBufs.Put(bp)
			return
		}
		if err != nil {
			return
		}
	}
}

// batchConn is the client's connection under the gateway's TLS. Between
// hold and release the records TLS writes are gathered and go to the
// connection in one write (crypto/tls writes each record of up to 16 KiB
// on its own); at any other time (the handshake, alerts) a write goes
// straight through.
type batchConn struct {
	net.Conn
	mu   sync.Mutex
	held bool
	buf  []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	return b.Conn.Write(p)
}

func (b *batchConn) hold() {
	b.mu.Lock()
	b.held = true
	b.mu.Unlock()
}

func (b *batchConn) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held = false
	return b.writeHeld()
}

// push writes what is gathered and goes on gathering.
func (b *batchConn) push() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.writeHeld()
}

func (b *batchConn) writeHeld() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

// size is the number of bytes gathered.
func (b *batchConn) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

// bufReadConn is a connection read through a buffer.
type bufReadConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufReadConn) Read(p []byte) (int, error) { return c.r.Read(p) }

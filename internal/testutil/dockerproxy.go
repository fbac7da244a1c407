package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// DockerProxy is a reverse proxy of the Docker engine's API on a unix
// socket of its own, in front of the engine's socket, for tests that need
// the engine to misbehave on one call: point a client at it (Client, or
// DOCKER_HOST=Host for a proctor process) and add rules. Every request no
// rule holds is forwarded as it comes, streams and hijacked connections
// (exec start, attach) included; a client that goes away cancels its
// request, as it would at the engine.
//
// Rules match a route written as the engine's API documents it, without
// the version prefix: a method and a path pattern of path.Match
// ("POST /containers/create", "POST /exec/*/start"). The proxy closes
// when the test ends, which releases every request still held.
type DockerProxy struct {
	// Socket is the proxy's unix socket; Host is "unix://" + Socket.
	Socket, Host string

	engine string
	rp     *httputil.ReverseProxy
	srv    *http.Server
	closed chan struct{}

	mu    sync.Mutex
	rules []*ProxyRule
	// execs maps an exec id to the rule that stalls its start (see
	// StallExecStart).
	execs map[string]*ProxyRule
}

// ProxyRule is one rule of a DockerProxy; its counters are safe to read
// while the proxy runs.
type ProxyRule struct {
	method, pattern string
	// stall: never forwarded; else forwarded after delay or Release.
	stall   bool
	delay   time.Duration
	release chan struct{}
	once    sync.Once
	// cmd, for StallExecStart: the exec's command line contains it.
	cmd string
	// fail, for Fail: the first fail requests are answered with status
	// and message, the later ones forwarded at once.
	fail    int64
	status  int
	message string

	hits, answered atomic.Int64
	hit            chan struct{}
	hitOnce        sync.Once
}

// Hits is the number of requests the rule has held so far.
func (r *ProxyRule) Hits() int { return int(r.hits.Load()) }

// Answered is the number of held requests the engine has answered
// (forwarded after their delay or Release, whether or not their client
// was still there to read the answer).
func (r *ProxyRule) Answered() int { return int(r.answered.Load()) }

// Hit is closed when the rule holds its first request.
func (r *ProxyRule) Hit() <-chan struct{} { return r.hit }

// Release forwards every request the rule holds, and every later one at
// once. It does nothing for a stall.
func (r *ProxyRule) Release() { r.once.Do(func() { close(r.release) }) }

// WaitHit waits up to timeout for the rule's first request, failing the
// test when none came.
func (r *ProxyRule) WaitHit(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.hit:
	case <-time.After(timeout):
		t.Fatalf("no request matched %s %s within %s", r.method, r.pattern, timeout)
	}
}

// WaitAnswered polls until the engine has answered n of the rule's held
// requests, failing the test after timeout.
func (r *ProxyRule) WaitAnswered(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for r.Answered() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: the engine answered %d of the held requests within %s, want %d", r.method, r.pattern, r.Answered(), timeout, n)
		}
		time.Sleep(10 * time.Millisecond) // polling a counter
	}
}

// NewDockerProxy starts a proxy in front of the engine the environment
// names (DOCKER_HOST when it is unix://, else /var/run/docker.sock),
// after checking that the engine answers (see Docker: skipped, or failed
// under CI, when none does). It is closed when the test ends.
func NewDockerProxy(t testing.TB) *DockerProxy {
	t.Helper()
	Docker(t)
	engine := "/var/run/docker.sock"
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		engine = h
	}
	// A short directory: a unix socket's path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "dproxy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &DockerProxy{Socket: sock, Host: "unix://" + sock, engine: engine, closed: make(chan struct{}), execs: map[string]*ProxyRule{}}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", engine)
		},
		DisableCompression: true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "docker"
			pr.Out.Host = pr.In.Host
		},
		Transport:      answeredTransport{tr},
		FlushInterval:  -1, // streams (logs, build output) as they come
		ModifyResponse: p.learnExec,
		ErrorLog:       nil,
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: time.Minute}
	go func() { _ = p.srv.Serve(l) }()
	t.Cleanup(p.Close)
	return p
}

// Close stops the proxy: every held request ends unanswered and every
// connection is closed. It is idempotent.
func (p *DockerProxy) Close() {
	select {
	case <-p.closed:
		return
	default:
	}
	close(p.closed)
	_ = p.srv.Close()
}

// Client returns an engine client that talks through the proxy, closed
// when the test ends.
func (p *DockerProxy) Client(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(p.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func (p *DockerProxy) add(r *ProxyRule) *ProxyRule {
	r.release, r.hit = make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// Stall holds every request of route until the proxy closes: the engine
// never sees it and the client never gets an answer (an engine hung on
// that call).
func (p *DockerProxy) Stall(route string) *ProxyRule {
	m, pat := splitRoute(route)
	return p.add(&ProxyRule{method: m, pattern: pat, stall: true})
}

// Delay holds every request of route for d, then forwards it to the
// engine even when its client has gone meanwhile: an engine slow to
// answer, which still does what a cancelled request asked for (a
// container create lands after its client gave up).
func (p *DockerProxy) Delay(route string, d time.Duration) *ProxyRule {
	m, pat := splitRoute(route)
	return p.add(&ProxyRule{method: m, pattern: pat, delay: d})
}

// Hold holds every request of route until Release, then forwards it as
// Delay does.
func (p *DockerProxy) Hold(route string) *ProxyRule {
	m, pat := splitRoute(route)
	return p.add(&ProxyRule{method: m, pattern: pat, delay: -1})
}

// Fail answers the first n requests of route with the engine's error,
// status and message as the engine writes them ({"message": ...}),
// without forwarding them, and forwards every later one at once: an
// engine that refuses a call a few times, as it does when the runtime
// cannot freeze a busy container. Hits counts every request of route.
func (p *DockerProxy) Fail(route string, status int, message string, n int) *ProxyRule {
	m, pat := splitRoute(route)
	return p.add(&ProxyRule{method: m, pattern: pat, fail: int64(n), status: status, message: message})
}

// StallExecStart stalls the start (POST /exec/{id}/start) of every exec
// whose command line, as its create request sends it, contains s: the
// exec is created, and the engine never hears of its start.
func (p *DockerProxy) StallExecStart(s string) *ProxyRule {
	return p.add(&ProxyRule{method: http.MethodPost, pattern: "/exec/*/start", stall: true, cmd: s})
}

func splitRoute(route string) (method, pattern string) {
	m, pat, ok := strings.Cut(route, " ")
	if !ok {
		panic("DockerProxy: a route is METHOD /path, not " + route)
	}
	return m, pat
}

var apiVersion = regexp.MustCompile(`^/v[0-9]+(\.[0-9]+)?/`)

// route returns the request's path without the API version prefix.
func route(r *http.Request) string {
	return "/" + strings.TrimPrefix(apiVersion.ReplaceAllString(r.URL.Path, "/"), "/")
}

type ctxKey int

const (
	ruleKey ctxKey = iota
	execCmdKey
)

// ServeHTTP forwards r, or holds it as its rule says.
func (p *DockerProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := route(r)
	// An exec create whose command a StallExecStart rule names: its id
	// is learnt from the answer (learnExec).
	if r.Method == http.MethodPost && matchPath("/containers/*/exec", rt) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var ec struct{ Cmd []string }
		_ = json.Unmarshal(body, &ec)
		line := strings.Join(ec.Cmd, " ")
		p.mu.Lock()
		for _, rule := range p.rules {
			if rule.cmd != "" && strings.Contains(line, rule.cmd) {
				r = r.WithContext(context.WithValue(r.Context(), execCmdKey, rule))
				break
			}
		}
		p.mu.Unlock()
	}
	rule := p.match(r.Method, rt)
	if rule == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	if !rule.stall && r.Body != nil {
		// The whole body is read before the rule is hit: a client that
		// gives up once it sees the hit may close its connection before
		// the body it sent is read, and the engine must still get it.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	hit := rule.hits.Add(1)
	rule.hitOnce.Do(func() { close(rule.hit) })
	if rule.fail > 0 {
		if hit <= rule.fail {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rule.status)
			_ = json.NewEncoder(w).Encode(map[string]string{"message": rule.message})
			return
		}
		p.rp.ServeHTTP(w, r)
		return
	}
	if rule.stall {
		select {
		case <-p.closed:
		case <-r.Context().Done():
		}
		return
	}
	var wait <-chan time.Time
	if rule.delay >= 0 {
		t := time.NewTimer(rule.delay)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-p.closed:
		return
	case <-rule.release:
	case <-wait:
	}
	// The engine does what it was asked whether or not the client is
	// still there: forwarded without the client's cancellation.
	r = r.WithContext(context.WithValue(context.WithoutCancel(r.Context()), ruleKey, rule))
	p.rp.ServeHTTP(noCloseNotify{w}, r)
}

// match returns the first rule for method and rt (a StallExecStart rule
// only for the execs it learnt).
func (p *DockerProxy) match(method, rt string) *ProxyRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rule := range p.rules {
		if rule.method != method || !matchPath(rule.pattern, rt) {
			continue
		}
		if rule.cmd != "" {
			id := strings.TrimSuffix(strings.TrimPrefix(rt, "/exec/"), "/start")
			if p.execs[id] != rule {
				continue
			}
		}
		return rule
	}
	return nil
}

func matchPath(pattern, p string) bool {
	ok, _ := path.Match(pattern, p)
	return ok
}

// learnExec records the id of an exec whose create a StallExecStart rule
// named.
func (p *DockerProxy) learnExec(resp *http.Response) error {
	rule, _ := resp.Request.Context().Value(execCmdKey).(*ProxyRule)
	if rule == nil || resp.StatusCode/100 != 2 {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var created struct{ ID string }
	if json.Unmarshal(body, &created) == nil && created.ID != "" {
		p.mu.Lock()
		p.execs[created.ID] = rule
		p.mu.Unlock()
	}
	return nil
}

// answeredTransport counts the engine's answers to held requests.
type answeredTransport struct{ base http.RoundTripper }

func (a answeredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.base.RoundTrip(req)
	if rule, ok := req.Context().Value(ruleKey).(*ProxyRule); ok {
		if resp != nil && resp.Body != nil {
			// Answered once the engine's whole answer is read (the
			// container made), whether or not the client takes it.
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			if err == nil {
				err = rerr
			}
		}
		rule.answered.Add(1)
	}
	return resp, err
}

// noCloseNotify hides the server's CloseNotifier from the reverse proxy,
// which would otherwise cancel a held request whose client went away.
type noCloseNotify struct{ http.ResponseWriter }

func (w noCloseNotify) Unwrap() http.ResponseWriter { return w.ResponseWriter }

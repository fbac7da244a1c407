package isoprobe

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/egress"
)

// proxyVars are the proxy variables an HTTP client honours, both cases.
var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

// network tries the targets directly (a TCP connect to Targets.TCP, an
// HTTP GET of Targets.URL with no proxy) and through every distinct
// http:// proxy of the environment (CONNECT to Targets.TCP, a GET of
// Targets.URL). Open when a direct connect or GET gets an answer, or a
// proxy answers 2xx to the CONNECT or 2xx/3xx to the GET (a proxy's
// refusal is a 4xx or 5xx) for a target that is not on allow, the task's
// egress allowlist: a proxy that lets an allowlisted target through
// enforces the policy as declared, and the class stays closed with that
// in the evidence (a direct answer is open whatever the list says: it
// went around the proxy). Untested without targets; an allowlist that
// does not parse leaves every proxied answer open.
func network(ctx context.Context, t Targets, env map[string]string, allow []string, timeout time.Duration) Finding {
	f := Finding{Status: Closed}
	policy, perr := egress.ParsePolicy(allow)
	if perr != nil {
		f.add("egress allowlist: %v", perr)
		policy = nil
	}
	listed := func(hostport string) bool {
		h, p, err := net.SplitHostPort(hostport)
		if err != nil {
			return false
		}
		port, err := strconv.Atoi(p)
		return err == nil && policy.Allowed(h, port)
	}
	urlHostPort := func(u string) string {
		pu, err := url.Parse(u)
		if err != nil {
			return ""
		}
		if pu.Port() != "" {
			return pu.Host
		}
		port := "80"
		if pu.Scheme == "https" {
			port = "443"
		}
		return net.JoinHostPort(pu.Hostname(), port)
	}
	if t.URL == "" && t.TCP == "" {
		return Finding{Status: Untested, Evidence: []string{"no network target"}}
	}
	if t.TCP != "" {
		d := net.Dialer{Timeout: timeout}
		if c, err := d.DialContext(ctx, "tcp", t.TCP); err == nil {
			c.Close()
			f.Status = Open
			f.add("direct connect to %s succeeded", t.TCP)
		} else {
			f.add("direct connect to %s: %v", t.TCP, shortErr(err))
		}
	}
	if t.URL != "" {
		if code, err := get(ctx, t.URL, nil, timeout); err == nil {
			f.Status = Open
			f.add("direct GET %s answered %d", t.URL, code)
		} else {
			f.add("direct GET %s: %v", t.URL, shortErr(err))
		}
	}
	proxies := map[string]bool{}
	for _, k := range proxyVars {
		if v := env[k]; v != "" {
			proxies[v] = true
		}
	}
	for _, p := range sorted(proxies) {
		pu, err := url.Parse(p)
		if err != nil || pu.Scheme != "http" || pu.Host == "" {
			f.add("proxy %s not tried (only http:// proxies are)", redact(p))
			continue
		}
		if t.TCP != "" {
			if code, err := connectVia(ctx, pu, t.TCP, timeout); err != nil {
				f.add("CONNECT %s via %s: %v", t.TCP, redact(p), shortErr(err))
			} else if code/100 == 2 && listed(t.TCP) {
				f.add("CONNECT %s via %s answered %d: on the egress allowlist (the policy as declared)", t.TCP, redact(p), code)
			} else if code/100 == 2 {
				f.Status = Open
				f.add("CONNECT %s via %s answered %d", t.TCP, redact(p), code)
			} else {
				f.add("CONNECT %s via %s refused: %d", t.TCP, redact(p), code)
			}
		}
		if t.URL != "" {
			if code, err := get(ctx, t.URL, pu, timeout); err != nil {
				f.add("GET %s via %s: %v", t.URL, redact(p), shortErr(err))
			} else if code < 400 && listed(urlHostPort(t.URL)) {
				f.add("GET %s via %s answered %d: on the egress allowlist (the policy as declared)", t.URL, redact(p), code)
			} else if code < 400 {
				f.Status = Open
				f.add("GET %s via %s answered %d", t.URL, redact(p), code)
			} else {
				f.add("GET %s via %s refused: %d", t.URL, redact(p), code)
			}
		}
	}
	return f
}

// get issues one GET of u (through proxy when non-nil) and returns the
// status code.
func get(ctx context.Context, u string, proxy *url.URL, timeout time.Duration) (int, error) {
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// connectVia sends CONNECT target to the proxy and returns its status.
func connectVia(ctx context.Context, proxy *url.URL, target string, timeout time.Duration) (int, error) {
	host := proxy.Host
	if proxy.Port() == "" {
		host = net.JoinHostPort(proxy.Hostname(), "80")
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// dns looks Targets.DNS up with the sandbox's resolver (Go's, reading
// /etc/resolv.conf and /etc/hosts): open when it answers with an address.
func dns(ctx context.Context, name string, timeout time.Duration) Finding {
	if name == "" {
		return Finding{Status: Untested, Evidence: []string{"no dns target"}}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := &net.Resolver{PreferGo: true}
	addrs, err := r.LookupHost(ctx, name)
	if err == nil && len(addrs) > 0 {
		sort.Strings(addrs)
		return Finding{Status: Open, Evidence: []string{fmt.Sprintf("%s resolved to %s", name, strings.Join(addrs, " "))}}
	}
	return Finding{Status: Closed, Evidence: []string{fmt.Sprintf("%s: %v", name, shortErr(err))}}
}

// dockerSockets are where an engine's API socket is usually found.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock", "/var/run/podman/podman.sock"}

// dockerAPI looks for a container engine's API: the usual sockets,
// /run/user/*/docker.sock, DOCKER_HOST (unix:// or tcp://), and TCP
// 2375/2376 on the default gateway (the host side of the sandbox's
// network). Open when one of the sockets is in the sandbox at all, or an
// endpoint accepts a connection.
func dockerAPI(ctx context.Context, cfg Config, env map[string]string, timeout time.Duration) Finding {
	f := Finding{Status: Closed}
	socks := append([]string(nil), dockerSockets...)
	if m, _ := filepath.Glob(cfg.host("/run/user/*/docker.sock")); len(m) > 0 {
		for _, p := range m {
			socks = append(socks, "/"+strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(p, filepath.Clean(cfg.Root))), "/"))
		}
	}
	var tcps []string
	if h := env["DOCKER_HOST"]; h != "" {
		if p, ok := strings.CutPrefix(h, "unix://"); ok {
			socks = append(socks, p)
		} else if u, err := url.Parse(h); err == nil && u.Host != "" {
			tcps = append(tcps, u.Host)
		}
	}
	if gw := defaultGateway(cfg); gw != "" {
		tcps = append(tcps, net.JoinHostPort(gw, "2375"), net.JoinHostPort(gw, "2376"))
	}
	d := net.Dialer{Timeout: timeout}
	for _, s := range socks {
		fi, err := os.Stat(cfg.host(s))
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		// A socket in the sandbox is open even when its mode refuses the
		// agent: only a file mode (or a group the image grants) stands
		// between the agent and root on the host.
		f.Status = Open
		c, err := d.DialContext(ctx, "unix", cfg.host(s))
		if err != nil {
			f.add("%s is in the sandbox (connect: %v)", s, shortErr(err))
			continue
		}
		c.Close()
		f.add("%s accepts connections", s)
	}
	for _, a := range tcps {
		c, err := d.DialContext(ctx, "tcp", a)
		if err != nil {
			f.add("tcp %s: %v", a, shortErr(err))
			continue
		}
		c.Close()
		f.Status = Open
		f.add("tcp %s accepts connections", a)
	}
	return f
}

// defaultGateway reads the default route's gateway from /proc/net/route.
func defaultGateway(cfg Config) string {
	b, err := os.ReadFile(cfg.host("/proc/net/route"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		fs := strings.Fields(l)
		if len(fs) < 3 || fs[1] != "00000000" {
			continue
		}
		raw, err := hex.DecodeString(fs[2])
		if err != nil || len(raw) != 4 {
			continue
		}
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, binary.LittleEndian.Uint32(raw))
		if !ip.IsUnspecified() {
			return ip.String()
		}
	}
	return ""
}

// alwaysAllowed are the variables the engine and a process set themselves.
var alwaysAllowed = []string{"PATH", "HOSTNAME", "HOME", "TERM", "PWD", "OLDPWD", "SHLVL", "_"}

// envClass names the variables of env that are not allowed: open when
// there is one; untested when the host could not say what is allowed.
func envClass(allowed []string, env map[string]string) (Finding, []string) {
	if allowed == nil {
		return Finding{Status: Untested, Evidence: []string{"the allowed variables are unknown"}}, nil
	}
	ok := map[string]bool{}
	for _, k := range append(allowed, alwaysAllowed...) {
		ok[k] = true
	}
	leaked := map[string]bool{}
	for k := range env {
		if !ok[k] {
			leaked[k] = true
		}
	}
	names := sorted(leaked)
	if len(names) == 0 {
		return Finding{Status: Closed}, nil
	}
	f := Finding{Status: Open}
	f.add("%d variables beyond the allowlist: %s", len(names), strings.Join(names, " "))
	return f, names
}

// redact drops the userinfo of a proxy URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User("redacted")
	return u.String()
}

// shortErr is err's text, bounded.
func shortErr(err error) string {
	if err == nil {
		return "no answer"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

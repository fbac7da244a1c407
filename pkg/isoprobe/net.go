package isoprobe

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
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
	"sync"
	"syscall"
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
// 2375/2376 on every gateway (the host side of the sandbox's networks,
// see gateways). Open when one of the sockets is in the sandbox at all, or an
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
	for _, gw := range gateways(cfg) {
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

// gateways returns the IPv4 gateways of the sandbox's networks, read from
// /proc/net/route: the default route's gateway, and for each network the
// sandbox is directly on (a route without a gateway, on an interface
// other than lo) the network's first address, where Docker puts the
// host's side of a bridge network. An --internal network has no default
// route on some engines; its gateway still answers for the host. Each
// address is listed once, in route order.
func gateways(cfg Config) []string {
	b, err := os.ReadFile(cfg.host("/proc/net/route"))
	if err != nil {
		return nil
	}
	hexIP := func(s string) (uint32, bool) {
		raw, err := hex.DecodeString(s)
		if err != nil || len(raw) != 4 {
			return 0, false
		}
		return binary.LittleEndian.Uint32(raw), true
	}
	var out []string
	seen := map[string]bool{}
	add := func(v uint32) {
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, v)
		if s := ip.String(); !ip.IsUnspecified() && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		fs := strings.Fields(l)
		if len(fs) < 8 || fs[0] == "lo" {
			continue
		}
		dst, ok1 := hexIP(fs[1])
		gw, ok2 := hexIP(fs[2])
		mask, ok3 := hexIP(fs[7])
		switch {
		case !ok1 || !ok2 || !ok3:
		case dst == 0 && gw != 0: // the default route
			add(gw)
		case gw == 0 && dst != 0 && bits32(mask) <= 30: // a network the sandbox is on
			add(dst&mask + 1)
		}
	}
	return out
}

// bits32 counts the set bits of a netmask.
func bits32(m uint32) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// gatewayCheck connects to every port of ports on every gateway of the
// sandbox's networks (gateways), all at once, each attempt bounded by
// timeout. Open when one accepts: a service of the host that the sandbox
// reaches, which no egress policy covers (`proctor firewall apply` drops
// the sandbox's traffic to the host). The evidence names what accepted
// and, per gateway, how the other ports answered (refused: the host
// answers there; no answer: dropped on the way). It returns the addresses
// that accepted.
func gatewayCheck(ctx context.Context, cfg Config, ports []int, timeout time.Duration) (Finding, []string) {
	f := Finding{Status: Closed}
	gws := gateways(cfg)
	if len(gws) == 0 {
		f.add("gateway: none (no route but loopback)")
		return f, nil
	}
	if len(ports) == 0 {
		f.add("gateway %s: no port to try", strings.Join(gws, " "))
		return f, nil
	}
	type try struct {
		addr string
		err  error
	}
	tries := make([]try, 0, len(gws)*len(ports))
	for _, gw := range gws {
		for _, p := range ports {
			tries = append(tries, try{addr: net.JoinHostPort(gw, strconv.Itoa(p))})
		}
	}
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(ctx, "tcp", tries[i].addr)
			if err == nil {
				c.Close()
			}
			tries[i].err = err
		})
	}
	wg.Wait()
	var reached []string
	for _, gw := range gws {
		refused, silent := 0, 0
		for _, tr := range tries {
			if h, _, _ := net.SplitHostPort(tr.addr); h != gw {
				continue
			}
			switch {
			case tr.err == nil:
				reached = append(reached, tr.addr)
				f.Status = Open
				f.add("gateway %s accepts connections: a service of the host that the sandbox reaches (proctor firewall apply drops the sandbox's traffic to the host)", tr.addr)
			case errors.Is(tr.err, syscall.ECONNREFUSED):
				refused++
			default:
				silent++
			}
		}
		f.add("gateway %s: %d of %d ports refused (the host answers), %d no answer", gw, refused, len(ports), silent)
	}
	return f, reached
}

// ipv6Check looks for IPv6 on the sandbox's interfaces (/proc/net/if_inet6):
// open when an interface other than lo has an address (link-local
// included: it reaches the host's side of the bridge, which no IPv4 rule
// covers), naming each; closed when none has, or the kernel has no IPv6.
// proctor disables IPv6 in every sandbox; an engine that enables it on a
// network (ipv6: true, a network's enable_ipv6) shows here.
func ipv6Check(cfg Config) Finding {
	b, err := os.ReadFile(cfg.host("/proc/net/if_inet6"))
	if errors.Is(err, os.ErrNotExist) {
		return Finding{Status: Closed, Evidence: []string{"ipv6: not in this kernel"}}
	}
	if err != nil {
		return Finding{Status: Untested, Evidence: []string{"ipv6: " + shortErr(err)}}
	}
	f := Finding{Status: Closed}
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 6 || fs[5] == "lo" {
			continue
		}
		raw, err := hex.DecodeString(fs[0])
		if err != nil || len(raw) != 16 {
			continue
		}
		f.Status = Open
		f.add("ipv6: address %s on %s (IPv6 is on: a way out no IPv4 rule covers)", net.IP(raw), fs[5])
	}
	if f.Status == Closed {
		f.add("ipv6: no address but loopback's")
	}
	return f
}

// joinFindings is one class's finding from several checks: open when one
// is open, else untested when one is, else closed; the evidence of each
// in order.
func joinFindings(fs ...Finding) Finding {
	out := Finding{Status: Closed}
	for _, f := range fs {
		switch {
		case f.Status == Open:
			out.Status = Open
		case f.Status == Untested && out.Status != Open:
			out.Status = Untested
		}
		for _, e := range f.Evidence {
			out.add("%s", e)
		}
	}
	return out
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

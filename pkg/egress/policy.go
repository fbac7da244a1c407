// Package egress is the egress allowlist of DESIGN §6: entries (host,
// host:port, IP literal, "private:" prefix; bare host = port 443, no
// wildcards), their parsing and normalisation, and the policy lookups the
// proxy-logger (services/proxylogger), the isolation probe and the arms
// that add a provider's host share.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// PrivatePrefix marks an allowlist entry whose name may resolve to a private
// address (RFC 1918, RFC 4193 unique-local, RFC 6598 shared space), such as
// a model gateway on a private network: "private:litellm.internal:4000".
// Without it an allowed name that resolves to a private address is denied
// (DNS rebinding). An IP literal entry needs no prefix: it is allowed as
// listed. A host literally named "private" is written "private.:PORT" (the
// root dot is normalised away).
const PrivatePrefix = "private:"

// Entry is one allowlist entry.
type Entry struct {
	// Host is the lower-case host name without a trailing dot, or the
	// canonical text of an IP literal (IPv6 without brackets).
	Host string
	// Port is 1..65535; a bare host means 443.
	Port int
	// Private is true when the entry carried PrivatePrefix.
	Private bool
	// IP is the address of an IP-literal entry, the zero Addr for a name.
	IP netip.Addr
}

// String returns the entry in the allowlist syntax: "[private:]host:port".
func (e Entry) String() string {
	s := net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
	if e.Private {
		s = PrivatePrefix + s
	}
	return s
}

type hostPort struct {
	host string
	port int
}

// Policy is a parsed egress allowlist. Its zero value and a nil *Policy allow
// nothing. A Policy is immutable and safe for concurrent use.
type Policy struct {
	entries map[hostPort]Entry
}

// ParsePolicy parses allowlist entries (task `environment.egress`,
// `sandbox.egress`, or the --allow flag split on commas). Each entry is
// "host", "host:port", an IP literal ("10.0.0.5", "[fd00::1]:8443"), any
// of them optionally prefixed with PrivatePrefix. A bare host means port
// 443. Names are case-insensitive and one trailing root dot is dropped;
// wildcards, leading dots, empty labels, IPv6 zones, all-numeric names that
// are not IP literals, and ports outside 1..65535 are errors naming the
// entry. Repeated entries merge (Private if any says so). An empty list is a
// Policy that allows nothing.
func ParsePolicy(entries []string) (*Policy, error) {
	p := &Policy{entries: map[hostPort]Entry{}}
	for _, raw := range entries {
		e, err := ParseEntry(raw)
		if err != nil {
			return nil, err
		}
		k := hostPort{e.Host, e.Port}
		if old, ok := p.entries[k]; ok {
			e.Private = e.Private || old.Private
		}
		p.entries[k] = e
	}
	return p, nil
}

// ParseEntry parses one allowlist entry (see ParsePolicy). The error names
// the entry as given.
func ParseEntry(raw string) (Entry, error) {
	bad := func(why string) (Entry, error) {
		name := raw
		if i := strings.LastIndexByte(name, '@'); i >= 0 {
			name = Redacted + name[i:] // never echo credentials
		}
		return Entry{}, fmt.Errorf("allowlist entry %q: %s", name, why)
	}
	s := strings.TrimSpace(raw)
	var e Entry
	if len(s) >= len(PrivatePrefix) && strings.EqualFold(s[:len(PrivatePrefix)], PrivatePrefix) {
		e.Private = true
		s = s[len(PrivatePrefix):]
	}
	if s == "" {
		return bad("empty entry")
	}
	if strings.Contains(s, "/") || strings.Contains(s, "@") {
		return bad("want host or host:port, not a URL")
	}
	host, port := s, 443
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		host = a.String() // a bare IPv4 or IPv6 literal
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	} else if strings.Contains(s, ":") {
		h, ps, err := net.SplitHostPort(s)
		if err != nil {
			return bad("want host or host:port (an IPv6 literal in brackets)")
		}
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 || ps != strconv.Itoa(n) {
			return bad(fmt.Sprintf("port %q is not a number in 1..65535", ps))
		}
		host, port = h, n
	}
	h, ip, err := NormalizeHost(host)
	if err != nil {
		return bad(err.Error())
	}
	e.Host, e.Port, e.IP = h, port, ip
	return e, nil
}

// NormalizeHost returns the canonical form of a request or entry host: an IP
// literal's canonical text (IPv4-mapped IPv6 unmapped) with its Addr, or a
// lower-case name without its trailing root dot. It rejects what ParsePolicy
// rejects.
func NormalizeHost(h string) (string, netip.Addr, error) {
	if h == "" {
		return "", netip.Addr{}, fmt.Errorf("empty host")
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("IPv6 zone %q not allowed", a.Zone())
		}
		a = a.Unmap()
		return a.String(), a, nil
	}
	if strings.Contains(h, "*") {
		return "", netip.Addr{}, fmt.Errorf("wildcards are not allowed; list each host")
	}
	if strings.HasPrefix(h, ".") {
		return "", netip.Addr{}, fmt.Errorf("leading dot not allowed")
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	if name == "" || strings.HasSuffix(name, ".") {
		return "", netip.Addr{}, fmt.Errorf("trailing dots not allowed (one root dot is)")
	}
	if len(name) > 253 {
		return "", netip.Addr{}, fmt.Errorf("name longer than 253 bytes")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return "", netip.Addr{}, fmt.Errorf("empty label")
		}
		if len(l) > 63 {
			return "", netip.Addr{}, fmt.Errorf("label %q longer than 63 bytes", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", netip.Addr{}, fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", netip.Addr{}, fmt.Errorf("character %q not allowed in a host name", c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		// "1.2.3" or "2130706433": some resolvers read these as IPv4.
		return "", netip.Addr{}, fmt.Errorf("all-numeric name that is not an IP literal")
	}
	return name, netip.Addr{}, nil
}

// Lookup returns the entry that allows host:port, if any. host may carry a
// trailing root dot, any case, or an IPv6 literal with or without brackets.
func (p *Policy) Lookup(host string, port int) (Entry, bool) {
	if p == nil {
		return Entry{}, false
	}
	h, _, err := NormalizeHost(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil {
		return Entry{}, false
	}
	e, ok := p.entries[hostPort{h, port}]
	return e, ok
}

// Allowed reports whether host:port is on the allowlist (see Lookup).
func (p *Policy) Allowed(host string, port int) bool {
	_, ok := p.Lookup(host, port)
	return ok
}

// Entries returns the entries sorted by host then port.
func (p *Policy) Entries() []Entry {
	if p == nil {
		return nil
	}
	out := make([]Entry, 0, len(p.entries))
	for _, e := range p.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Host != out[j].Host {
			return out[i].Host < out[j].Host
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// Redacted stands in for credentials (the userinfo of a URL) in every log,
// event and error.
const Redacted = "REDACTED"

package task

import (
	"fmt"
	"strings"

	"github.com/proctor-eval/proctor/pkg/egress"
)

// netSpec is one table's network keys before resolution.
type netSpec struct {
	table            string
	key              string // first network key seen, for errors
	mode             string
	hosts            []string
	hostsSet         bool
	egressSet        bool
	allowInternetSet bool
	allowInternet    bool
	// invalid are the entries of hosts the egress proxy cannot hold (a
	// URL, a path, a wildcard), each with why: the task still loads, and
	// the cells that would apply the list are errored (Task.EgressInvalid).
	invalid []string
}

func (r *configReader) readNet(n *netSpec, sk string, v any, p string) error {
	if n.key == "" || sk == "network_mode" {
		n.key = p
	}
	if n.table == "" {
		n.table = strings.TrimSuffix(p, "."+sk)
	}
	switch sk {
	case "network_mode":
		s, err := r.str(v, p)
		if err != nil {
			return err
		}
		switch s {
		case NetworkPublic, NetworkNone, NetworkAllowlist:
			n.mode = s
		case "":
		default:
			return r.errf(p, "network_mode %q is not one of public, no-network, allowlist", s)
		}
	case "allowed_hosts", "egress":
		if (sk == "egress" && n.hostsSet) || (sk == "allowed_hosts" && n.egressSet) {
			return r.errf(p, "both egress and allowed_hosts are declared; keep one")
		}
		l, err := r.strList(v, p)
		if err != nil {
			return err
		}
		hosts, invalid := normalizeHosts(l)
		n.hosts = hosts
		for _, why := range invalid {
			n.invalid = append(n.invalid, p+": "+why)
		}
		if sk == "egress" {
			n.egressSet = true
		} else {
			n.hostsSet = true
		}
	}
	return nil
}

// resolve turns a table's network keys into a policy, as Harbor does:
// network_mode wins; allowed_hosts without a mode means allowlist;
// allowed_hosts with another mode is an error; the deprecated
// allow_internet = false means no-network; a table with no network key
// inherits base.
//
// One addition to Harbor's rules, the seed's (and BenchFlow's
// uxlfoundation tasks'): network_mode = "public" with an egress list is a
// public policy that keeps the list (AllowedHosts). The open network then
// applies where Harbor gives it (the oracle, the verifier); an agent arm,
// which never gets the open network, solves behind the egress proxy with
// the list.
func (n netSpec) resolve(base NetworkPolicy) (NetworkPolicy, error) {
	hasHosts := n.hostsSet || n.egressSet
	switch {
	case n.mode != "":
		if hasHosts && len(n.hosts) > 0 && n.mode != NetworkAllowlist && !(n.mode == NetworkPublic && n.egressSet) {
			return NetworkPolicy{}, fmt.Errorf("allowed hosts are only valid with network_mode = %q, not %q", NetworkAllowlist, n.mode)
		}
		p := NetworkPolicy{Mode: n.mode}
		if n.mode == NetworkAllowlist || n.mode == NetworkPublic {
			p.AllowedHosts = n.hosts
		}
		return p, nil
	case hasHosts:
		return NetworkPolicy{Mode: NetworkAllowlist, AllowedHosts: n.hosts}, nil
	case n.allowInternetSet && !n.allowInternet:
		return NetworkPolicy{Mode: NetworkNone}, nil
	}
	return base, nil
}

// normalizeHosts lower-cases, trims and de-duplicates allowlist entries
// (host or host:port, bare host = :443, as the egress proxy reads them:
// egress.ParseEntry). An entry the proxy cannot hold (a URL, a path, a
// wildcard) is left out and returned in invalid with the reason; blanks
// are dropped.
func normalizeHosts(in []string) (hosts, invalid []string) {
	seen := map[string]bool{}
	for _, h := range in {
		v := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if v == "" {
			continue
		}
		if strings.Contains(v, "://") || strings.ContainsAny(v, "/ \t*") {
			invalid = append(invalid, fmt.Sprintf("entry %q must be a host or host:port, not a URL, path or wildcard", redactEntry(h)))
			continue
		}
		if _, err := egress.ParseEntry(v); err != nil {
			invalid = append(invalid, err.Error())
			continue
		}
		if !seen[v] {
			seen[v] = true
			hosts = append(hosts, v)
		}
	}
	return hosts, invalid
}

// redactEntry drops the credentials of an entry written as a URL with a
// user ("https://user:pw@host/x" -> "https://REDACTED@host/x").
func redactEntry(s string) string {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		pre := ""
		if j := strings.Index(s, "://"); j >= 0 && j < i {
			pre = s[:j+3]
		}
		return pre + egress.Redacted + s[i:]
	}
	return s
}

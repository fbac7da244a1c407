package task

import (
	"fmt"
	"strings"
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
		hosts, err := normalizeHosts(l)
		if err != nil {
			return r.errf(p, "%v", err)
		}
		n.hosts = hosts
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
func (n netSpec) resolve(base NetworkPolicy) (NetworkPolicy, error) {
	hasHosts := n.hostsSet || n.egressSet
	switch {
	case n.mode != "":
		if hasHosts && len(n.hosts) > 0 && n.mode != NetworkAllowlist {
			return NetworkPolicy{}, fmt.Errorf("allowed hosts are only valid with network_mode = %q, not %q", NetworkAllowlist, n.mode)
		}
		p := NetworkPolicy{Mode: n.mode}
		if n.mode == NetworkAllowlist {
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
// (host or host:port, bare host = :443); URLs, paths and blanks inside an
// entry are errors.
func normalizeHosts(in []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, h := range in {
		v := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if v == "" {
			continue
		}
		if strings.Contains(v, "://") || strings.ContainsAny(v, "/ \t*") {
			return nil, fmt.Errorf("allowed host %q must be a host or host:port, not a URL, path or wildcard", h)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

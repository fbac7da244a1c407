// Package proxylogger is the proxy-logger of DESIGN §6: an allowlisting HTTP
// proxy that allows `CONNECT host:port` and plain-HTTP requests only to the
// entries of an egress allowlist (pkg/egress), refuses requests whose
// target and Host disagree, refuses upstreams that resolve to loopback,
// link-local or (unless the entry says so) private addresses, and reports
// every decision to a sink (an egress.jsonl writer, an EgressDecision event
// builder). `proctor proxy` runs it, as the cell's sidecar.
package proxylogger

import "github.com/proctor-eval/proctor/pkg/egress"

// Policy and Entry are the allowlist of pkg/egress.
type (
	Policy = egress.Policy
	Entry  = egress.Entry
)

// ParsePolicy is egress.ParsePolicy.
func ParsePolicy(entries []string) (*Policy, error) { return egress.ParsePolicy(entries) }

// ParseEntry is egress.ParseEntry.
func ParseEntry(raw string) (Entry, error) { return egress.ParseEntry(raw) }

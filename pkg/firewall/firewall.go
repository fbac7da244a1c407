// Package firewall installs the host firewall rules that keep sandboxes on
// proctor's internal networks away from the host (docs/decisions/2026-12-01-internal-network-pool.md):
// an --internal Docker network has no route out, but the host itself still
// answers on the network's gateway, docker0 and its own addresses, so any
// service listening on all interfaces (a NATS server, a database) is
// reachable from an agent. Two iptables rules close that, for the whole
// address pool proctor allocates its internal networks from
// (docker.InternalPool, package sandbox/docker):
//
//	-A INPUT       -s POOL            -j DROP   (packets to the host itself)
//	-A DOCKER-USER -s POOL ! -d POOL  -j DROP   (packets the host would forward)
//
// Both are inserted first in their chain and tagged with the comment
// "proctor-sandbox", which Remove and Show go by. The rules are opt-in
// (`proctor firewall apply`), need root, and do not survive a reboot or a
// flush of the tables; Docker keeps the DOCKER-USER chain as it finds it.
package firewall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Comment tags every rule this package installs.
const Comment = "proctor-sandbox"

// DockerUserChain is the chain Docker jumps to from FORWARD before its own
// rules, kept for the user's rules (Docker's documentation, "Docker and
// iptables").
const DockerUserChain = "DOCKER-USER"

// Firewall edits the iptables rules of one network namespace.
type Firewall struct {
	// IPTables is the argv prefix that runs iptables, e.g. {"iptables"}
	// (the default) or {"ip", "netns", "exec", "ns1", "iptables"}.
	IPTables []string
	// Pool is the source prefix to drop, e.g. "10.213.0.0/16".
	Pool netip.Prefix
}

// Rule is one rule: its chain and its match and target (without -A/-I).
type Rule struct {
	Chain string
	Spec  []string
}

// String is the rule as `iptables -S` prints it.
func (r Rule) String() string { return "-A " + r.Chain + " " + strings.Join(r.Spec, " ") }

// Rules returns the rules for f.Pool.
func (f Firewall) Rules() []Rule {
	p := f.Pool.String()
	tag := []string{"-m", "comment", "--comment", Comment, "-j", "DROP"}
	return []Rule{
		{Chain: "INPUT", Spec: append([]string{"-s", p}, tag...)},
		{Chain: DockerUserChain, Spec: append([]string{"-s", p, "!", "-d", p}, tag...)},
	}
}

// Apply inserts every rule that is not there yet at the top of its chain
// and returns the rules it inserted. A missing DOCKER-USER chain (Docker
// not running, or its iptables integration off) is an error naming it:
// without it the forwarding rule would never be consulted.
func (f Firewall) Apply(ctx context.Context) ([]Rule, error) {
	if _, err := f.run(ctx, "-S", DockerUserChain); err != nil {
		return nil, fmt.Errorf("firewall: no %s chain (is Docker running with its iptables integration?): %w", DockerUserChain, err)
	}
	var added []Rule
	for _, r := range f.Rules() {
		if f.has(ctx, r) {
			continue
		}
		args := append([]string{"-I", r.Chain, "1"}, r.Spec...)
		if _, err := f.run(ctx, args...); err != nil {
			return added, err
		}
		added = append(added, r)
	}
	return added, nil
}

// Remove deletes every rule tagged with Comment in INPUT and DOCKER-USER
// (whatever pool it names, so a changed pool leaves nothing behind) and
// returns the rules it deleted.
func (f Firewall) Remove(ctx context.Context) ([]string, error) {
	rules, err := f.Show(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, r := range rules {
		fields, err := splitRule(r)
		if err != nil {
			return removed, err
		}
		fields[0] = "-D"
		if _, err := f.run(ctx, fields...); err != nil {
			return removed, err
		}
		removed = append(removed, r)
	}
	return removed, nil
}

// Show returns the installed rules tagged with Comment, as `iptables -S`
// prints them, INPUT first. A missing DOCKER-USER chain holds none.
func (f Firewall) Show(ctx context.Context) ([]string, error) {
	var out []string
	for _, chain := range []string{"INPUT", DockerUserChain} {
		text, err := f.run(ctx, "-S", chain)
		if err != nil {
			if chain == DockerUserChain {
				continue
			}
			return nil, err
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "-A ") && strings.Contains(line, Comment) {
				out = append(out, strings.TrimSpace(line))
			}
		}
	}
	return out, nil
}

func (f Firewall) has(ctx context.Context, r Rule) bool {
	_, err := f.run(ctx, append([]string{"-C", r.Chain}, r.Spec...)...)
	return err == nil
}

// run runs iptables with args and returns its stdout; the error carries
// its stderr.
func (f Firewall) run(ctx context.Context, args ...string) (string, error) {
	argv := f.IPTables
	if len(argv) == 0 {
		argv = []string{"iptables"}
	}
	argv = append(append([]string{}, argv...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("firewall: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// splitRule splits an `iptables -S` line into arguments, honouring the
// double quotes iptables puts around a comment with spaces.
func splitRule(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inQuote, started := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote, started = !inQuote, true
		case c == ' ' && !inQuote:
			if started {
				out = append(out, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteByte(c)
			started = true
		}
	}
	if inQuote {
		return nil, errors.New("firewall: unbalanced quote in rule " + line)
	}
	if started {
		out = append(out, cur.String())
	}
	return out, nil
}

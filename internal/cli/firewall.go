package cli

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/firewall"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
)

func newFirewall(g *globals) *cobra.Command {
	var pool, iptables string
	cmd := &cobra.Command{
		Use:   "firewall (apply|remove|show)",
		Short: "Drop traffic from sandbox networks to this host (opt-in iptables rules; needs root)",
		Long: `A sandbox on a per-cell internal network cannot leave the host, but the host
itself answers on the network's gateway and its own addresses, so a service
listening on all interfaces (a NATS server, a database) is reachable from an
agent. apply inserts two rules at the top of their chains, for the address
pool every internal network is allocated from:

  INPUT        -s POOL           -j DROP   packets to this host
  DOCKER-USER  -s POOL ! -d POOL -j DROP   packets this host would forward

remove deletes every rule proctor installed, show lists them. The rules do
not survive a reboot; run apply from the host's start-up (after Docker).
Sandboxes on the open bridge (oracle and verifier phases of public tasks)
are not covered.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"apply", "remove", "show"},
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := netip.ParsePrefix(pool)
			if err != nil || !p.Addr().Is4() {
				return usageError{fmt.Errorf("--pool %q: want an IPv4 prefix such as %s", pool, defaultPool())}
			}
			fw := firewall.Firewall{IPTables: strings.Fields(iptables), Pool: p.Masked()}
			ctx := cmd.Context()
			switch args[0] {
			case "apply":
				added, err := fw.Apply(ctx)
				for _, r := range added {
					fmt.Fprintln(g.stdout, "added", r)
				}
				if err == nil && len(added) == 0 {
					fmt.Fprintln(g.stdout, "already in place")
				}
				return err
			case "remove":
				removed, err := fw.Remove(ctx)
				for _, r := range removed {
					fmt.Fprintln(g.stdout, "removed", r)
				}
				return err
			case "show":
				rules, err := fw.Show(ctx)
				for _, r := range rules {
					fmt.Fprintln(g.stdout, r)
				}
				if err == nil && len(rules) == 0 {
					fmt.Fprintln(g.stderr, "no proctor-sandbox rules installed (proctor firewall apply installs them)")
				}
				return err
			}
			return usageError{fmt.Errorf("unknown action %q (apply, remove, show)", args[0])}
		},
	}
	cmd.Flags().StringVar(&pool, "pool", defaultPool().String(), "address pool of proctor's internal networks")
	cmd.Flags().StringVar(&iptables, "iptables", "iptables", "iptables command (split on spaces), e.g. 'ip netns exec NS iptables'")
	return cmd
}

// firewallHint offers `proctor firewall apply` on stderr when a probe
// cell of the run reached a service of this host on its sandbox
// network's gateway (isolation_probe.json, report.gateway_reached): every
// agent sandbox reaches it, whatever the task's egress policy, until the
// host drops the sandbox networks' traffic to itself.
func (g *globals) firewallHint(rec bus.RunRecord) {
	if rec.Artifact == "" {
		return
	}
	a, err := artifact.Read(rec.Artifact)
	if err != nil {
		return
	}
	var reached []string
	for _, r := range a.Results {
		if r.Metrics.IsolationProbe[isoprobe.Network] != isoprobe.Open || r.OutputDir == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.OutputDir, harness.ProbeReportFile))
		if err != nil {
			continue
		}
		var res harness.ProbeResult
		if json.Unmarshal(b, &res) != nil {
			continue
		}
		for _, addr := range res.Report.GatewayReached {
			if !slices.Contains(reached, addr) {
				reached = append(reached, addr)
			}
		}
	}
	if len(reached) == 0 {
		return
	}
	fmt.Fprintf(g.stderr, "warning: the isolation probe reached services of this host from an agent sandbox, on its network's gateway: %s. "+
		"Every agent sandbox reaches them, whatever the task's egress policy. `sudo proctor firewall apply` drops the traffic of proctor's sandbox networks to this host (`proctor firewall --help`).\n",
		strings.Join(reached, ", "))
}

// probeTargetsHelp is the help of --probe-targets.
var probeTargetsHelp = "the isolation probe's targets: url=URL,tcp=HOST:PORT,dns=NAME,gateway=PORT/PORT... " +
	"(default " + isoprobe.DefaultTargets().String() + ": gateway= names the ports tried on the sandbox network's gateway, the host's side of it); env " + harness.ProbeTargetsEnv

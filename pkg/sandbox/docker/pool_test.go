package docker

import (
	"context"
	"net/netip"
	"testing"

	"github.com/docker/docker/api/types/network"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// TestDockerInternalNetworkInPool: per-cell internal networks get distinct
// /26 subnets of InternalPool, so the host firewall rule for the pool
// covers every one of them.
func TestDockerInternalNetworkInPool(t *testing.T) {
	t.Parallel()
	seen := map[netip.Prefix]bool{}
	for range 3 {
		d, h := startWith(t, sandbox.Limits{}, sandbox.Spec{Network: sandbox.NetworkInternal})
		n, err := d.cli.NetworkInspect(context.Background(), h.State["network"], network.InspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !n.Internal || len(n.IPAM.Config) != 1 {
			t.Fatalf("network internal=%v ipam %+v", n.Internal, n.IPAM.Config)
		}
		p, err := netip.ParsePrefix(n.IPAM.Config[0].Subnet)
		if err != nil || p.Bits() != 26 || !InternalPool.Contains(p.Addr()) || seen[p] {
			t.Fatalf("subnet %v (%v), want a new /26 of %s", p, err, InternalPool)
		}
		seen[p] = true
	}
}

package docker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/docker/docker/api/types/network"
)

// InternalPool is the address pool every per-cell internal network is
// allocated from, so one host firewall rule covers them all (see package
// firewall and `proctor firewall apply`). It lies outside Docker's default
// pools (172.17.0.0/16–172.31.0.0/16, 192.168.0.0/16).
var InternalPool = netip.MustParsePrefix("10.213.0.0/16")

// internalSubnetBits is the size of one internal network: a /26 holds 62
// addresses (a cell's container and, later, its egress proxy), and the
// pool holds 1024 of them.
const internalSubnetBits = 26

// createInternal creates a per-cell --internal bridge network named name
// on a /26 of InternalPool, picked at random; a subnet already used by
// another network is skipped (up to 32 tries).
func (d *Driver) createInternal(ctx context.Context, name string, lbl map[string]string) (string, netip.Prefix, error) {
	n := 1 << (internalSubnetBits - InternalPool.Bits())
	base := InternalPool.Addr().As4()
	first := binary.BigEndian.Uint32(base[:])
	var last error
	for range 32 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		i := binary.BigEndian.Uint32(b[:]) % uint32(n)
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], first+i<<(32-internalSubnetBits))
		subnet := netip.PrefixFrom(netip.AddrFrom4(a), internalSubnetBits).String()
		resp, err := d.cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:   "bridge",
			Internal: true,
			Labels:   lbl,
			IPAM:     &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet}}},
		})
		if err == nil {
			return resp.ID, netip.PrefixFrom(netip.AddrFrom4(a), internalSubnetBits), nil
		}
		if !strings.Contains(err.Error(), "overlap") {
			return "", netip.Prefix{}, fmt.Errorf("sandbox: docker: create network on %s: %w", subnet, err)
		}
		last = err
	}
	return "", netip.Prefix{}, fmt.Errorf("sandbox: docker: no free /%d in %s: %w", internalSubnetBits, InternalPool, last)
}

package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/firewall"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
)

// hookDriver is the Docker driver with a hook run once the sandbox is
// started, before the arm's solve.
type hookDriver struct {
	*docker.Driver
	after func(context.Context, *sandbox.Handle) error
}

func (d *hookDriver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	h, err := d.Driver.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := d.after(ctx, h); err != nil {
		_ = d.Destroy(ctx, h)
		return nil, err
	}
	return h, nil
}

// cellNetwork returns the gateway and the subnet of the one network of
// the sandbox's container.
func cellNetwork(ctx context.Context, d *docker.Driver, h *sandbox.Handle) (netip.Addr, netip.Prefix, error) {
	ins, err := d.Client().ContainerInspect(ctx, h.ID)
	if err != nil {
		return netip.Addr{}, netip.Prefix{}, err
	}
	for name, ep := range ins.NetworkSettings.Networks {
		gw, err := netip.ParseAddr(ep.Gateway)
		if err != nil {
			return netip.Addr{}, netip.Prefix{}, fmt.Errorf("network %s: gateway %q: %w", name, ep.Gateway, err)
		}
		ip, err := netip.ParseAddr(ep.IPAddress)
		if err != nil {
			return netip.Addr{}, netip.Prefix{}, err
		}
		return gw, netip.PrefixFrom(ip, ep.IPPrefixLen).Masked(), nil
	}
	return netip.Addr{}, netip.Prefix{}, fmt.Errorf("container %s is on no network", h.ID)
}

// requireFirewall skips (fails under CI) without root or iptables.
func requireFirewall(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("needs root for the host's iptables")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		skip("needs iptables: %v", err)
	}
}

// TestProbeGatewayListener: a service of the host listening on the
// gateway of the cell's network (the host's side of it) is reachable from
// the agent's sandbox; the probe, told to try its port, reports network
// open and names it. With `proctor firewall apply`'s rules for the cell's
// subnet, the same listener is out of reach and network is closed. The
// probe used to try only 2375 and 2376 there and said closed with the
// listener reachable.
func TestProbeGatewayListener(t *testing.T) {
	t.Parallel()
	requireFirewall(t)
	staticProctor(t)
	d := dockerDriver(t)
	for _, withFirewall := range []bool{false, true} {
		t.Run(map[bool]string{false: "open host", true: "firewall applied"}[withFirewall], func(t *testing.T) {
			tk := harnesstest.Task(t, "probe-gw-"+randHex(3), nil)
			var accepted atomic.Int64
			var env *harnesstest.Env
			var reach string
			hd := &hookDriver{Driver: d, after: func(ctx context.Context, h *sandbox.Handle) error {
				gw, subnet, err := cellNetwork(ctx, d, h)
				if err != nil {
					return err
				}
				l, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
				if err != nil {
					return err
				}
				t.Cleanup(func() { l.Close() })
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						accepted.Add(1)
						c.Close()
					}
				}()
				reach = l.Addr().String()
				port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
				env.SpecV.ProbeTargets = "url=http://127.0.0.1:1/,tcp=127.0.0.1:1,dns=localhost,gateway=22/" + port
				if withFirewall {
					// The rules of `proctor firewall apply`, for this
					// cell's subnet only; removed one by one after.
					fw := firewall.Firewall{Pool: subnet}
					t.Cleanup(func() {
						for _, r := range fw.Rules() {
							_ = exec.Command("iptables", append([]string{"-D", r.Chain}, r.Spec...)...).Run()
						}
					})
					if _, err := fw.Apply(ctx); err != nil {
						return err
					}
				}
				return nil
			}}
			env = harnesstest.NewEnv(t, tk, "probe", hd)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			a, err := harness.Lookup("probe")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := harnesstest.Run(ctx, a, env); err != nil {
				t.Fatal(err)
			}
			var res harness.ProbeResult
			b, err := os.ReadFile(env.DirV.Path(harness.ProbeReportFile))
			if err != nil || json.Unmarshal(b, &res) != nil {
				t.Fatalf("isolation_probe.json: %v", err)
			}
			nf := res.Report.Classes[isoprobe.Network]
			ev := strings.Join(nf.Evidence, "\n")
			if !withFirewall {
				if nf.Status != isoprobe.Open || len(res.Report.GatewayReached) != 1 || res.Report.GatewayReached[0] != reach || !strings.Contains(ev, reach+" accepts connections") {
					t.Fatalf("a listener on the gateway (%s): network %+v, reached %v; want open naming it", reach, nf, res.Report.GatewayReached)
				}
				if accepted.Load() == 0 {
					t.Fatal("the listener saw no connection")
				}
				return
			}
			if nf.Status != isoprobe.Closed || len(res.Report.GatewayReached) != 0 || accepted.Load() != 0 {
				t.Fatalf("with the firewall: network %+v, reached %v, %d connections; want closed", nf, res.Report.GatewayReached, accepted.Load())
			}
		})
	}
}

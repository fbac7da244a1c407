package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// ipv6Network makes an --internal network with IPv6 enabled (a ULA
// subnet of its own), as an engine with `ipv6: true` would give a cell,
// removed when the test ends.
func ipv6Network(t *testing.T, d *Driver) string {
	t.Helper()
	ctx := context.Background()
	name := "proctor-ipv6-test-" + randomHex(4)
	sub := fmt.Sprintf("fd00:db8:%s::/64", randomHex(2))
	nw, err := d.Client().NetworkCreate(ctx, name, network.CreateOptions{
		Driver: "bridge", Internal: true, EnableIPv6: boolPtr(true),
		Labels: map[string]string{sandbox.LabelManaged: "1", sandbox.LabelRun: "ipv6-test-" + randomHex(4)},
		IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: sub}}},
	})
	if err != nil {
		t.Skipf("this engine makes no IPv6 network (%v)", err)
	}
	t.Cleanup(func() { _ = d.Client().NetworkRemove(context.Background(), nw.ID) })
	return name
}

func boolPtr(b bool) *bool { return &b }

// probeIPv6 runs the real probe program (a static proctor's probe-inside)
// as uid 10001 in the container and returns its network finding.
func probeIPv6(t *testing.T, d *Driver, cid string) isoprobe.Finding {
	t.Helper()
	ctx := context.Background()
	h := &sandbox.Handle{Driver: sandbox.DriverDocker, ID: cid, State: map[string]string{"container": cid}}
	dir := t.TempDir()
	cfg, _ := json.Marshal(isoprobe.Config{Root: "/", Workdir: "/tmp", Home: "/tmp",
		Targets: isoprobe.Targets{URL: "http://127.0.0.1:1/", TCP: "127.0.0.1:1", Gateway: "1"}, TimeoutSec: 1, Skip: []string{"/probe"}})
	if err := os.WriteFile(filepath.Join(dir, "probe.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := testutil.ProctorBinary(t) // copied under its own name (proctor-<digest>)
	for _, f := range []string{bin, filepath.Join(dir, "probe.json")} {
		if err := d.CopyIn(ctx, h, f, "/probe"); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"/probe/" + filepath.Base(bin), "probe-inside", "--config", "/probe/probe.json"},
		User: "10001", Stdout: &out, Stderr: &errOut, Timeout: 2 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe-inside: %+v %v: %s", res, err, errOut.String())
	}
	var rep isoprobe.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("probe report: %v: %s", err, out.String())
	}
	return rep.Classes[isoprobe.Network]
}

// TestSandboxIPv6Off: every sandbox container and compose service is
// created with IPv6 disabled (net.ipv6.conf.{all,default}.disable_ipv6=1),
// not left to the engine's defaults. On a network with IPv6 enabled (as
// an engine with `ipv6: true` makes them) a container created with the
// sandbox's HostConfig has no IPv6 address and the probe's IPv6 check
// says closed, while a container created without it gets an address and
// the probe says open, naming it. Before, no sysctl was set and a sandbox
// on such a network had IPv6.
func TestSandboxIPv6Off(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	if !kernelIPv6() {
		t.Skip("this kernel has no IPv6")
	}
	ctx := context.Background()
	run := "ipv6-" + randomHex(4)
	h, err := d.Start(ctx, sandbox.Spec{RunID: run, CellID: "c", Image: testImage, Network: sandbox.NetworkInternal, Lifetime: 2 * time.Minute,
		Services: []sandbox.Service{{Name: "side", Image: testImage, Entrypoint: []string{"sleep"}, Cmd: []string{"120"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	ids := append([]string{h.ID}, strings.Split(h.State["services"], ",")...)
	for _, id := range ids {
		ins, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"} {
			if ins.HostConfig.Sysctls[k] != v {
				t.Errorf("container %s (%s): sysctl %s = %q, want %s", short(id), ins.Config.Labels[LabelService], k, ins.HostConfig.Sysctls[k], v)
			}
		}
	}
	var out bytes.Buffer
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"}, Stdout: &out, Timeout: time.Minute}); err != nil || res.ExitCode != 0 || out.String() != "1\n1\n" {
		t.Fatalf("disable_ipv6 in the sandbox: %q %+v %v", out.String(), res, err)
	}

	// On a network with IPv6.
	v6 := ipv6Network(t, d)
	lbl := map[string]string{sandbox.LabelManaged: "1", sandbox.LabelRun: run}
	for _, tc := range []struct {
		name   string
		hc     *container.HostConfig
		status string
		says   string
	}{
		{"the sandbox's HostConfig", hostConfig(v6, d.Limits(sandbox.Spec{})), isoprobe.Closed, "ipv6: no address but loopback"},
		{"the engine's defaults", &container.HostConfig{NetworkMode: container.NetworkMode(v6)}, isoprobe.Open, "ipv6: address fd00:db8:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cli.ContainerCreate(ctx, &container.Config{Image: testImage, Entrypoint: []string{"sleep", "120"}, Cmd: []string{}, Labels: lbl}, tc.hc, nil, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
			if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
				t.Fatal(err)
			}
			f := probeIPv6(t, d, c.ID)
			ev := strings.Join(f.Evidence, "\n")
			if !strings.Contains(ev, tc.says) || (tc.status == isoprobe.Open) != (f.Status == isoprobe.Open) {
				t.Fatalf("network %+v, want %s saying %q", f, tc.status, tc.says)
			}
		})
	}
}

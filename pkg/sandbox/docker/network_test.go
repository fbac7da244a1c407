package docker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// networksOf lists the networks container id is on, by network id (the
// bridge by its name).
func networksOf(t *testing.T, cli *client.Client, id string) []string {
	t.Helper()
	ins, err := cli.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name, ep := range ins.NetworkSettings.Networks {
		if name == sandbox.NetworkBridge {
			out = append(out, name)
		} else {
			out = append(out, ep.NetworkID)
		}
	}
	slices.Sort(out)
	return out
}

// TestDockerMoveNetwork: a sandbox started on its internal network moves
// to no network at all (a name lookup then fails at once, as with
// --network none, where the internal network's resolver left it
// unanswered for 20 s), back to its cell network (with its resolver),
// to the bridge and back; a container started with network none cannot
// join one.
func TestDockerMoveNetwork(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage, Network: sandbox.NetworkInternal, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(ctx, h) })
	nid := h.State["network"]
	resolv := execOK(t, d, h, "cat /etc/resolv.conf")
	if !strings.Contains(resolv, "nameserver") {
		t.Fatalf("resolv.conf on the internal network names no server: %q", resolv)
	}
	// lookup times the lookup inside the container, so a loaded engine's
	// slow exec does not count: a resolver left naming a server it cannot
	// reach waits out its 5 s timeout; none fails at once.
	lookup := func() (string, time.Duration) {
		var out strings.Builder
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "s=$(date +%s%N); getent hosts dns-check.invalid; r=$?; echo $(( ($(date +%s%N) - s) / 1000000 )); echo exit $r"}, Stdout: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("lookup: %+v %v", res, err)
		}
		ms, rest, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
		n, err := strconv.Atoi(ms)
		if err != nil {
			t.Fatalf("lookup printed %q", out.String())
		}
		return rest, time.Duration(n) * time.Millisecond
	}
	if err := d.MoveNetwork(ctx, h, sandbox.NetworkNone); err != nil {
		t.Fatal(err)
	}
	if n := networksOf(t, cli, h.ID); len(n) != 0 {
		t.Errorf("networks after the move to none: %v", n)
	}
	if out, took := lookup(); out != "exit 2" || took >= 4*time.Second {
		t.Errorf("a lookup on no network: %q after %s, want a failure (exit 2) at once", out, took)
	}
	if got := execOK(t, d, h, "cat /etc/resolv.conf"); strings.Contains(got, "nameserver") {
		t.Errorf("resolv.conf on no network: %q", got)
	}
	if err := d.MoveNetwork(ctx, h, sandbox.NetworkNone); err != nil {
		t.Fatalf("a second move to none: %v", err)
	}
	if err := d.MoveNetwork(ctx, h, sandbox.NetworkInternal); err != nil {
		t.Fatal(err)
	}
	if n := networksOf(t, cli, h.ID); !slices.Equal(n, []string{nid}) {
		t.Errorf("networks back on internal: %v, want [%s]", n, nid)
	}
	if got := execOK(t, d, h, "cat /etc/resolv.conf; ls /.proctor-resolv.conf 2>&1; true"); !strings.HasPrefix(got, resolv) || !strings.Contains(got, "No such file") {
		t.Errorf("resolv.conf back on internal: %q, want %q and the kept copy gone", got, resolv)
	}
	if err := d.MoveNetwork(ctx, h, sandbox.NetworkBridge); err != nil {
		t.Fatal(err)
	}
	if n := networksOf(t, cli, h.ID); !slices.Equal(n, []string{sandbox.NetworkBridge}) {
		t.Errorf("networks on the bridge: %v", n)
	}
	if err := d.MoveNetwork(ctx, h, sandbox.NetworkInternal); err != nil {
		t.Fatal(err)
	}
	if n := networksOf(t, cli, h.ID); !slices.Equal(n, []string{nid}) {
		t.Errorf("networks back from the bridge: %v, want [%s]", n, nid)
	}
	none, err := d.Start(ctx, sandbox.Spec{Image: testImage, Network: sandbox.NetworkNone, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(ctx, none) })
	if err := d.MoveNetwork(ctx, none, sandbox.NetworkNone); err != nil {
		t.Errorf("a none container moved to none: %v", err)
	}
	if err := d.MoveNetwork(ctx, none, sandbox.NetworkInternal); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a none container moved to internal: %v", err)
	}
}

package firewall

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test builds three network namespaces of its own and sends traffic
// only between them:
//
//	ctr (a sandbox, 10.213.7.2/24) --veth-- host (10.213.7.1, 10.99.0.1) --veth-- out (10.99.0.2/24)
//
// host plays the Docker host: its iptables has a DOCKER-USER chain that
// FORWARD jumps to, as Docker makes it, and it forwards between ctr and out.

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// requireNetns skips (fails when CI is set) without root, ip or iptables.
func requireNetns(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("needs root to make network namespaces")
	}
	for _, bin := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			skip("needs %s: %v", bin, err)
		}
	}
}

func newNS(t *testing.T, name string) {
	t.Helper()
	sh(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	sh(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// inNS runs f on a thread moved into the named namespace; sockets made in
// f stay in that namespace.
func inNS(t *testing.T, name string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			panic("cannot return to the test's network namespace: " + err.Error())
		}
	}()
	f()
}

// listen accepts and closes connections on addr inside ns until the test ends.
func listen(t *testing.T, ns, addr string) {
	t.Helper()
	var l net.Listener
	inNS(t, ns, func() {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// reach reports whether a TCP connect from ns to addr succeeds within 1 s.
func reach(t *testing.T, ns, addr string) bool {
	t.Helper()
	var ok bool
	inNS(t, ns, func() {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			ok = true
		}
	})
	return ok
}

// TestApplyDropsSandboxToHost: after Apply, a sandbox address of the pool
// can neither connect to the host (its gateway address) nor through it to
// another network, while the other network still reaches the host; after
// Remove everything connects again.
func TestApplyDropsSandboxToHost(t *testing.T) {
	requireNetns(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	host, ctr, out := "pfh-"+id, "pfc-"+id, "pfo-"+id
	for _, ns := range []string{host, ctr, out} {
		newNS(t, ns)
	}
	sh(t, "ip", "link", "add", "vc"+id, "netns", ctr, "type", "veth", "peer", "name", "vh"+id, "netns", host)
	sh(t, "ip", "link", "add", "vo"+id, "netns", out, "type", "veth", "peer", "name", "vg"+id, "netns", host)
	for _, c := range [][]string{
		{ctr, "addr", "add", "10.213.7.2/24", "dev", "vc" + id}, {ctr, "link", "set", "vc" + id, "up"},
		{ctr, "route", "add", "default", "via", "10.213.7.1"},
		{host, "addr", "add", "10.213.7.1/24", "dev", "vh" + id}, {host, "link", "set", "vh" + id, "up"},
		{host, "addr", "add", "10.99.0.1/24", "dev", "vg" + id}, {host, "link", "set", "vg" + id, "up"},
		{out, "addr", "add", "10.99.0.2/24", "dev", "vo" + id}, {out, "link", "set", "vo" + id, "up"},
		{out, "route", "add", "default", "via", "10.99.0.1"},
	} {
		sh(t, append([]string{"ip", "-n", c[0]}, c[1:]...)...)
	}
	sh(t, "ip", "netns", "exec", host, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	ipt := []string{"ip", "netns", "exec", host, "iptables"}
	sh(t, append(ipt, "-N", DockerUserChain)...)
	sh(t, append(ipt, "-A", "FORWARD", "-j", DockerUserChain)...)

	listen(t, host, "0.0.0.0:7001") // a host service on all interfaces
	listen(t, out, "10.99.0.2:7002")
	toHost, toOut, outToHost := "10.213.7.1:7001", "10.99.0.2:7002", "10.99.0.1:7001"
	if !reach(t, ctr, toHost) || !reach(t, ctr, toOut) || !reach(t, out, outToHost) {
		t.Fatal("the namespaces do not connect before Apply; the test proves nothing")
	}

	fw := Firewall{IPTables: ipt, Pool: netip.MustParsePrefix("10.213.0.0/16")}
	ctx := context.Background()
	added, err := fw.Apply(ctx)
	if err != nil || len(added) != 2 {
		t.Fatalf("Apply: %v %v", added, err)
	}
	if again, err := fw.Apply(ctx); err != nil || len(again) != 0 {
		t.Fatalf("second Apply added %v (%v), want nothing", again, err)
	}
	shown, err := fw.Show(ctx)
	if err != nil || len(shown) != 2 || !strings.HasPrefix(shown[0], "-A INPUT -s 10.213.0.0/16") || !strings.HasPrefix(shown[1], "-A DOCKER-USER -s 10.213.0.0/16 ! -d 10.213.0.0/16") {
		t.Fatalf("Show: %q %v", shown, err)
	}
	if reach(t, ctr, toHost) {
		t.Error("after Apply the sandbox still reaches a host service")
	}
	if reach(t, ctr, toOut) {
		t.Error("after Apply the sandbox still reaches another network through the host")
	}
	if !reach(t, out, outToHost) {
		t.Error("after Apply a network outside the pool no longer reaches the host")
	}

	removed, err := fw.Remove(ctx)
	if err != nil || len(removed) != 2 {
		t.Fatalf("Remove: %v %v", removed, err)
	}
	if shown, err := fw.Show(ctx); err != nil || len(shown) != 0 {
		t.Fatalf("Show after Remove: %q %v", shown, err)
	}
	if !reach(t, ctr, toHost) || !reach(t, ctr, toOut) {
		t.Error("after Remove the sandbox does not connect again")
	}
}

// TestApplyNeedsDockerUserChain: without Docker's chain Apply installs
// nothing and says why.
func TestApplyNeedsDockerUserChain(t *testing.T) {
	requireNetns(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	ns := "pfn-" + hex.EncodeToString(b)
	newNS(t, ns)
	fw := Firewall{IPTables: []string{"ip", "netns", "exec", ns, "iptables"}, Pool: netip.MustParsePrefix("10.213.0.0/16")}
	if _, err := fw.Apply(context.Background()); err == nil || !strings.Contains(err.Error(), "DOCKER-USER") {
		t.Fatalf("Apply without DOCKER-USER: %v", err)
	}
	if shown, err := fw.Show(context.Background()); err != nil || len(shown) != 0 {
		t.Fatalf("Show: %q %v", shown, err)
	}
}

func TestSplitRule(t *testing.T) {
	got, err := splitRule(`-A INPUT -s 10.213.0.0/16 -m comment --comment "a \"b\" c" -j DROP`)
	want := []string{"-A", "INPUT", "-s", "10.213.0.0/16", "-m", "comment", "--comment", `a "b" c`, "-j", "DROP"}
	if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%q %v", got, err)
	}
}

package cli

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestFirewallCommand drives `proctor firewall apply|show|remove` against
// the iptables of a network namespace the test makes (the rules' effect
// on traffic is tested in pkg/firewall).
func TestFirewallCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to make a network namespace")
		}
		t.Skip("needs root to make a network namespace")
	}
	ns := "pfcli-" + strings.ToLower(events.NewID()[20:])
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ipt := "ip netns exec " + ns + " iptables"
	if out, err := exec.Command("ip", "netns", "exec", ns, "iptables", "-N", "DOCKER-USER").CombinedOutput(); err != nil {
		t.Fatalf("iptables -N: %v %s", err, out)
	}
	out := mustProctor(t, "firewall", "apply", "--iptables", ipt)
	if strings.Count(out, "added -A ") != 2 || !strings.Contains(out, "10.213.0.0/16") {
		t.Fatalf("apply: %q", out)
	}
	if out := mustProctor(t, "firewall", "apply", "--iptables", ipt); out != "already in place\n" {
		t.Fatalf("second apply: %q", out)
	}
	if out := mustProctor(t, "firewall", "show", "--iptables", ipt); strings.Count(out, "proctor-sandbox") != 2 {
		t.Fatalf("show: %q", out)
	}
	if out := mustProctor(t, "firewall", "remove", "--iptables", ipt); strings.Count(out, "removed -A ") != 2 {
		t.Fatalf("remove: %q", out)
	}
	if out, errOut, code := proctor(t, "firewall", "show", "--iptables", ipt); code != 0 || out != "" || !strings.Contains(errOut, "no proctor-sandbox rules installed") {
		t.Fatalf("show after remove: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := proctor(t, "firewall", "apply", "--pool", "nonsense"); code != ExitUsage || !strings.Contains(errOut, "--pool") {
		t.Fatalf("bad pool: exit %d %q", code, errOut)
	}
}

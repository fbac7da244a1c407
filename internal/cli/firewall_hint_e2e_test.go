package cli

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// TestRunOffersFirewall: a probe run whose sandbox reaches a service of
// this host on its network's gateway reports network open and offers
// `proctor firewall apply` on stderr. The listener goes up on the gateway
// while the engine holds the sandbox's container create (the network
// exists by then), through testutil.DockerProxy.
func TestRunOffersFirewall(t *testing.T) {
	t.Parallel() // its own store, processes and engine objects; the environment is never set
	p := testutil.NewDockerProxy(t)
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	hold := p.Hold("POST /containers/create")
	port := testutil.FreePorts(t, 1)[0]
	bin := buildProctor(t)
	out := t.TempDir()
	js := filepath.Join(out, "a.json")
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", writeEngineTask(t, 30), "--all", "--harnesses", "probe",
		"--probe-targets", "url=http://127.0.0.1:1/,tcp=127.0.0.1:1,dns=localhost,gateway=22/"+strconv.Itoa(port),
		"--output-dir", out, "--out-json", js)
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+t.TempDir(), "DOCKER_HOST="+p.Host)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var runID string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := runIDRe.FindStringSubmatch(sc.Text()); m != nil {
			runID = m[1]
			break
		}
	}
	if runID == "" {
		t.Fatal("no run id on stderr")
	}
	var rest strings.Builder
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
	}()
	hold.WaitHit(t, 3*time.Minute)
	ns, err := cli.NetworkList(context.Background(), network.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "proctor.run="+runID))})
	if err != nil || len(ns) != 1 || len(ns[0].IPAM.Config) == 0 {
		t.Fatalf("the cell's network: %+v %v", ns, err)
	}
	subnet, err := netip.ParsePrefix(ns[0].IPAM.Config[0].Subnet)
	if err != nil {
		t.Fatal(err)
	}
	gw := subnet.Masked().Addr().Next() // the engine's gateway: the first address
	l, err := net.Listen("tcp", net.JoinHostPort(gw.String(), strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hold.Release()
	_ = cmd.Wait()
	<-drained
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("artifact: %v\n%s", err, rest.String())
	}
	if len(a.Results) != 1 || a.Results[0].Metrics.IsolationProbe["network"] != "open" {
		t.Fatalf("probe row: %+v\n%s", a.Results, rest.String())
	}
	reached := l.Addr().String()
	if s := rest.String(); !strings.Contains(s, "proctor firewall apply") || !strings.Contains(s, reached) {
		t.Fatalf("stderr offers no firewall for %s:\n%s", reached, s)
	}
}

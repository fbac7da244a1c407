package harness_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
)

// TestProbeHostReportsOpenClasses runs docker-probe-host: the probe in
// exactly the host arms' sandbox (a proctor-run-* tree, the agent's
// user, its cgroup) beside a real task container. It fails, honestly:
// work_tree and host_filesystem are open by what a host launch is; the
// network is the host's (a target on a Docker network the test made,
// which no container sandbox reaches, answers); and env is open where it
// is on this host: run as proctor's own uid, the agent reads proctor's
// environment; run as the dedicated user (proctor is root), it reads the
// environment of another process of that user (another host cell's
// agent) holding the operator's provider key.
func TestProbeHostReportsOpenClasses(t *testing.T) {
	d := dockerDriver(t)
	_, name, ip := targetHost(t, d.Client())
	staticProctor(t)
	secret := "sk-ant-host-" + randHex(16)
	t.Setenv("ANTHROPIC_API_KEY", secret)
	if os.Geteuid() == 0 {
		// Another cell's agent of the dedicated user, run with the key
		// (as --no-intercept gives it).
		u, err := harness.HostAgentUser(nil)
		if err != nil {
			t.Fatal(err)
		}
		us, gs, _ := strings.Cut(u, ":")
		uid, _ := strconv.Atoi(us)
		gid, _ := strconv.Atoi(gs)
		other := exec.Command("sleep", "300")
		other.Env = []string{"ANTHROPIC_API_KEY=" + secret}
		other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	}
	task := harnesstest.Task(t, "probe-host-"+randHex(3), nil)
	env := harnesstest.NewEnv(t, task, "docker-probe-host", d)
	env.H = &process.Driver{Host: true}
	env.SpecV.ProbeTargets = "url=http://" + ip + ":8000/,tcp=" + ip + ":8000,dns=" + name
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := harness.Lookup("docker-probe-host")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, out, err := harnesstest.Run(ctx, a, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probed the host in %s", time.Since(start).Round(time.Millisecond))
	var res harness.ProbeResult
	b, err := os.ReadFile(env.DirV.Path(harness.ProbeReportFile))
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("isolation_probe.json: %v", err)
	}
	if res.Passed || out.Verdict == nil || *out.Verdict.Reward != 0 {
		t.Fatalf("the host probe passed: %+v", res)
	}
	for _, c := range []string{"work_tree", "host_filesystem", isoprobe.Network, isoprobe.Env} {
		if res.Classes[c] != isoprobe.Open {
			t.Errorf("%s is %q on the host, want open: %+v", c, res.Classes[c], res.Report.Classes[c])
		}
	}
	if ev := strings.Join(res.Report.Classes[isoprobe.Env].Evidence, "\n"); !strings.Contains(ev, "ANTHROPIC_API_KEY") {
		t.Errorf("env evidence does not name the key's variable:\n%s", ev)
	}
	if r := out.Finished.Reason; !strings.Contains(r, "work_tree=open") || !strings.Contains(r, "host_filesystem=open") || !strings.Contains(r, "env=open") {
		t.Errorf("reason %q does not name the open classes", r)
	}
	iso := out.Finished.Isolation
	if iso["agent_location"] != "host" || iso["host_open"] == nil || out.Finished.IsolationProbe["work_tree"] != isoprobe.Open {
		t.Errorf("finished: isolation %v, isolation_probe %v", iso, out.Finished.IsolationProbe)
	}
	if u, _ := iso["user"].(string); os.Geteuid() == 0 && (u == "" || strings.HasPrefix(u, "0:")) {
		t.Errorf("the probe ran as %q", u)
	}
}

package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/task"
)

// egressFake is the scripted fake with an egress proxy: a spec with
// Egress gets a "proxy" in its handle's state, and EgressLog returns log.
type egressFake struct {
	*sandboxfake.Driver
	log     []byte
	stopped int
}

func (d *egressFake) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	h, err := d.Driver.Start(ctx, spec)
	if err == nil && spec.Egress != nil {
		h.State["proxy"] = "10.213.0.62:3128"
	}
	return h, err
}

func (d *egressFake) EgressLog(context.Context, *sandbox.Handle) ([]byte, error) {
	d.stopped++
	return d.log, nil
}

const allowlistToml = "version = \"1.0\"\n\n[agent]\ntimeout_sec = 30\n\n[verifier]\ntimeout_sec = 30\n\n" +
	"[environment]\nnetwork_mode = \"allowlist\"\negress = [\"pypi.org\", \"private:gw.test:4000\"]\n"

// TestOracleAllowlistBehindProxy: the oracle of an allowlist task starts
// on an internal network with the task's allowlist as its proxy, its
// solve gets the proxy variables, and the proxy's log becomes
// egress.jsonl and EgressDecision events at the proxy's times.
func TestOracleAllowlistBehindProxy(t *testing.T) {
	log := `{"time":"2025-01-15T10:00:05.9Z","conn":1,"method":"CONNECT","host":"pypi.org","port":443,"decision":"allowed","reason":"allowlist entry pypi.org:443","bytes_up":0,"bytes_down":0,"duration_sec":0.001}
{"time":"2025-01-15T10:00:06Z","conn":2,"method":"CONNECT","host":"evil.test","port":443,"decision":"denied","reason":"not on the allowlist","status":403,"bytes_up":0,"bytes_down":0,"duration_sec":0.001}
`
	d := &egressFake{Driver: &sandboxfake.Driver{}, log: []byte(log)}
	tk := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": allowlistToml})
	env := harnesstest.NewEnv(t, tk, "oracle", d)
	p, out, err := harnesstest.Run(context.Background(), arm(t, "oracle"), env)
	if err != nil {
		t.Fatal(err)
	}
	if p.Networks.Start != sandbox.NetworkInternal || p.Networks.Solve != task.NetworkAllowlist || p.Spec.Network != sandbox.NetworkInternal {
		t.Errorf("networks %+v, spec network %q", p.Networks, p.Spec.Network)
	}
	if p.Spec.Egress == nil || !slices.Equal(p.Spec.Egress.Allow, []string{"pypi.org", "private:gw.test:4000"}) {
		t.Errorf("egress %+v", p.Spec.Egress)
	}
	if out.Finished.Isolation["network"] != task.NetworkAllowlist {
		t.Errorf("isolation %v", out.Finished.Isolation)
	}
	execs := d.Execs()
	if len(execs) != 1 || execs[0].Spec.Env["HTTPS_PROXY"] != "http://10.213.0.62:3128" || execs[0].Spec.Env["no_proxy"] != sandbox.NoProxy {
		t.Errorf("solve env %v", execs[0].Spec.Env)
	}
	var decisions []events.EgressDecisionData
	var times []time.Time
	for _, e := range env.Events() {
		if e.Type == events.EgressDecision {
			decisions = append(decisions, e.Data.(events.EgressDecisionData))
			times = append(times, e.At)
		}
	}
	if len(decisions) != 2 || decisions[0].Host != "pypi.org" || decisions[0].Decision != "allowed" ||
		decisions[1].Decision != "denied" || decisions[1].Status != 403 || !times[1].Equal(time.Date(2025, 1, 15, 10, 0, 6, 0, time.UTC)) {
		t.Errorf("decisions %+v at %v", decisions, times)
	}
	if b, err := os.ReadFile(filepath.Join(env.Dir().Path(), "egress.jsonl")); err != nil || string(b) != log {
		t.Errorf("egress.jsonl: %v\n%s", err, b)
	}
	if d.stopped != 1 {
		t.Errorf("EgressLog called %d times", d.stopped)
	}
}

// TestEgressBadLine: a log line that does not decode is an error naming
// egress.jsonl and the line; the file is kept.
func TestEgressBadLine(t *testing.T) {
	d := &egressFake{Driver: &sandboxfake.Driver{}, log: []byte("{\"time\":\"2025-01-15T10:00:05Z\",\"host\":\"a.test\",\"port\":443,\"decision\":\"denied\"}\nnot json\n")}
	tk := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": allowlistToml})
	env := harnesstest.NewEnv(t, tk, "oracle", d)
	_, _, err := harnesstest.Run(context.Background(), arm(t, "oracle"), env)
	if err == nil || !strings.Contains(err.Error(), "egress.jsonl line 2") {
		t.Fatalf("err %v, want one naming egress.jsonl line 2", err)
	}
	if _, err := os.Stat(filepath.Join(env.Dir().Path(), "egress.jsonl")); err != nil {
		t.Error(err)
	}
}

// TestEgressFor: no proxy for a task that is not allowlist unless an arm
// adds hosts of its own, which then come after the task's.
func TestEgressFor(t *testing.T) {
	open := harnesstest.Task(t, "t", nil)
	if e := harness.EgressFor(open); e != nil {
		t.Errorf("public task: %+v", e)
	}
	if e := harness.EgressFor(open, "api.provider.test"); e == nil || !slices.Equal(e.Allow, []string{"api.provider.test"}) {
		t.Errorf("public task with a provider host: %+v", e)
	}
	al := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": allowlistToml})
	if e := harness.EgressFor(al, "api.provider.test"); e == nil || !slices.Equal(e.Allow, []string{"pypi.org", "private:gw.test:4000", "api.provider.test"}) {
		t.Errorf("allowlist task with a provider host: %+v", e)
	}
}

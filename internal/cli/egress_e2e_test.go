package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
)

// writeFetchTask writes an allowlist task whose solve must fetch the test
// host's page through the egress proxy and whose test checks it arrived.
func writeFetchTask(t *testing.T, root, name, allow string) {
	t.Helper()
	files := map[string]string{
		"task.toml": "version = \"1.0\"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n" +
			"[environment]\nnetwork_mode = \"allowlist\"\negress = [\"" + allow + "\"]\n",
		"instruction.md":         "Save http://allowed.test/ to /app/out.txt.\n",
		"environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
		"solution/solve.sh": "set -e\npython3 -c \"import urllib.request; " +
			"open('/app/out.txt','w').write(urllib.request.urlopen('http://allowed.test/', timeout=20).read().decode())\"\n",
		"tests/test.sh": "if grep -q 'the fetched page' /app/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
	}
	for rel, body := range files {
		p := filepath.Join(root, name, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAllowlistTaskThroughProxy runs two allowlist tasks end to end
// (embedded NATS, real Docker, the sidecar built from proctor): the one
// whose allowlist names the test host (a container on a network the test
// made) fetches its page through the proxy and passes; the one whose
// allowlist does not fails. Each cell's egress.jsonl and metrics.egress
// (projected from the EgressDecision events) show the decision, and
// nothing of the run is left.
func TestAllowlistTaskThroughProxy(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	upNet := testutil.TestNetwork(t, cli)
	testutil.HTTPHost(t, cli, upNet, "allowed.test", "the fetched page")
	setenv(t, EnvProxyBinary, testutil.ProctorBinary(t))
	setenv(t, EnvEgressNetwork, upNet)
	home, out, tasks := t.TempDir(), t.TempDir(), t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	writeFetchTask(t, tasks, "fetch-listed", "private:allowed.test:80")
	writeFetchTask(t, tasks, "fetch-unlisted", "private:other.test:80")
	js := filepath.Join(out, "a.json")
	var stdout, stderr bytes.Buffer
	code := mainT(t, []string{"tasks", "run", "--tasks-root", tasks, "--all", "--harnesses", "oracle",
		"--output-dir", out, "--out-json", js}, &stdout, &stderr)
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("exit %d: %v\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	ok, bad := rows["fetch-listed"], rows["fetch-unlisted"]
	if ok.Outcome != "passed" || bad.Outcome != "failed" {
		t.Fatalf("outcomes %q (%s), %q (%s); want passed, failed", ok.Outcome, ok.Error, bad.Outcome, bad.Error)
	}
	if e := ok.Metrics.Egress; e == nil || e.Allowed != 1 || e.Denied != 0 || !slices.Equal(e.AllowedHosts, []string{"allowed.test:80"}) {
		t.Errorf("fetch-listed metrics.egress %+v", e)
	}
	if e := bad.Metrics.Egress; e == nil || e.Allowed != 0 || e.Denied != 1 || !slices.Equal(e.DeniedHosts, []string{"allowed.test:80"}) ||
		len(e.DeniedEntries) != 1 || !strings.Contains(e.DeniedEntries[0].Reason, "not on the allowlist") {
		t.Errorf("fetch-unlisted metrics.egress %+v", e)
	}
	if n := ok.Metrics.Isolation["network"]; n != "allowlist" {
		t.Errorf("isolation.network %v, want allowlist", n)
	}
	for _, c := range []struct {
		row      artifact.Result
		decision string
	}{{ok, `"decision":"allowed"`}, {bad, `"decision":"denied"`}} {
		b, err := os.ReadFile(filepath.Join(c.row.OutputDir, "egress.jsonl"))
		if err != nil || !bytes.Contains(b, []byte(`"host":"allowed.test"`)) || !bytes.Contains(b, []byte(c.decision)) {
			t.Errorf("%s egress.jsonl (%v):\n%s", c.row.Task, err, b)
		}
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

// TestProbeAllowlistTask runs the isolation probe (docker-probe) on two
// allowlist tasks behind the egress proxy, its targets set to a host of
// the test's own: where the allowlist names the target the proxy lets the
// probe through and the network class is closed, the policy as declared,
// said in the evidence; where it does not, the proxy denies the probe's
// CONNECT and plain-HTTP GET, egress.jsonl shows both denials, and the
// class is closed. Every class is closed or n/a in both, so both pass.
func TestProbeAllowlistTask(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	upNet := testutil.TestNetwork(t, cli)
	testutil.HTTPHost(t, cli, upNet, "allowed.test", "the fetched page")
	bin := testutil.ProctorBinary(t)
	setenv(t, EnvProxyBinary, bin)
	staticProbe(t)
	setenv(t, EnvEgressNetwork, upNet)
	home, out, tasks := t.TempDir(), t.TempDir(), t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	writeFetchTask(t, tasks, "probe-listed", "private:allowed.test:80")
	writeFetchTask(t, tasks, "probe-unlisted", "private:other.test:80")
	js := filepath.Join(out, "a.json")
	var stdout, stderr bytes.Buffer
	code := mainT(t, []string{"tasks", "run", "--tasks-root", tasks, "--all", "--harnesses", "docker-probe",
		"--probe-targets", "url=http://allowed.test/,tcp=allowed.test:80,dns=allowed.test",
		"--output-dir", out, "--out-json", js}, &stdout, &stderr)
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("exit %d: %v\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	for _, r := range a.Results {
		if !r.Passed || r.Metrics.IsolationProbe[isoprobe.Network] != isoprobe.Closed {
			t.Errorf("%s: %s (%s), classes %v", r.Task, r.Outcome, r.Error, r.Metrics.IsolationProbe)
			continue
		}
		var res harness.ProbeResult
		b, err := os.ReadFile(filepath.Join(r.OutputDir, harness.ProbeReportFile))
		if err != nil || json.Unmarshal(b, &res) != nil {
			t.Fatalf("%s: %v", r.Task, err)
		}
		evidence := strings.Join(res.Report.Classes[isoprobe.Network].Evidence, "\n")
		egress, err := os.ReadFile(filepath.Join(r.OutputDir, "egress.jsonl"))
		if err != nil {
			t.Fatalf("%s: %v", r.Task, err)
		}
		var lines []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(egress), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("%s egress.jsonl: %v: %s", r.Task, err, l)
			}
			lines = append(lines, m)
		}
		decided := func(method, decision string) bool {
			return slices.ContainsFunc(lines, func(m map[string]any) bool {
				return m["method"] == method && m["host"] == "allowed.test" && m["decision"] == decision
			})
		}
		switch r.Task {
		case "probe-listed":
			if !strings.Contains(evidence, "on the egress allowlist (the policy as declared)") || !decided("CONNECT", "allowed") || !decided("GET", "allowed") {
				t.Errorf("probe-listed: evidence %q\negress.jsonl:\n%s", evidence, egress)
			}
		case "probe-unlisted":
			if !strings.Contains(evidence, "refused: 403") || !decided("CONNECT", "denied") || !decided("GET", "denied") {
				t.Errorf("probe-unlisted: evidence %q\negress.jsonl:\n%s", evidence, egress)
			}
		}
	}
	if len(a.Results) != 2 {
		t.Fatalf("%d rows", len(a.Results))
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

// TestPublicEgressTask runs a task whose policy is network_mode = "public"
// with an egress list (the seed's uxlfoundation pattern; a load error that
// failed the whole root before) beside one whose egress list holds a URL,
// with the oracle and an agent arm. The public task's oracle solves on the
// open network with the host's proxy variables, their credentials
// dropped; the agent, which never gets the open network, reaches the
// listed host through the egress proxy (the decision in metrics.egress)
// and passes. The URL task loads (the root runs): its agent cell is
// errored refused before any build, naming the key and the entry without
// its credentials, and its oracle (public: the list does not apply) runs.
func TestPublicEgressTask(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	upNet := testutil.TestNetwork(t, cli)
	testutil.HTTPHost(t, cli, upNet, "allowed.test", "the fetched page")
	setenv(t, EnvProxyBinary, testutil.ProctorBinary(t))
	setenv(t, EnvEgressNetwork, upNet)
	setenv(t, "HTTPS_PROXY", "http://opuser:op-secret-pw@corp-proxy.test:3128")
	setenv(t, "NO_PROXY", "internal.test")
	home, out, tasks, agent := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	writeTree(t, filepath.Join(tasks, "public-egress"), map[string]string{
		"task.toml": "version = \"1.0\"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n" +
			"[environment]\nnetwork_mode = \"public\"\negress = [\"private:allowed.test:80\"]\n",
		"instruction.md":         "Save http://allowed.test/ to /app/out.txt.\n",
		"environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
		// The oracle records the proxy variables it got.
		"solution/solve.sh": "env | grep -i _proxy= | sort > /app/proxy.txt\n",
		"tests/test.sh": "if grep -q 'the fetched page' /app/out.txt 2>/dev/null; then echo 1\n" +
			"elif grep -qx 'HTTPS_PROXY=http://corp-proxy.test:3128' /app/proxy.txt && grep -qx 'NO_PROXY=internal.test' /app/proxy.txt && ! grep -q secret /app/proxy.txt; then echo 1\n" +
			"else echo 0; fi > /logs/verifier/reward.txt\n",
	})
	writeTree(t, filepath.Join(tasks, "url-egress"), map[string]string{
		"task.toml":              "version = \"1.0\"\n\n[environment]\nnetwork_mode = \"public\"\negress = [\"https://tok:url-secret@pkgs.example/simple\"]\n",
		"instruction.md":         "Do nothing.\n",
		"environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "true\n",
		"tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
	})
	writeTree(t, agent, map[string]string{
		"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\n",
		"agent.sh": "python3 -c \"import urllib.request; " +
			"open('/app/out.txt','w').write(urllib.request.urlopen('http://allowed.test/', timeout=20).read().decode())\"\necho fetched\n",
	})
	js := filepath.Join(out, "a.json")
	var stdout, stderr bytes.Buffer
	code := mainT(t, []string{"tasks", "run", "--tasks-root", tasks, "--all", "--harnesses", "oracle,agent:" + agent,
		"--output-dir", out, "--out-json", js}, &stdout, &stderr)
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("exit %d: %v\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task+" "+strings.SplitN(r.Harness, ":", 2)[0]] = r
	}
	if r := rows["public-egress oracle"]; r.Outcome != "passed" {
		proxy, _ := os.ReadFile(filepath.Join(r.OutputDir, "solve.log"))
		t.Errorf("public-egress oracle: %s (%s); want passed on the open network with the host's proxy variables, credentials dropped\n%s", r.Outcome, r.Error, proxy)
	}
	r := rows["public-egress agent"]
	if r.Outcome != "passed" {
		t.Errorf("public-egress agent: %s (%s); want passed through the egress proxy", r.Outcome, r.Error)
	}
	if e := r.Metrics.Egress; e == nil || e.Allowed != 1 || !slices.Equal(e.AllowedHosts, []string{"allowed.test:80"}) {
		t.Errorf("public-egress agent metrics.egress %+v", e)
	}
	r = rows["url-egress agent"]
	if r.Outcome != "errored" || r.ErrorClass != "refused" || !strings.Contains(r.Error, "environment.egress") ||
		!strings.Contains(r.Error, "pkgs.example") || strings.Contains(r.Error, "url-secret") {
		t.Errorf("url-egress agent: %s %s (%s); want errored refused naming environment.egress, without the credentials", r.Outcome, r.ErrorClass, r.Error)
	}
	if r := rows["url-egress oracle"]; r.Outcome != "passed" {
		t.Errorf("url-egress oracle: %s (%s); want passed (a public solve does not apply the list)", r.Outcome, r.Error)
	}
	if strings.Contains(stdout.String()+stderr.String(), "url-secret") || strings.Contains(stdout.String()+stderr.String(), "op-secret") {
		t.Errorf("a credential reached proctor's output:\n%s\n%s", stdout.String(), stderr.String())
	}
	// Nor any file of the run: the cells' logs, egress.jsonl, the
	// artifact, the event store.
	noSecretIn(t, home, "op-secret-pw", "url-secret")
	noSecretIn(t, out, "op-secret-pw", "url-secret")
}

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// Attacks an agent (or a test script it fooled) plays against the verdict,
// each a task of a tasks root made here and one branch of a hostile agent;
// docs/THREATS.md points at these tests.

// writeTree writes files (path relative to root → content) under root;
// paths ending in .sh are executable.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// threatTask returns the files of a task named name: an image from base
// with extra Dockerfile lines, and tests/test.sh.
func threatTask(name, base, dockerfile, testSh string, tests map[string]string) map[string]string {
	files := map[string]string{
		name + "/task.toml":              "version = \"1.0\"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 60.0\n",
		name + "/instruction.md":         "Attack " + name + ".\n",
		name + "/environment/Dockerfile": "FROM " + base + "\nWORKDIR /app\n" + dockerfile,
		name + "/solution/solve.sh":      "#!/bin/bash\ntrue\n",
		name + "/tests/test.sh":          "#!/bin/bash\n" + testSh,
	}
	for rel, c := range tests {
		files[name+"/tests/"+rel] = c
	}
	return files
}

// permissive is a Dockerfile fragment for an image that leaves the
// verifier's paths writable by the agent (uid 10001), the worst case for
// graders staged in place.
const permissive = "RUN mkdir -p /tests /verifier /logs/verifier && chown 10001:10001 /tests /verifier /logs /logs/verifier\n"

// hostileAgent is the agent's script: one attack per task, each printing
// "planted" when it is in place.
const hostileAgent = `#!/bin/bash
echo '{"_tag":"Started"}'
case "$PROCTOR_TASK" in
planted-sum)
  # The issue's planted script: as root (the test runs it), it leaves a
  # process that writes 1 once the test has written its reward.
  cat > /app/sum.sh <<'SH'
if [ "$(id -u)" = 0 ]; then ( exec >/dev/null 2>&1
  for i in $(seq 300); do [ -s /logs/verifier/reward.txt ] && break; sleep .01; done
  echo 1 > /logs/verifier/reward.txt ) & fi
echo 0
SH
  echo planted ;;
link-host-reward)
  mkdir -p /app/out && ln -s "$HOST_REWARD" /app/out/reward.txt && echo planted ;;
metrics-zero)
  ln -sf /dev/zero /agent-output/metrics.json && echo planted ;;
metrics-host)
  ln -sf "$HOST_METRICS" /agent-output/metrics.json && echo planted ;;
fresh-hook)
  printf 'echo 1 > /logs/verifier/reward.txt; exit 0\n' > /tests/hook.sh &&
  cp /tests/hook.sh /verifier/hook.sh && echo planted ;;
fresh-logs)
  mkdir -p /app/fake && echo 1 > /app/fake/reward.txt &&
  rm -rf /logs/verifier && ln -s /app/fake /logs/verifier && echo planted ;;
fresh-conftest)
  printf 'import os\nopen("/logs/verifier/reward.txt", "w").write("1")\nos._exit(0)\n' > /tests/conftest.py && echo planted ;;
*)
  echo "nothing to plant" ;;
esac
`

// TestThreatsVerdict plays, against real containers, the attacks of a
// hostile agent on its verdict and on proctor, and asserts the honest
// outcome of each: a process the test ran as root that writes the reward
// after the test (frozen first), symlinks in reward files and metrics.json
// (never followed on the host), devices and oversized reward files,
// reward files that are not one plain number, and graders and logs left
// planted for the verifier (recreated fresh).
func TestThreatsVerdict(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())

	// Host files an agent would like proctor to read: a reward of 1 and a
	// metrics.json with a secret. Their paths do not exist in containers.
	host := t.TempDir()
	hostReward, hostMetrics := filepath.Join(host, "host-reward.txt"), filepath.Join(host, "host-metrics.json")
	const secret = "host-secret-7c1f"
	writeTree(t, host, map[string]string{
		"host-reward.txt":   "1\n",
		"host-metrics.json": `{"inputTokens": 4242, "note": "` + secret + `"}`,
	})

	root := t.TempDir()
	const zero = "mkdir -p /logs/verifier; echo 0 > /logs/verifier/reward.txt\n"
	for _, files := range []map[string]string{
		// Hole 1: a fix-sum-like task whose test runs the agent's script.
		threatTask("planted-sum", "debian:bookworm-slim", "RUN printf '3\\n14\\n15\\n92\\n65\\n' > /app/numbers.txt && printf 'tail -n +2 /app/numbers.txt | paste -sd+ | bc\\n' > /app/sum.sh\n",
			"mkdir -p /logs/verifier\nif [ \"$(bash /app/sum.sh)\" = \"189\" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n", nil),
		// Hole 2: links and devices as reward files.
		threatTask("link-hostname", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\nln -s /etc/hostname /logs/verifier/reward.txt\n", nil),
		threatTask("link-host-reward", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\ncp -a /app/out/. /logs/verifier/\n", nil),
		threatTask("reward-device", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\nmknod /logs/verifier/reward.txt c 1 5\n", nil),
		threatTask("reward-oversize", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\n{ echo 1; head -c 70000 /dev/zero | tr '\\0' ' '; } > /logs/verifier/reward.txt\n", nil),
		threatTask("metrics-zero", "debian:bookworm-slim", "", zero, nil),
		threatTask("metrics-host", "debian:bookworm-slim", "", zero, nil),
		// Holes 3 and 4: reward files that are not one plain number.
		threatTask("reward-trailing", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\necho '{\"reward\": 1} trailing' > /logs/verifier/reward.json\n", nil),
		threatTask("reward-hex", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\necho 0x1p0 > /logs/verifier/reward.txt\n", nil),
		threatTask("reward-negzero", "debian:bookworm-slim", "", "mkdir -p /logs/verifier\necho -0 > /logs/verifier/reward.txt\n", nil),
		// Hole 7: graders and logs planted where the verifier stages its own.
		threatTask("fresh-hook", "debian:bookworm-slim", permissive,
			"for h in /tests/hook.sh /verifier/hook.sh; do [ -f \"$h\" ] && . \"$h\"; done\n"+zero, nil),
		threatTask("fresh-logs", "debian:bookworm-slim", permissive,
			"if [ -f /app/solved ]; then mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; fi\n", nil),
		// A pytest stand-in (pytest is not in the image offline): like
		// pytest, it imports the conftest.py beside the tests first.
		threatTask("fresh-conftest", "python:3.11-slim", permissive, "mkdir -p /logs/verifier\npython3 /tests/run.py\n", map[string]string{
			"run.py": `import importlib.util, os, sys
sys.path.insert(0, "/tests")
if os.path.exists("/tests/conftest.py"):
    spec = importlib.util.spec_from_file_location("conftest", "/tests/conftest.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
import test_app
ok = True
for name in dir(test_app):
    if name.startswith("test_"):
        try:
            getattr(test_app, name)()
        except AssertionError:
            ok = False
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
`,
			"test_app.py": "import os\n\ndef test_solved():\n    assert os.path.exists('/app/solved')\n",
		}),
	} {
		writeTree(t, root, files)
	}
	agentDir := t.TempDir()
	writeTree(t, agentDir, map[string]string{
		"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\n\n[env]\nHOST_REWARD = \"" + hostReward + "\"\nHOST_METRICS = \"" + hostMetrics + "\"\n",
		"agent.sh":   hostileAgent,
	})
	hostile := "agent:" + agentDir

	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", hostile)
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	if len(rows) != 13 {
		t.Fatalf("%d rows, want 13: %v", len(rows), rows)
	}
	for task, r := range rows {
		if !strings.HasPrefix(task, "reward-") && !strings.HasPrefix(task, "link-hostname") && !strings.Contains(r.StdoutTail, "planted") {
			t.Errorf("%s: the attack was not played: %+v", task, r)
		}
	}
	verifierError := func(task, says string) {
		t.Helper()
		r := rows[task]
		if r.Outcome != artifact.OutcomeVerifierError || r.Passed || r.Reward != nil || !r.Metrics.Error || !strings.Contains(r.Error, says) {
			t.Errorf("%s: %s reward %s %q, want a verifier_error saying %q", task, r.Outcome, show(r.Reward), r.Error, says)
		}
	}
	failed := func(task string) artifact.Result {
		t.Helper()
		r := rows[task]
		if r.Outcome != artifact.OutcomeFailed || r.Passed || r.Reward == nil || *r.Reward != 0 {
			t.Errorf("%s: %s reward %s (%s), want failed with reward 0", task, r.Outcome, show(r.Reward), r.Error)
		}
		return r
	}

	// Hole 1: the planted writer is stopped before the reward is read.
	r := failed("planted-sum")
	if n := r.Metrics.VerifierLeftoverProcesses; n == nil || *n < 1 {
		t.Errorf("planted-sum: leftover processes %s, want the planted writer counted", show(n))
	}
	if n := rows["reward-hex"].Metrics.VerifierLeftoverProcesses; n == nil || *n != 0 {
		t.Errorf("reward-hex: leftover processes %s, want 0 for a test that leaves none", show(n))
	}

	// Hole 2: nothing is resolved on the host.
	hostName, _ := os.Hostname()
	verifierError("link-hostname", `symlink to "/etc/hostname"`)
	verifierError("link-host-reward", "symlink to")
	verifierError("reward-device", "character device")
	verifierError("reward-oversize", "over the cap of 65536")
	for task, r := range rows {
		if hostName != "" && strings.Contains(r.Error, hostName) {
			t.Errorf("%s: the host's hostname is in the row: %q", task, r.Error)
		}
	}
	// Links in copied-out directories are kept as links.
	cell := rows["link-host-reward"].OutputDir
	if got, err := os.Readlink(filepath.Join(cell, "logs", "verifier", "reward.txt")); err != nil || got != hostReward {
		t.Errorf("link-host-reward: logs/verifier/reward.txt on the host: %q %v, want the link kept as a link", got, err)
	}
	if got, err := os.Readlink(filepath.Join(rows["metrics-zero"].OutputDir, "agent-output", "metrics.json")); err != nil || got != "/dev/zero" {
		t.Errorf("metrics-zero: agent-output/metrics.json on the host: %q %v, want the link kept", got, err)
	}
	for _, task := range []string{"metrics-zero", "metrics-host"} {
		r := failed(task)
		if e, _ := r.Metrics.AgentReported["error"].(string); len(r.Metrics.AgentReported) != 1 || !strings.Contains(e, "metrics.json ignored") || !strings.Contains(e, "symlink") {
			t.Errorf("%s: agent_reported %v, want only the reason it was ignored", task, r.Metrics.AgentReported)
		}
		if r.Metrics.PromptTokens != nil {
			t.Errorf("%s: prompt tokens %d from a linked metrics.json", task, *r.Metrics.PromptTokens)
		}
	}
	js, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), secret) {
		t.Error("the host file linked as metrics.json is in the artifact")
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}

	// Holes 3 and 4: one plain decimal number, -0 stored as 0.
	verifierError("reward-trailing", "extra data")
	verifierError("reward-hex", "not a plain decimal")
	failed("reward-negzero")
	raw, err := os.ReadFile(filepath.Join(out, "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			Task    string                     `json:"task"`
			Reward  json.RawMessage            `json:"reward"`
			Rewards map[string]json.RawMessage `json:"rewards"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Results {
		if r.Task == "reward-negzero" && (string(r.Reward) != "0" || string(r.Rewards["reward"]) != "0") {
			t.Errorf("reward-negzero stored as reward %s, rewards %s; want 0", r.Reward, r.Rewards["reward"])
		}
	}

	// Hole 7: graders and logs are staged fresh: the real reward.
	failed("fresh-hook")
	verifierError("fresh-logs", "neither")
	failed("fresh-conftest")
}

// show prints a pointer's value, or "none".
func show[T any](p *T) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

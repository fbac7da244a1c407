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
agent-daemon)
  # A daemon in its own session that would mark the task solved once the
  # verifier has staged its tests.
  setsid nohup sh -c 'while :; do [ -d /tests ] && touch /app/solved; sleep 0.01; done' >/dev/null 2>&1 < /dev/null &
  echo planted ;;
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
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())

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
		// An agent's daemon does not live into the verifier.
		threatTask("agent-daemon", "debian:bookworm-slim", "",
			"mkdir -p /logs/verifier\nfor i in $(seq 50); do [ -f /app/solved ] && break; sleep 0.01; done\n[ -f /app/solved ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n", nil),
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
	// The artifact as written, for what typed decoding would hide (-0).
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
	hostName, _ := os.Hostname()
	verifierError := func(says string) func(*testing.T, artifact.Result) {
		return func(t *testing.T, r artifact.Result) {
			if r.Outcome != artifact.OutcomeVerifierError || r.Passed || r.Reward != nil || !r.Metrics.Error || !strings.Contains(r.Error, says) {
				t.Errorf("%s reward %s %q, want a verifier_error saying %q", r.Outcome, show(r.Reward), r.Error, says)
			}
		}
	}
	failed := func(t *testing.T, r artifact.Result) {
		if r.Outcome != artifact.OutcomeFailed || r.Passed || r.Reward == nil || *r.Reward != 0 {
			t.Errorf("%s reward %s (%s), want failed with reward 0", r.Outcome, show(r.Reward), r.Error)
		}
	}
	ignoredMetrics := func(t *testing.T, r artifact.Result) {
		failed(t, r)
		// Only the reason it was ignored, and proctor's own label that the
		// agent reported nothing (metrics_json: not reported by harness).
		e, _ := r.Metrics.AgentReported["error"].(string)
		label, labelled := r.Metrics.AgentReported["metrics_json"]
		want := 1
		if labelled {
			want = 2
		}
		if len(r.Metrics.AgentReported) != want || (labelled && label != "not reported by harness") || !strings.Contains(e, "metrics.json ignored") || !strings.Contains(e, "symlink") {
			t.Errorf("agent_reported %v, want only the reason it was ignored", r.Metrics.AgentReported)
		}
		if r.Metrics.PromptTokens != nil {
			t.Errorf("prompt tokens %d from a linked metrics.json", *r.Metrics.PromptTokens)
		}
	}
	checks := map[string]func(*testing.T, artifact.Result){
		// Hole 1: the planted writer is stopped before the reward is read.
		"planted-sum": func(t *testing.T, r artifact.Result) {
			failed(t, r)
			if n := r.Metrics.VerifierLeftoverProcesses; n == nil || *n < 1 {
				t.Errorf("leftover processes %s, want the planted writer counted", show(n))
			}
		},
		// The agent's own processes are killed before the verifier starts.
		"agent-daemon": failed,
		// Hole 2: nothing is resolved on the host.
		"link-hostname": verifierError(`symlink to "/etc/hostname"`),
		"link-host-reward": func(t *testing.T, r artifact.Result) {
			verifierError("symlink to")(t, r)
			// Kept in the cell's logs as a link, not followed.
			if got, err := os.Readlink(filepath.Join(r.OutputDir, "logs", "verifier", "reward.txt")); err != nil || got != hostReward {
				t.Errorf("logs/verifier/reward.txt on the host: %q %v, want the link kept as a link", got, err)
			}
		},
		"reward-device":   verifierError("character device"),
		"reward-oversize": verifierError("over the cap of 65536"),
		"metrics-zero": func(t *testing.T, r artifact.Result) {
			ignoredMetrics(t, r)
			if got, err := os.Readlink(filepath.Join(r.OutputDir, "agent-output", "metrics.json")); err != nil || got != "/dev/zero" {
				t.Errorf("agent-output/metrics.json on the host: %q %v, want the link kept", got, err)
			}
		},
		"metrics-host": func(t *testing.T, r artifact.Result) {
			ignoredMetrics(t, r)
			if strings.Contains(string(raw), secret) {
				t.Error("the host file linked as metrics.json is in the artifact")
			}
		},
		// Holes 3 and 4: one plain decimal number, -0 stored as 0.
		"reward-trailing": verifierError("extra data"),
		"reward-hex": func(t *testing.T, r artifact.Result) {
			verifierError("not a plain decimal")(t, r)
			if n := r.Metrics.VerifierLeftoverProcesses; n == nil || *n != 0 {
				t.Errorf("leftover processes %s, want 0 for a test that leaves none", show(n))
			}
		},
		"reward-negzero": func(t *testing.T, r artifact.Result) {
			failed(t, r)
			for _, d := range doc.Results {
				if d.Task == r.Task && (string(d.Reward) != "0" || string(d.Rewards["reward"]) != "0") {
					t.Errorf("stored as reward %s, rewards %s; want 0", d.Reward, d.Rewards["reward"])
				}
			}
		},
		// Hole 7: graders and logs are staged fresh: the real reward.
		"fresh-hook":     failed,
		"fresh-logs":     verifierError("neither"),
		"fresh-conftest": failed,
	}
	if len(rows) != len(checks) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(checks), rows)
	}
	for task, check := range checks {
		t.Run(task, func(t *testing.T) {
			r := rows[task]
			if !strings.HasPrefix(task, "reward-") && task != "link-hostname" && !strings.Contains(r.StdoutTail, "planted") {
				t.Errorf("the attack was not played: %+v", r)
			}
			if hostName != "" && strings.Contains(r.Error, hostName) {
				t.Errorf("the host's hostname is in the row: %q", r.Error)
			}
			check(t, r)
		})
	}
	// However the agent ended its cells, the run left nothing behind.
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

// show prints a pointer's value, or "none".
func show[T any](p *T) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

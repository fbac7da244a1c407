package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/providers"
)

// costCapScript answers each cell's one call with usage priced at about
// $0.45 (claude-sonnet-4-5).
const costCapScript = `
model: claude-sonnet-4-5
after: repeat
replies:
  - {text: "Done.", usage: {input_tokens: 100000, output_tokens: 10000}}
`

// costCapAgent calls the model once through the gateway, writes the
// answer the verifier wants and reports nothing of its own: the only cost
// the run can know is the one the gateway observes.
var costCapAgent = map[string]string{
	"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\nproviders = [\"anthropic\"]\n",
	"agent.sh": `#!/bin/bash
python3 - <<'PY'
import json, os, urllib.request
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", method="POST",
    data=json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "CASE-CAP"}]}).encode(),
    headers={"content-type": "application/json", "x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
PY
echo hello > /app/out.txt
`,
}

// TestCostCapFromTheGateway: cells whose agent calls the scripted model
// through the model gateway (priced usage, about $0.45 a cell) and
// reports no cost of its own trip `--max-cost-usd 1` on the observed
// cost: the run pauses by its cap, naming the observed sum of the cells
// done ($1.35 after the third), and no more than one cell beyond those
// the cap allowed has started a solve (the model counts them); a cancel
// from another process then ends the run, its artifact equal to a
// replay, with the solved cells passed and the others cancelled.
func TestCostCapFromTheGateway(t *testing.T) {
	// proctor as processes on a store of its own, the environment untouched.
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	start := time.Now()
	home := t.TempDir()
	net := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, net, "llm.cap.test", costCapScript)
	bin := testutil.ProctorBinary(t)
	env := append(os.Environ(), "PROCTOR_HOME="+home,
		"ANTHROPIC_BASE_URL="+model.BaseURL, "ANTHROPIC_API_KEY="+claudeTestKey,
		harness.ProviderPrivateEnv+"=1", EnvUpstreamCA+"="+model.CAFile,
		EnvProxyBinary+"="+bin, EnvEgressNetwork+"="+net)

	root := t.TempDir()
	writeFiles(t, filepath.Join(root, "greet"), map[string]string{
		"task.toml": "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 120.0\n" +
			"[environment]\ndocker_image = \"python:3.11-slim\"\nworkdir = \"/app\"\n",
		"instruction.md":    "Write hello into /app/out.txt.\n",
		"tests/test.sh":     "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
	})
	agentDir := filepath.Join(t.TempDir(), "capper")
	writeFiles(t, agentDir, costCapAgent)
	out := t.TempDir()
	js := filepath.Join(out, "a.json")
	cmd := exec.Command(bin, "tasks", "run", "--tasks-root", root, "--tasks", "greet", "--harnesses", "agent:"+agentDir,
		"--repeats", "6", "--concurrency", "1", "--max-cost-usd", "1", "--output-dir", out, "--out-json", js)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer interrupt(cmd)
	var progress testutil.SyncBuffer
	runIDc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			progress.Write([]byte(sc.Text() + "\n"))
			if m := runIDRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case runIDc <- m[1]:
				default:
				}
			}
		}
	}()
	var runID string
	defer func() {
		if t.Failed() && runID != "" {
			logs, _ := filepath.Glob(filepath.Join(out, runID, "*", "*", "*", "*", "run.log"))
			for _, f := range logs {
				b, _ := os.ReadFile(f)
				t.Logf("%s:\n%s", f, b)
			}
		}
	}()
	select {
	case runID = <-runIDc:
	case <-time.After(3 * time.Minute):
		t.Fatalf("no run id on stderr:\n%s", progress.String())
	}
	proctor := func(args ...string) string {
		t.Helper()
		c := exec.Command(bin, args...)
		c.Env = env
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("proctor %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	// The run pauses by its cap; once it has, no solve begins any more
	// (a cell prepared ahead is held before its solve, "running" with its
	// sandbox started): it has settled once every cell that called the
	// model has its verdict.
	var rec struct {
		Control bus.ControlState `json:"control"`
		States  map[string]int   `json:"states"`
	}
	deadline := time.Now().Add(8 * time.Minute)
	for {
		if err := json.Unmarshal([]byte(proctor("runs", "show", runID, "--json")), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Control.Paused && rec.States["passed"] > 0 && rec.States["passed"] == len(model.Requests()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never paused by its cap and settled: %+v\n%s", rec, progress.String())
		}
		time.Sleep(time.Second) // polling the run index, not synchronising on time
	}
	t.Logf("paused at %.1f s: %s", time.Since(start).Seconds(), rec.Control.PausedWhy)
	price, why := providers.Prices().Cost("claude-sonnet-4-5", providers.Tokens{Input: 100000, Output: 10000})
	if price == nil {
		t.Fatalf("no price: %s", why)
	}
	per := *price
	cells := 0 // cells the cap allowed: the first whose cost reaches it
	for sum := 0.0; sum < 1; sum += per {
		cells++
	}
	if c := rec.Control; c.PausedBy != "cap" || c.PausedCap != "max_cost_usd" || !strings.Contains(c.PausedWhy, fmt.Sprintf("$%.4f", float64(cells)*per)) {
		t.Errorf("control %+v, want paused by cap max_cost_usd at $%.4f (%d cells of $%.4f observed)", c, float64(cells)*per, cells, per)
	}
	solved := len(model.Requests())
	if solved < cells || solved > cells+1 {
		t.Errorf("%d cells called the model, want %d (the cap) or %d (one more started before the pause)", solved, cells, cells+1)
	}
	proctor("runs", "cancel", runID, "--why", "over budget")
	if err := cmd.Wait(); err == nil {
		t.Errorf("tasks run of a cancelled run exited 0")
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatalf("artifact: %v\n%s", err, progress.String())
	}
	passed, cancelled := 0, 0
	for _, r := range a.Results {
		switch {
		case r.Outcome == artifact.OutcomePassed:
			passed++
			if u := r.Metrics.UsageObserved; u == nil || u.CostUSD == nil || math.Abs(*u.CostUSD-per) > 1e-9 {
				t.Errorf("row %s: usage_observed %+v, want the gateway's $%.4f", r.CellID, u, per)
			}
		case r.ErrorClass == artifact.ErrorCancelled:
			cancelled++
		default:
			t.Errorf("row %s: %s (%s) %s", r.CellID, r.Outcome, r.ErrorClass, r.Error)
		}
	}
	if passed != solved || passed+cancelled != 6 {
		t.Errorf("%d passed, %d cancelled; want %d passed (the cells that called the model), the rest cancelled", passed, cancelled, solved)
	}
	rc := exec.Command(bin, "replay", runID)
	rc.Env = env
	replayed, err := rc.Output()
	if err != nil {
		t.Fatal(err)
	}
	if written, _ := os.ReadFile(js); strings.TrimSpace(string(replayed)) != strings.TrimSpace(string(written)) {
		t.Errorf("replay differs from the artifact")
	}
	if c, n := leftovers(t, cli, runID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, runID)
	}
	t.Logf("done at %.1f s", time.Since(start).Seconds())
}

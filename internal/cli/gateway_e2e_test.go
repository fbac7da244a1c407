package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/llmtest"
	"github.com/proctor-eval/proctor/pkg/providers"
)

// gatewayScript answers the gateway's Claude task: a reply of a text and
// two tool_use blocks (the CLI's stream-json repeats that message's usage
// on the line of each block), then a text.
const gatewayScript = `
model: claude-sonnet-4-5
cases:
  - when: "CASE-GW"
    replies:
      - text: "Let me write it."
        tool_use:
          - {name: Bash, input: {command: "echo hello > /app/out.txt"}}
          - {name: Bash, input: {command: "cat /app/out.txt"}}
        usage: {input_tokens: 1000, output_tokens: 50, cache_read_input_tokens: 2000, cache_creation_input_tokens: 300}
      - text: "Done."
        usage: {input_tokens: 1100, output_tokens: 20, cache_read_input_tokens: 2300, cache_creation_input_tokens: 0}
replies:
  - {text: "No.", usage: {input_tokens: 7, output_tokens: 1}}
`

// TestClaudeThroughTheGateway runs the real Claude CLI (docker-claude)
// with its egress proxy as the model gateway, the scripted model served
// over HTTPS under a name on an internal network the test made (the proxy
// verifies it against the test's CA, given as PROCTOR_UPSTREAM_CA): the
// CLI trusts the gateway through NODE_EXTRA_CA_CERTS, the model gets the
// real key while the CLI held a placeholder, the cell's usage_observed is
// exactly the scripted usage of the requests the model answered while the
// CLI's stream repeats a message's usage on each content block, the arm
// is costed from the observed figures, and no stored file holds the key.
func TestClaudeThroughTheGateway(t *testing.T) {
	t.Parallel()
	cli := claudeSetup(t)
	net := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, net, "llm.gateway.test", gatewayScript)
	setenv(t, "ANTHROPIC_BASE_URL", model.BaseURL)
	setenv(t, "ANTHROPIC_API_KEY", claudeTestKey)
	setenv(t, harness.ProviderPrivateEnv, "1")
	setenv(t, EnvUpstreamCA, model.CAFile)
	setenv(t, EnvProxyBinary, testutil.ProctorBinary(t))
	setenv(t, EnvEgressNetwork, net)
	setenv(t, harness.ClaudeBinEnv, testutil.Claude(t))
	root := t.TempDir()
	claudeTask(t, root, "greet", "CASE-GW", 300)
	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude", "--agent-grace", "2")
	r := byCell(a)["greet docker-claude"]
	m := r.Metrics
	if r.Outcome != "passed" {
		t.Fatalf("outcome %s (%s): %s\n%s", r.Outcome, r.Error, r.StdoutTail, out)
	}
	if m.Isolation["gateway"] != "intercept" {
		t.Errorf("isolation %v", m.Isolation)
	}
	// What the model answered, from its own record: every request carried
	// the real key, and the expected figures are the script's usage of
	// each turn asked.
	s, err := llmtest.ParseScript([]byte(gatewayScript))
	if err != nil {
		t.Fatal(err)
	}
	reqs := model.Requests()
	var want providers.Tokens
	for _, q := range reqs {
		if q.APIKey != claudeTestKey {
			t.Errorf("%s reached the model with %q", q.Path, q.APIKey)
		}
		if q.Path != "/v1/messages" {
			continue
		}
		u := s.Cases[0].Replies[min(q.Turn, 1)].Usage
		if !strings.Contains(string(q.Body), "CASE-GW") {
			u = s.Replies[0].Usage
		}
		want.Input += int64(u.InputTokens)
		want.Output += int64(u.OutputTokens)
		want.CacheRead += int64(u.CacheReadInputTokens)
		want.CacheWrite += int64(u.CacheCreationInputTokens)
	}
	u := m.UsageObserved
	if u == nil || u.Requests != len(reqs) || u.InputTokens != want.Input || u.OutputTokens != want.Output ||
		u.CacheReadTokens != want.CacheRead || u.CacheWriteTokens != want.CacheWrite || want.Input < 2100 {
		t.Fatalf("usage_observed %+v, want %+v over %d requests", u, want, len(reqs))
	}
	cost, _ := providers.Prices().Cost("claude-sonnet-4-5", want)
	if u.CostUSD == nil || *u.CostUSD != *cost || a.Summary.PerHarness["docker-claude"].Cost.Source != "observed" {
		t.Errorf("observed cost %v, want %v; arm cost %+v", u.CostUSD, *cost, a.Summary.PerHarness["docker-claude"].Cost)
	}
	// The CLI's stream: the first message's usage on the line of each of
	// its three content blocks, so summing the lines over-counts its input.
	f, err := os.Open(filepath.Join(r.OutputDir, "claude.stream.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	perMessage := map[string]int{}
	var naiveInput int64
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l struct {
			Type    string
			Message struct {
				ID    string
				Usage struct {
					InputTokens int64 `json:"input_tokens"`
				}
			}
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == "assistant" {
			perMessage[l.Message.ID]++
			naiveInput += l.Message.Usage.InputTokens
		}
	}
	repeated := false
	for _, n := range perMessage {
		repeated = repeated || n >= 3
	}
	if !repeated || naiveInput <= want.Input {
		t.Errorf("the stream does not repeat a message's usage per block (lines per message %v, summed input %d vs %d)", perMessage, naiveInput, want.Input)
	}
	t.Logf("observed %+v; the agent reported prompt=%v completion=%v (differs: %v); summing the stream's lines gives input %d",
		u, deref(m.PromptTokens), deref(m.CompletionTokens), deref(u.ReportedDiffers), naiveInput)
	calls, err := os.ReadFile(filepath.Join(r.OutputDir, "model_calls.jsonl"))
	if err != nil || strings.Count(string(calls), "\n") != len(reqs) {
		t.Errorf("model_calls.jsonl: %v\n%s", err, calls)
	}
	// The seed's names: solver.jsonl is the stream (claude.stream.jsonl a
	// link to it), solver.json the last result event, prompt.txt the
	// prompt, work/ the working tree; the tokens are modelUsage's.
	if l, err := os.Readlink(filepath.Join(r.OutputDir, "claude.stream.jsonl")); err != nil || l != "solver.jsonl" {
		t.Errorf("claude.stream.jsonl -> %q %v, want a link to solver.jsonl", l, err)
	}
	var res map[string]any
	if b, err := os.ReadFile(filepath.Join(r.OutputDir, "solver.json")); err != nil || json.Unmarshal(b, &res) != nil || res["type"] != "result" || res["modelUsage"] == nil {
		t.Errorf("solver.json: %v %v", res, err)
	}
	if p, err := os.ReadFile(filepath.Join(r.OutputDir, "prompt.txt")); err != nil || !strings.Contains(string(p), "CASE-GW") {
		t.Errorf("prompt.txt: %q %v", p, err)
	}
	if m.WorkTree == nil || m.WorkTree.Error != "" || m.WorkTree.Dirs < 1 {
		t.Errorf("work_tree %+v", m.WorkTree)
	}
	if _, err := os.Stat(filepath.Join(r.OutputDir, "work")); err != nil {
		t.Error(err)
	}
	if m.AgentReported["session_usage"] == nil || u.ReportedDiffers == nil || *u.ReportedDiffers {
		t.Errorf("the tokens summed over modelUsage differ from the observed: prompt %v completion %v, session %v, observed %+v",
			deref(m.PromptTokens), deref(m.CompletionTokens), m.AgentReported["session_usage"], u)
	}
	noCredentialStored(t, filepath.Dir(filepath.Dir(r.OutputDir)))

	// --no-intercept: today's tunnel. The CLI verifies the model itself
	// (it does not trust the test's CA, so it cannot reach it), nothing is
	// observed and the credential went into the sandbox's env file.
	a, _ = runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude", "--agent-grace", "2", "--no-intercept")
	r = byCell(a)["greet docker-claude"]
	if r.Metrics.UsageObserved != nil || r.Metrics.Isolation["gateway"] != nil || len(model.Requests()) != len(reqs) {
		t.Errorf("--no-intercept: outcome %s, usage_observed %+v, isolation %v, %d requests", r.Outcome, r.Metrics.UsageObserved, r.Metrics.Isolation, len(model.Requests())-len(reqs))
	}
}

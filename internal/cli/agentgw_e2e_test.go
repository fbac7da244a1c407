package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/llmtest"
	"github.com/proctor-eval/proctor/pkg/providers"
)

// agentGatewayScript answers the model example agent's task by a tool
// call that writes the answer, then a text; anything else gets "No.".
const agentGatewayScript = `
model: claude-sonnet-4-5
cases:
  - when: "CASE-AGW"
    replies:
      - text: "Writing it."
        tool_use: [{name: bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 500, output_tokens: 40, cache_read_input_tokens: 100, cache_creation_input_tokens: 20}
      - text: "Done."
        usage: {input_tokens: 600, output_tokens: 10}
replies:
  - {text: "No.", usage: {input_tokens: 7, output_tokens: 1}}
`

// keyHunter is an agent that declares the model, then looks for the key everywhere it
// can read (its environment, every process's environ and command line,
// its HOME with the env file it was started from, /agent-output, /tmp,
// the proxy's answer to a direct request), leaves what it found in the
// files proctor copies out and on stdout, calls the model with what it
// holds, and over-reports its tokens.
var keyHunter = map[string]string{
	"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\nproviders = [\"anthropic\"]\n",
	"agent.sh": `#!/bin/bash
dump=/agent-output/dump.txt
{
  echo "== env"; env
  for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; tr '\0' '\n' < "$f"; done
  echo "== home"; ls -la "$HOME"; cat "$HOME"/.provider.env "$HOME"/.* 2>&1
  echo "== files"; grep -rasI . /agent-output /tmp /opt/proctor 2>/dev/null | grep -v "^$dump" | head -2000
  echo "== proxy"; python3 -c 'import os,urllib.request as u
try: print(u.urlopen(os.environ["HTTP_PROXY"], timeout=5).read()[:2000])
except Exception as e: print(e)'
} > "$dump" 2>&1
mkdir -p /logs/agent && cp "$dump" /logs/agent/dump.txt && cp "$dump" ./dump.txt
cat "$dump"
python3 - <<'PY'
import json, os, urllib.request
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", method="POST",
    data=json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"content-type": "application/json", "x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
PY
echo '{"inputTokens": 99999, "outputTokens": 5, "llmCallCount": 1}' > "$AGENT_METRICS_FILE"
`,
}

// TestAgentThroughTheGateway runs two agent:<dir> agents that declare
// providers = ["anthropic"] against the scripted model served over HTTPS
// under a name on an internal network the test made: the model example
// agent (Python's standard library, Archal-style) solves its task through
// the gateway on a public task and on a no-network one (the model is all
// either reaches; a run of its own), proctor counts its tokens from the gateway and they
// equal the scripted usage, and the hostile agent that hunts the key in
// its environment, every process's environ, its files and the proxy finds
// only its placeholder, while every request reached the model with the
// real key and no stored file holds it. Its over-reported tokens are
// flagged against the observed ones.
func TestAgentThroughTheGateway(t *testing.T) {
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	net := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, net, "llm.agent.test", agentGatewayScript)
	t.Setenv("ANTHROPIC_BASE_URL", model.BaseURL)
	t.Setenv("ANTHROPIC_API_KEY", claudeTestKey)
	t.Setenv("OPENAI_API_KEY", "sk-openai-not-declared-7c6b5a")
	t.Setenv(harness.ProviderPrivateEnv, "1")
	t.Setenv(EnvUpstreamCA, model.CAFile)
	t.Setenv(EnvProxyBinary, testutil.ProctorBinary(t))
	t.Setenv(EnvEgressNetwork, net)

	root := t.TempDir()
	for name, policy := range map[string]string{"greet": "", "greet-offline": "allow_internet = false\n"} {
		writeFiles(t, filepath.Join(root, name), map[string]string{
			"task.toml": "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 120.0\n" +
				"[environment]\ndocker_image = \"python:3.11-slim\"\nworkdir = \"/app\"\n" + policy,
			"instruction.md":    "CASE-AGW Write hello into /app/out.txt.\n",
			"tests/test.sh":     "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
			"solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
		})
	}
	hostileDir := filepath.Join(t.TempDir(), "hostile")
	writeFiles(t, hostileDir, keyHunter)
	good, hostile := "agent:"+abs(t, "../../examples/agents/model"), "agent:"+hostileDir
	// The model agent on both tasks, the key hunter on the public one.
	arts, outs := runMainsAtOnce(t,
		[]string{"tasks", "run", "--tasks-root", root, "--tasks", "greet", "--harnesses", good + "," + hostile,
			"--baseline-harness", good, "--agent-grace", "2", "--retries", "1"},
		[]string{"tasks", "run", "--tasks-root", root, "--tasks", "greet-offline", "--harnesses", good, "--agent-grace", "2", "--retries", "1"})
	a, out, a2, out2 := arts[0], outs[0], arts[1], outs[1]
	rows := byCell(a)
	for k, r := range byCell(a2) {
		rows[k] = r
	}

	s, err := llmtest.ParseScript([]byte(agentGatewayScript))
	if err != nil {
		t.Fatal(err)
	}
	reqs := model.Requests()
	if len(reqs) != 5 {
		t.Errorf("the model got %d requests, want 2 per solving cell and 1 of the key hunter", len(reqs))
	}
	for _, q := range reqs {
		if q.APIKey != claudeTestKey {
			t.Errorf("%s reached the model with %q, not the real key", q.Path, q.APIKey)
		}
	}
	var want providers.Tokens
	for _, r := range s.Cases[0].Replies {
		want.Input += int64(r.Usage.InputTokens)
		want.Output += int64(r.Usage.OutputTokens)
		want.CacheRead += int64(r.Usage.CacheReadInputTokens)
		want.CacheWrite += int64(r.Usage.CacheCreationInputTokens)
	}
	cost, _ := providers.Prices().Cost("claude-sonnet-4-5", want)
	for _, task := range []string{"greet", "greet-offline"} {
		r := rows[task+" "+good]
		u := r.Metrics.UsageObserved
		if r.Outcome != "passed" || r.Metrics.Isolation["gateway"] != "intercept" {
			t.Errorf("%s: outcome %s (%s) isolation %v: %s", task, r.Outcome, r.Error, r.Metrics.Isolation, r.StdoutTail)
			continue
		}
		if u == nil || u.Requests != 2 || u.InputTokens != want.Input || u.OutputTokens != want.Output ||
			u.CacheReadTokens != want.CacheRead || u.CacheWriteTokens != want.CacheWrite {
			t.Errorf("%s: usage_observed %+v, want %+v over 2 requests", task, u, want)
		} else if u.CostUSD == nil || *u.CostUSD != *cost || u.ReportedDiffers == nil || *u.ReportedDiffers {
			t.Errorf("%s: observed cost %v (want %v), reported differs %v (agent reported %v)", task, deref(u.CostUSD), *cost, deref(u.ReportedDiffers), r.Metrics.AgentReported)
		}
	}
	if c := a.Summary.PerHarness[good].Cost; c.Source != "observed" {
		t.Errorf("the model agent's arm is costed from %q", c.Source)
	}

	for _, task := range []string{"greet"} {
		r := rows[task+" "+hostile]
		u := r.Metrics.UsageObserved
		if u == nil || u.Requests != 1 || u.InputTokens != 7 || u.ReportedDiffers == nil || !*u.ReportedDiffers {
			t.Errorf("%s hostile: usage_observed %+v (agent reported %v)", task, u, r.Metrics.AgentReported)
		}
		if !strings.Contains(r.StdoutTail, `"text":"No."`) {
			t.Errorf("%s hostile: the model's answer is not in its stdout: %s", task, r.StdoutTail)
		}
		dump := findFile(t, r.OutputDir, "dump.txt")
		for _, w := range []string{"ANTHROPIC_API_KEY=" + providers.PlaceholderPrefix, "SSL_CERT_FILE=", "== /proc/1/environ"} {
			if !strings.Contains(dump, w) {
				t.Errorf("%s hostile: its dump lacks %q (it did not look):\n%s", task, w, cellTail(dump))
			}
		}
		if strings.Contains(dump, "OPENAI_API_KEY") || strings.Contains(dump, "sk-openai-not-declared") {
			t.Errorf("%s hostile: a provider it did not declare reached it", task)
		}
	}
	noCredentialStored(t, out)
	noCredentialStored(t, out2)
	if b, err := os.ReadFile(filepath.Join(out, "a.json")); err != nil || strings.Contains(string(b), "sk-openai-not-declared") {
		t.Errorf("artifact: %v", err)
	}
}

// findFile returns the content of the first file named name under dir,
// failing when there is none.
func findFile(t *testing.T, dir, name string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name && found == "" {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no %s under %s", name, dir)
	}
	b, err := os.ReadFile(found)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func cellTail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// writeFiles writes files (relative path → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAgentPlatformCapAndRecorder: an agent still running at its
// platform cap (max_timeout_sec below the task's timeout) leaves its cell
// errored, class unavailable: the task never got its budget; the same
// agent without the cap reaches the task's own timeout, a scored
// solver_timeout. A third agent's shells are traced by the recorder:
// bash -c 'ls /; false' gives two Command events with null exit codes,
// sh -c started from a bash is recorded once, a command the agent printed
// itself as a Command line is not doubled, and the agent's own run
// command is not traced.
func TestAgentPlatformCapAndRecorder(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	home := t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	root := t.TempDir()
	writeFiles(t, filepath.Join(root, "wait"), map[string]string{
		"task.toml":         "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 15.0\n[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n",
		"instruction.md":    "Write hello into /app/out.txt.\n",
		"tests/test.sh":     "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
	})
	agents := t.TempDir()
	writeFiles(t, filepath.Join(agents, "capped"), map[string]string{"agent.toml": "run = \"echo started; sleep 60\"\nmax_timeout_sec = 2\n"})
	writeFiles(t, filepath.Join(agents, "patient"), map[string]string{"agent.toml": "run = \"echo started; sleep 60\"\n"})
	writeFiles(t, filepath.Join(agents, "recorded"), map[string]string{
		"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\n",
		"agent.sh": `bash -c 'ls /; false'
bash -c "sh -c 'true'"
echo '{"_tag":"Command","command":"echo printed"}'
bash -c 'echo printed'
echo hello > /app/out.txt
`,
	})
	capped, patient, recorded := "agent:"+filepath.Join(agents, "capped"), "agent:"+filepath.Join(agents, "patient"), "agent:"+filepath.Join(agents, "recorded")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", capped+","+patient+","+recorded,
		"--baseline-harness", patient, "--agent-grace", "1", "--retries", "1")
	rows := byCell(a)
	if r := rows["wait "+capped]; r.Outcome != "errored" || r.ErrorClass != "unavailable" || !strings.Contains(r.Error, "max_timeout_sec = 2s") {
		t.Errorf("capped: %s %s %q", r.Outcome, r.ErrorClass, r.Error)
	}
	if r := rows["wait "+patient]; r.Outcome != "solver_timeout" {
		t.Errorf("at the task's own timeout: %s %s %q", r.Outcome, r.ErrorClass, r.Error)
	}
	if r := rows["wait "+recorded]; r.Outcome != "passed" {
		t.Fatalf("recorded: %s %s %q", r.Outcome, r.ErrorClass, r.Error)
	}

	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got []string
	err = b.Read(context.Background(), []string{"proctor.run." + a.Run.ID + ".cell.*.Command"}, func(ev events.Envelope) error {
		var d events.CommandData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%s|%v", d.Command, d.ExitCode))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"echo printed|<nil>", "false|<nil>", "ls /|<nil>", "sh -c 'true'|<nil>"}
	if !slices.Equal(got, want) {
		t.Errorf("Command events %q, want %q", got, want)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math"
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

// agentGatewayScript answers the example agents' task in each API's
// shape by a tool call that writes the answer, then a text: the Python
// agent in Anthropic's, the Node agent in OpenAI's Responses and the bash
// agent in Gemini's, each case limited to its API; anything else (the key
// hunter) gets "No." from a model the price table does not know.
const agentGatewayScript = `
model: claude-sonnet-4-5
cases:
  - when: "CASE-AGW"
    api: openai.responses
    replies:
      - text: "Writing it."
        tool_use: [{name: bash, input: {command: "echo hello > /app/out.txt"}}]
        model: gpt-5-mini
        usage: {input_tokens: 300, output_tokens: 30, cache_read_input_tokens: 200}
      - text: "Done."
        model: gpt-5-mini
        usage: {input_tokens: 350, output_tokens: 5, cache_read_input_tokens: 250}
  - when: "CASE-AGW"
    api: gemini
    replies:
      - tool_use: [{name: bash, input: {command: "echo hello > /app/out.txt"}}]
        model: gemini-2.5-flash
        usage: {input_tokens: 400, output_tokens: 20}
      - text: "Done."
        model: gemini-2.5-flash
        usage: {input_tokens: 450, output_tokens: 4, cache_read_input_tokens: 50}
  - when: "CASE-AGW"
    api: anthropic
    replies:
      - text: "Writing it."
        tool_use: [{name: bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 500, output_tokens: 40, cache_read_input_tokens: 100, cache_creation_input_tokens: 20}
      - text: "Done."
        usage: {input_tokens: 600, output_tokens: 10}
replies:
  - {text: "No.", model: claude-unpriced-test, usage: {input_tokens: 7, output_tokens: 1}}
`

// The real keys of the test's providers: each must reach the model
// through the gateway and appear in nothing stored.
const (
	openaiTestKey = "sk-openai-real-4d3c2b1a0f"
	geminiTestKey = "AIzaGeminiReal9e8d7c6b5a"
)

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

// TestAgentThroughTheGateway runs agent:<dir> agents of every provider
// shape against the scripted model served over HTTPS under a name on an
// internal network the test made, in one run on a public task and a run
// on a no-network one (the model is all either reaches):
//   - the example agents solve the task through the gateway: the Python
//     one (Archal-style, providers = ["anthropic"]) on both tasks, the
//     Node one (Archal-style, https only, ["openai"], the Responses API
//     streamed) and the bash one (Anpord-style, curl, ["gemini"],
//     generateContent with the key in x-goog-api-key, then
//     streamGenerateContent?alt=sse with the key in ?key=) on the public
//     one; proctor counts their tokens from the gateway, they equal the
//     scripted usage, and the price table costs them;
//   - the hostile agent that hunts the key in its environment, every
//     process's environ, its files and the proxy finds only its
//     placeholder; its model is not in the price table, so its cost is
//     null with the reason, and its over-reported tokens are flagged;
//   - every request reached the model with its provider's real key, and
//     no key is in any file of the run's output or of proctor's home (the
//     event store included).
func TestAgentThroughTheGateway(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	tools := testutil.AgentToolsImage(t, cli)
	net := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, net, "llm.agent.test", agentGatewayScript)
	threeProvidersEnv(t, model, model.BaseURL+"/v1", net)

	root := t.TempDir()
	for name, env := range map[string]string{"greet": "docker_image = \"" + tools + "\"\n",
		"greet-offline": "docker_image = \"python:3.11-slim\"\nallow_internet = false\n"} {
		writeFiles(t, filepath.Join(root, name), map[string]string{
			"task.toml": "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 120.0\n" +
				"[environment]\nworkdir = \"/app\"\n" + env,
			"instruction.md":    "CASE-AGW Write hello into /app/out.txt.\n",
			"tests/test.sh":     "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
			"solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
		})
	}
	hostileDir := filepath.Join(t.TempDir(), "hostile")
	writeFiles(t, hostileDir, keyHunter)
	good, hostile := "agent:"+abs(t, "../../examples/agents/model"), "agent:"+hostileDir
	node, bash := "agent:"+abs(t, "../../examples/agents/model-node"), "agent:"+abs(t, "../../examples/agents/model-bash")
	// Every agent on the public task, the model agent on the offline one, both runs at once.
	arts, outs, homes := runMainsAtOnceHomes(t,
		[]string{"tasks", "run", "--tasks-root", root, "--tasks", "greet", "--harnesses", strings.Join([]string{good, hostile, node, bash}, ","),
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
	// Each API's requests, and the key each reached the model with.
	keyOf := map[string]string{"/v1/messages": claudeTestKey, "/v1/responses": openaiTestKey,
		"/v1beta/models/gemini-2.5-flash:generateContent": geminiTestKey, "/v1beta/models/gemini-2.5-flash:streamGenerateContent": geminiTestKey}
	perPath := map[string]int{}
	for _, q := range model.Requests() {
		perPath[q.Path]++
		if want, ok := keyOf[q.Path]; !ok || q.APIKey != want {
			t.Errorf("%s reached the model with %q, not its provider's real key", q.Path, q.APIKey)
		}
	}
	wantPaths := map[string]int{"/v1/messages": 5, "/v1/responses": 2,
		"/v1beta/models/gemini-2.5-flash:generateContent": 1, "/v1beta/models/gemini-2.5-flash:streamGenerateContent": 1}
	if !maps.Equal(perPath, wantPaths) {
		t.Errorf("the model's requests by path %v, want %v (2 per solving cell, 1 of the key hunter)", perPath, wantPaths)
	}
	caseOf := func(api string) llmtest.Case {
		for _, c := range s.Cases {
			if c.API == api {
				return c
			}
		}
		t.Fatalf("no case for %s", api)
		return llmtest.Case{}
	}
	type arm struct{ task, harness, api, model string }
	for _, w := range []arm{{"greet", good, "anthropic", "claude-sonnet-4-5"}, {"greet-offline", good, "anthropic", "claude-sonnet-4-5"},
		{"greet", node, "openai.responses", "gpt-5-mini"}, {"greet", bash, "gemini", "gemini-2.5-flash"}} {
		var want providers.Tokens
		for _, r := range caseOf(w.api).Replies {
			want.Input += int64(r.Usage.InputTokens)
			want.Output += int64(r.Usage.OutputTokens)
			want.CacheRead += int64(r.Usage.CacheReadInputTokens)
			want.CacheWrite += int64(r.Usage.CacheCreationInputTokens)
		}
		cost, _ := providers.Prices().Cost(w.model, want)
		r := rows[w.task+" "+w.harness]
		u := r.Metrics.UsageObserved
		name := w.task + " " + filepath.Base(w.harness)
		if r.Outcome != "passed" || r.Metrics.Isolation["gateway"] != "intercept" {
			t.Errorf("%s: outcome %s (%s) isolation %v: %s\nstderr: %s", name, r.Outcome, r.Error, r.Metrics.Isolation, r.StdoutTail, stderrOf(r.OutputDir))
			continue
		}
		if u == nil || u.Requests != 2 || u.InputTokens != want.Input || u.OutputTokens != want.Output ||
			u.CacheReadTokens != want.CacheRead || u.CacheWriteTokens != want.CacheWrite || !slices.Equal(u.Models, []string{w.model}) {
			t.Errorf("%s: usage_observed %+v, want %+v over 2 requests of %s", name, u, want, w.model)
		} else if cost == nil || u.CostUSD == nil || math.Abs(*u.CostUSD-*cost) > 1e-9 {
			t.Errorf("%s: observed cost %v, want %v from the price table (%s)", name, deref(u.CostUSD), deref(cost), u.CostNullReason)
		}
		if w.harness != bash && (u == nil || u.ReportedDiffers == nil || *u.ReportedDiffers) {
			t.Errorf("%s: the agent's own figures (%v) differ from the observed ones", name, r.Metrics.AgentReported)
		}
	}
	for _, h := range []string{good, node, bash} {
		if c := a.Summary.PerHarness[h].Cost; c.Source != "observed" {
			t.Errorf("the arm %s is costed from %q", filepath.Base(h), c.Source)
		}
	}

	r := rows["greet "+hostile]
	u := r.Metrics.UsageObserved
	if u == nil || u.Requests != 1 || u.InputTokens != 7 || u.ReportedDiffers == nil || !*u.ReportedDiffers {
		t.Errorf("hostile: usage_observed %+v (agent reported %v)", u, r.Metrics.AgentReported)
	} else if u.CostUSD != nil || !strings.Contains(u.CostNullReason, "claude-unpriced-test") {
		t.Errorf("hostile: a model the price table does not know costs %v (reason %q)", deref(u.CostUSD), u.CostNullReason)
	}
	if !strings.Contains(r.StdoutTail, `"text":"No."`) {
		t.Errorf("hostile: the model's answer is not in its stdout: %s", r.StdoutTail)
	}
	dump := findFile(t, r.OutputDir, "dump.txt")
	for _, w := range []string{"ANTHROPIC_API_KEY=" + providers.PlaceholderPrefix, "SSL_CERT_FILE=", "== /proc/1/environ"} {
		if !strings.Contains(dump, w) {
			t.Errorf("hostile: its dump lacks %q (it did not look):\n%s", w, cellTail(dump))
		}
	}
	for _, k := range []string{"OPENAI_API_KEY", "GEMINI_API_KEY", openaiTestKey, geminiTestKey} {
		if strings.Contains(dump, k) {
			t.Errorf("hostile: %s of a provider it did not declare reached it", k)
		}
	}
	noCredentialStored(t, out)
	noCredentialStored(t, out2)
	// The event store is read as it lies on disk: the Gemini agent's
	// ModelCall events (model names in plain text) are in the public
	// task's run's store, to be found.
	keys := []string{claudeTestKey, openaiTestKey, geminiTestKey}
	noKeyStored(t, keys, out, out2, homes[1])
	if seen := noKeyStored(t, keys, homes[0]); !seen["gemini-2.5-flash:streamGenerateContent"] {
		t.Errorf("no file of proctor's home names the Gemini agent's streamed call: the search for keys read no event it could find them in")
	}
}

// noKeyStored fails when a file under any of dirs holds one of keys (as
// is, or JSON-escaped), or when a dir holds no file. It reports which of
// the Gemini path names it saw, as a control that the files were read as
// stored.
func noKeyStored(t *testing.T, keys []string, dirs ...string) map[string]bool {
	t.Helper()
	var forms []string
	for _, k := range keys {
		esc, _ := json.Marshal(k)
		forms = append(forms, k, string(esc[1:len(esc)-1]))
	}
	seen := map[string]bool{}
	for _, dir := range dirs {
		n := 0
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			n++
			for _, f := range forms {
				if bytes.Contains(b, []byte(f)) {
					t.Errorf("%s holds a key (%q)", p, f)
				}
			}
			for _, c := range []string{"gemini-2.5-flash:streamGenerateContent"} {
				if bytes.Contains(b, []byte(c)) {
					seen[c] = true
				}
			}
			return nil
		})
		if n == 0 {
			t.Errorf("no file under %s", dir)
		}
	}
	return seen
}

// stderrOf is the agent.stderr.log of a cell's output directory, "" when
// there is none.
func stderrOf(dir string) string {
	var out string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "agent.stderr.log" && out == "" {
			b, _ := os.ReadFile(p)
			out = cellTail(string(b))
		}
		return nil
	})
	return out
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

// threeProvidersEnv gives t's command lines the Anthropic, OpenAI (at
// openaiBase) and Gemini base URLs of model with the tests' keys, the
// model's CA as the gateway's upstream CA, the static proctor as the
// proxy and net as the egress network.
func threeProvidersEnv(t *testing.T, model *testutil.ModelHost, openaiBase, net string) {
	t.Helper()
	setenv(t, "ANTHROPIC_BASE_URL", model.BaseURL)
	setenv(t, "ANTHROPIC_API_KEY", claudeTestKey)
	setenv(t, "OPENAI_BASE_URL", openaiBase)
	setenv(t, "OPENAI_API_KEY", openaiTestKey)
	setenv(t, "GOOGLE_GEMINI_BASE_URL", model.BaseURL)
	setenv(t, "GEMINI_API_KEY", geminiTestKey)
	setenv(t, harness.ProviderPrivateEnv, "1")
	setenv(t, EnvUpstreamCA, model.CAFile)
	setenv(t, EnvProxyBinary, testutil.ProctorBinary(t))
	setenv(t, EnvEgressNetwork, net)
}

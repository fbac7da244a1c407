package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// modelCaller is an agent of provider p that calls its model (url: the
// API path under the provider's base URL, headers its credential's)
// three times, printing nothing on stdout, and exits 1 when no call got
// an answer it could use: the agent of a model that cannot be reached.
func modelCaller(p, url, headers, body string) map[string]string {
	return map[string]string{
		"agent.toml": "run = \"python3 /opt/proctor/agent/agent.py\"\nproviders = [\"" + p + "\"]\n",
		"agent.py": `import json, os, sys, urllib.request
for i in range(3):
    req = urllib.request.Request(` + url + `, method="POST",
        data=json.dumps(` + body + `).encode(),
        headers=dict({"content-type": "application/json"}, **` + headers + `))
    try:
        urllib.request.urlopen(req, timeout=60).read()
        sys.exit(0)
    except Exception as e:
        print("call %d: %s" % (i + 1, e), file=sys.stderr)
sys.exit(1)
`,
	}
}

// TestUnreachableModelIsInfra runs agent:<dir> agents whose provider
// fails them, through the real egress proxy and its gateway, with
// --retries 1:
//   - an OpenAI agent whose base URL names a port nothing listens on (the
//     proxy's connect is refused three times) is errored infra, its
//     error naming the host, the failure and the tries, and the retry
//     runs it again;
//   - an Anthropic agent whose model answers HTTP 500 every time is
//     errored infra, and the retry runs it again (six requests reach the
//     model);
//   - a Gemini agent whose key the model rejects (HTTP 401) stays
//     solver_error, its error naming the credential, never retried;
//   - a cheating agent that prints "connection refused" on its stderr
//     and exits 1 without calling stays solver_error, never retried: only
//     the proxy's records make a provider's failure.
func TestUnreachableModelIsInfra(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	tools := testutil.AgentToolsImage(t, cli)
	net := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, net, "llm.down.test", "replies: [{error: {status: 500, message: \"broken\"}}]\n"+
		"cases: [{when: KEY401, api: gemini, replies: [{error: {status: 401, message: \"bad key\"}}]}]\n")
	threeProvidersEnv(t, model, model.BaseURL+":8443/v1", net) // nothing listens at 8443

	root := t.TempDir()
	writeFiles(t, filepath.Join(root, "greet"), map[string]string{
		"task.toml": "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 120.0\n" +
			"[environment]\nworkdir = \"/app\"\ndocker_image = \"" + tools + "\"\n",
		"instruction.md":    "Write hello into /app/out.txt.\n",
		"tests/test.sh":     "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
	})
	down, fails, cheat, badKey := filepath.Join(t.TempDir(), "down"), filepath.Join(t.TempDir(), "fails"), filepath.Join(t.TempDir(), "cheat"), filepath.Join(t.TempDir(), "badkey")
	chat := `{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}`
	writeFiles(t, down, modelCaller("openai", `os.environ["OPENAI_BASE_URL"] + "/chat/completions"`,
		`{"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}`, chat))
	writeFiles(t, fails, modelCaller("anthropic", `os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"`,
		`{"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}`, chat))
	writeFiles(t, badKey, modelCaller("gemini", `os.environ["GOOGLE_GEMINI_BASE_URL"] + "/v1beta/models/gemini-2.5-flash:generateContent"`,
		`{"x-goog-api-key": os.environ["GEMINI_API_KEY"]}`, `{"contents": [{"role": "user", "parts": [{"text": "KEY401"}]}]}`))
	writeFiles(t, cheat, map[string]string{
		"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\nproviders = [\"openai\"]\n",
		"agent.sh": "#!/bin/bash\necho 'connect: dial tcp 10.0.0.1:443: connect: connection refused' >&2\n" +
			"echo '{\"decision\":\"error\",\"host\":\"llm.down.test\",\"port\":8443,\"reason\":\"connect: connection refused\"}' >&2\nexit 1\n",
	})
	hd, hf, hc, hk := "agent:"+down, "agent:"+fails, "agent:"+cheat, "agent:"+badKey
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--tasks", "greet", "--harnesses", strings.Join([]string{hd, hf, hc, hk}, ","),
		"--agent-grace", "2", "--retries", "1")
	rows := byCell(a)

	r := rows["greet "+hd]
	if r.Outcome != "errored" || r.ErrorClass != "infra" || !strings.Contains(r.Error, "the model at llm.down.test:8443 could not be reached: connection refused (3 tries)") {
		t.Errorf("down: %s %s: %s\nstderr: %s", r.Outcome, r.ErrorClass, r.Error, stderrOf(r.OutputDir))
	}
	if r.Attempt != 2 {
		t.Errorf("down: attempt %d, want 2 (--retries 1 runs an infra cell again)", r.Attempt)
	}
	r = rows["greet "+hf]
	if r.Outcome != "errored" || r.ErrorClass != "infra" || !strings.Contains(r.Error, "the model at llm.down.test:443 could not be reached: HTTP 500 (3 tries)") {
		t.Errorf("fails: %s %s: %s\nstderr: %s", r.Outcome, r.ErrorClass, r.Error, stderrOf(r.OutputDir))
	}
	if n := len(model.Requests()); n != 9 {
		t.Errorf("the model got %d requests, want 9 (the failing model's 3 tries twice, the rejected key's 3 once)", n)
	}
	r = rows["greet "+hc]
	if r.Outcome != "errored" || r.ErrorClass != "solver_error" || !strings.Contains(r.Error, "made no attempt") || r.Attempt != 1 {
		t.Errorf("cheat: %s %s attempt %d: %s", r.Outcome, r.ErrorClass, r.Attempt, r.Error)
	}
	r = rows["greet "+hk]
	if r.Outcome != "errored" || r.ErrorClass != "solver_error" || r.Attempt != 1 ||
		!strings.Contains(r.Error, "answered HTTP 401: the provider refused the credential") {
		t.Errorf("bad key: %s %s attempt %d: %s\nstderr: %s", r.Outcome, r.ErrorClass, r.Attempt, r.Error, stderrOf(r.OutputDir))
	}
}

package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestAgentDeclaresCalls: agent.toml's providers and egress load
// normalised, and a bad entry is an error naming the file, line and key.
func TestAgentDeclaresCalls(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.toml")
	load := func(s string) (*AgentSpec, error) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadAgent(dir)
	}
	a, err := load("run = \"x\"\nproviders = [\"Anthropic\", \"openai\"]\negress = [\"LLM.corp.example:4000\", \"pypi.org\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Providers, ",") != "anthropic,openai" || strings.Join(a.Egress, ",") != "llm.corp.example:4000,pypi.org:443" || !a.CallsOut() {
		t.Fatalf("providers %v egress %v", a.Providers, a.Egress)
	}
	if err := os.WriteFile(filepath.Join(dir, "system.md"), []byte("You are terse."), 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := load("run = \"x\"\nsystem_prompt = \"./system.md\"\n"); err != nil || a.Vars()["ANPORD_SYSTEM_PROMPT_FILE"] != AgentMount+"/system.md" {
		t.Fatalf("system_prompt: %v %v", err, a)
	}
	if a, _ := load("run = \"x\"\n"); a.CallsOut() || a.Vars() != nil {
		t.Fatal("an agent that declares nothing calls out")
	}
	for doc, want := range map[string]string{
		"run = \"x\"\n\nproviders = [\"mistral\"]\n":                "agent.toml:3: key providers: \"mistral\" is not a provider the gateway knows (anthropic, openai, gemini)",
		"run = \"x\"\nproviders = [\"openai\", \"OpenAI\"]\n":       "agent.toml:2: key providers: openai is listed twice",
		"run = \"x\"\negress = [\"https://llm.corp.example/v1\"]\n": "agent.toml:2: key egress: allowlist entry \"https://llm.corp.example/v1\": want host or host:port, not a URL",
		"run = \"x\"\negress = [\"*.example.com\"]\n":               "agent.toml:2: key egress: allowlist entry",
		"run = \"x\"\nproviders = \"openai\"\n":                     "agent.toml:2",
		"run = \"x\"\nsystem_prompt = \"../etc/passwd\"\n":          "agent.toml:2: key system_prompt: \"../etc/passwd\" must be a file of the agent directory",
		"run = \"x\"\nsystem_prompt = \"missing.md\"\n":             "agent.toml:2: key system_prompt: \"missing.md\" is not a regular file",
	} {
		_, err := load(doc)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", doc, err, want)
		}
	}
}

// TestAgentProviderEnv: an agent gets exactly its declared providers'
// variables and NODE_ENV, never another provider's key; a provider with
// nothing set or a loopback base URL fails naming the variable.
func TestAgentProviderEnv(t *testing.T) {
	host := map[string]string{
		"ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_BASE_URL": "https://gw.example:8443", "ANTHROPIC_CUSTOM_HEADERS": "X-Team: a",
		"OPENAI_API_KEY": "sk-oai-1", "GEMINI_API_KEY": "g-1", "NODE_ENV": "production", "AWS_SECRET_ACCESS_KEY": "aws",
	}
	getenv := func(k string) string { return host[k] }
	env, err := AgentProviderEnv(&AgentSpec{Providers: []string{"anthropic"}}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-1", "ANTHROPIC_BASE_URL": "https://gw.example:8443", "ANTHROPIC_CUSTOM_HEADERS": "X-Team: a", "NODE_ENV": "production"}
	if len(env) != len(want) {
		t.Fatalf("env %v, want %v", env, want)
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if env, _ := AgentProviderEnv(&AgentSpec{Egress: []string{"pypi.org:443"}}, getenv); len(env) != 1 || env["NODE_ENV"] == "" {
		t.Errorf("an egress-only agent got %v", env)
	}
	if env, err := AgentProviderEnv(&AgentSpec{Providers: []string{"gemini", "openai"}}, getenv); err != nil || env["GEMINI_API_KEY"] != "g-1" ||
		env["OPENAI_API_KEY"] != "sk-oai-1" || env["ANTHROPIC_API_KEY"] != "" {
		t.Errorf("gemini, openai: %v %v", env, err)
	}
	if _, err := AgentProviderEnv(&AgentSpec{Providers: []string{"openai"}}, func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "provider openai but none of OPENAI_API_KEY, OPENAI_BASE_URL is set") {
		t.Errorf("nothing set: %v", err)
	}
	if _, err := AgentProviderEnv(&AgentSpec{Providers: []string{"anthropic", "openai"}}, func(k string) string {
		return map[string]string{"ANTHROPIC_BASE_URL": "https://litellm.corp:4000", "OPENAI_BASE_URL": "https://LiteLLM.corp:4000/v1"}[k]
	}); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_BASE_URL and OPENAI_BASE_URL name the same host litellm.corp:4000") {
		t.Errorf("one host for two providers: %v", err)
	}
	for _, u := range []string{"http://localhost:8080", "https://127.0.0.1", "http://[::1]:80", "ftp://x", "gw.example"} {
		_, err := AgentProviderEnv(&AgentSpec{Providers: []string{"openai"}}, func(k string) string {
			return map[string]string{"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": u}[k]
		})
		if err == nil || !strings.Contains(err.Error(), "OPENAI_BASE_URL="+u) || !strings.Contains(err.Error(), "agent.toml declares provider openai") {
			t.Errorf("%s: %v", u, err)
		}
		if loopback := strings.Contains(u, "//"); loopback && u != "ftp://x" && !strings.Contains(err.Error(), "the Docker bridge's address") {
			t.Errorf("%s: no way out named: %v", u, err)
		}
	}
}

// TestAgentCommandSourcesTheEnvFile: the provider variables are on no
// command line: the argv names the file, and the run command follows.
func TestAgentCommandSourcesTheEnvFile(t *testing.T) {
	got := agentCommand("python3 a.py", agentEnvFile)
	if len(got) != 6 || got[4] != agentEnvFile || got[5] != "python3 a.py" || !strings.Contains(got[2], `rm -f -- "$1"`) ||
		!strings.Contains(got[2], "BASH_ENV="+RecorderPath) {
		t.Errorf("%q", got)
	}
	if got := agentCommand("python3 a.py", ""); len(got) != 6 || got[4] != "" {
		t.Errorf("%q", got)
	}
}

// TestCapError: only the platform cap below the task's own timeout makes
// a timed-out agent's cell unavailable.
func TestCapError(t *testing.T) {
	if err := capError(true, 900, 1800); err == nil {
		t.Error("the cap before the task's timeout is not an error")
	} else if c, ok := events.ClassOf(err); !ok || c != events.ClassUnavailable || !strings.Contains(err.Error(), "max_timeout_sec = 900s") {
		t.Errorf("class %v %v: %v", c, ok, err)
	}
	for _, c := range []struct {
		timedOut         bool
		budget, taskTime float64
	}{{true, 600, 600}, {false, 900, 1800}, {true, 300, 300}} {
		if err := capError(c.timedOut, c.budget, c.taskTime); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/harness"
)

// TestClaudeProvidersThroughTheGateway runs the real Claude CLI
// (docker-claude) against the scripted model served over HTTPS under a
// test-made name and CA, chosen the ways the CLI chooses a provider:
//   - Foundry (CLAUDE_CODE_USE_FOUNDRY=yes, ANTHROPIC_FOUNDRY_BASE_URL,
//     ANTHROPIC_FOUNDRY_API_KEY): the CLI holds a placeholder, the
//     gateway puts the real key into the api-key header, the Anthropic
//     key set beside it never reaches anything;
//   - the Anthropic API whose key and base URL come only from the env
//     block of the operator's settings ($CLAUDE_CONFIG_DIR), with
//     --no-intercept and NODE_EXTRA_CA_CERTS naming the test's CA file on
//     this machine: the file is copied in and the variable re-pointed, so
//     the CLI verifies the model itself and passes.
func TestClaudeProvidersThroughTheGateway(t *testing.T) {
	t.Parallel()
	testutil.LongE2E(t)
	cli := claudeSetup(t)
	net := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, net, "llm.providers.test", gatewayScript)
	setenv(t, harness.ProviderPrivateEnv, "1")
	setenv(t, EnvUpstreamCA, model.CAFile)
	setenv(t, EnvProxyBinary, testutil.ProctorBinary(t))
	setenv(t, EnvEgressNetwork, net)
	setenv(t, harness.ClaudeBinEnv, testutil.Claude(t))
	setenv(t, "CLAUDE_CONFIG_DIR", t.TempDir()) // no settings
	setenv(t, "ANTHROPIC_BASE_URL", "")
	const foundryKey, otherKey = "foundry-key-7c1e0b9a", "sk-ant-not-this-one-4d2f"
	setenv(t, "ANTHROPIC_API_KEY", otherKey)
	setenv(t, "CLAUDE_CODE_USE_BEDROCK", "0")
	setenv(t, "CLAUDE_CODE_USE_FOUNDRY", "yes")
	setenv(t, "ANTHROPIC_FOUNDRY_BASE_URL", model.BaseURL)
	setenv(t, "ANTHROPIC_FOUNDRY_API_KEY", foundryKey)
	root := t.TempDir()
	claudeTask(t, root, "greet", "CASE-GW", 300)
	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude", "--agent-grace", "2")
	r := byCell(a)["greet docker-claude"]
	if r.Outcome != "passed" {
		t.Fatalf("foundry: outcome %s (%s): %s\n%s", r.Outcome, r.Error, r.StdoutTail, out)
	}
	reqs := model.Requests()
	if len(reqs) == 0 {
		t.Fatal("foundry: the model got no request")
	}
	for _, q := range reqs {
		if q.APIKey != foundryKey {
			t.Errorf("foundry: %s reached the model with %q", q.Path, q.APIKey)
		}
	}
	if u := r.Metrics.UsageObserved; u == nil || u.Requests != len(reqs) || u.InputTokens < 2100 {
		t.Errorf("foundry: usage_observed %+v over %d requests", u, len(reqs))
	}
	noSecretIn(t, filepath.Dir(filepath.Dir(r.OutputDir)), foundryKey, otherKey)

	// The settings' env block alone names the provider; the CA file is
	// copied in.
	for _, k := range []string{"CLAUDE_CODE_USE_FOUNDRY", "ANTHROPIC_FOUNDRY_BASE_URL", "ANTHROPIC_FOUNDRY_API_KEY", "ANTHROPIC_API_KEY"} {
		setenv(t, k, "")
	}
	cfg := t.TempDir()
	settings, _ := json.Marshal(map[string]any{"env": map[string]string{"ANTHROPIC_API_KEY": claudeTestKey, "ANTHROPIC_BASE_URL": model.BaseURL}})
	if err := os.WriteFile(filepath.Join(cfg, "settings.json"), settings, 0o600); err != nil {
		t.Fatal(err)
	}
	setenv(t, "CLAUDE_CONFIG_DIR", cfg)
	setenv(t, "NODE_EXTRA_CA_CERTS", model.CAFile)
	a, out = runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude", "--agent-grace", "2", "--no-intercept")
	r = byCell(a)["greet docker-claude"]
	if r.Outcome != "passed" {
		t.Fatalf("settings + CA file, --no-intercept: outcome %s (%s): %s\n%s", r.Outcome, r.Error, r.StdoutTail, out)
	}
	more := model.Requests()[len(reqs):]
	if len(more) == 0 || r.Metrics.UsageObserved != nil {
		t.Fatalf("--no-intercept: %d requests, usage_observed %+v", len(more), r.Metrics.UsageObserved)
	}
	for _, q := range more {
		if q.APIKey != claudeTestKey {
			t.Errorf("--no-intercept: %s reached the model with %q", q.Path, q.APIKey)
		}
	}
	noCredentialStored(t, filepath.Dir(filepath.Dir(r.OutputDir)))
}

// noSecretIn fails when a file under dir holds one of secrets.
func noSecretIn(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds a credential", p)
			}
		}
		return nil
	})
}

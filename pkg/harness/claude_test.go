package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

func TestClaudeProviderRefusesSetupsThatCannotWork(t *testing.T) {
	home := t.TempDir() // no settings file
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no credential":            {map[string]string{"ANTHROPIC_BASE_URL": "http://10.0.0.2:8080"}, "no provider credential"},
		"loopback ip":              {map[string]string{"ANTHROPIC_API_KEY": "k123", "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}, "loopback"},
		"localhost":                {map[string]string{"ANTHROPIC_API_KEY": "k123", "ANTHROPIC_BASE_URL": "http://localhost:8080"}, "loopback"},
		"ipv6 loopback":            {map[string]string{"ANTHROPIC_API_KEY": "k123", "ANTHROPIC_BASE_URL": "http://[::1]:8080"}, "loopback"},
		"not a url":                {map[string]string{"ANTHROPIC_API_KEY": "k123", "ANTHROPIC_BASE_URL": "model:8080"}, "not an http(s) URL"},
		"loopback upstream proxy":  {map[string]string{"ANTHROPIC_API_KEY": "k123", "https_proxy": "http://user:pw@127.0.0.1:3128"}, "https_proxy is a loopback address"},
		"localhost upstream proxy": {map[string]string{"ANTHROPIC_API_KEY": "k123", "HTTP_PROXY": "localhost:3128"}, "HTTP_PROXY is a loopback address"},
	} {
		c.env["HOME"] = home
		_, err := ClaudeProvider(c.env, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	pc, err := ClaudeProvider(map[string]string{"HOME": home, "ANTHROPIC_API_KEY": "k123", "ANTHROPIC_BASE_URL": "https://api.example.test", "PATH": "/x", "AWS_SECRET_ACCESS_KEY": "no"}, nil)
	if err != nil || len(pc.Env) != 2 || pc.Env["ANTHROPIC_API_KEY"] != "k123" {
		t.Fatalf("allowlist: %v %v", pc.Env, err)
	}
}

// TestClaudeProviderMergesTheSettingsEnv: the env block of
// $CLAUDE_CONFIG_DIR/settings.json (else ~/.claude/settings.json) is
// merged over proctor's environment through the same allowlist; a
// malformed one is logged and ignored.
func TestClaudeProviderMergesTheSettingsEnv(t *testing.T) {
	home, cfgDir := t.TempDir(), t.TempDir()
	write := func(dir, body string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(home, ".claude"), `{"env":{"CLAUDE_CODE_USE_BEDROCK":"1","AWS_REGION":"eu-west-1","AWS_BEARER_TOKEN_BEDROCK":"bedrock-tok","SOMETHING_ELSE":"x"}}`)
	var warned []string
	warn := func(m string) { warned = append(warned, m) }
	pc, err := ClaudeProvider(map[string]string{"HOME": home, "ANTHROPIC_API_KEY": "k123", "AWS_REGION": "us-west-2"}, warn)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Provider != "bedrock" || pc.Env["AWS_REGION"] != "eu-west-1" || pc.Env["SOMETHING_ELSE"] != "" || pc.Env["ANTHROPIC_API_KEY"] != "" {
		t.Errorf("settings under HOME: provider %s env %v", pc.Provider, pc.Env)
	}
	if !slices.Contains(pc.Route.Hosts, "bedrock-runtime.eu-west-1.amazonaws.com:443") || len(warned) != 0 {
		t.Errorf("hosts %v warned %v", pc.Route.Hosts, warned)
	}
	// CLAUDE_CONFIG_DIR wins over HOME; a malformed file there is logged
	// and ignored (the environment alone decides).
	write(cfgDir, `{"env": ["not", "an", "object"]}`)
	pc, err = ClaudeProvider(map[string]string{"HOME": home, "CLAUDE_CONFIG_DIR": cfgDir, "ANTHROPIC_API_KEY": "k123"}, warn)
	if err != nil || pc.Provider != "anthropic" {
		t.Fatalf("malformed settings: %v %v", pc.Provider, err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], filepath.Join(cfgDir, "settings.json")) || !strings.Contains(warned[0], "env is not an object") {
		t.Errorf("warned %q", warned)
	}
}

// TestProviderEgressEntry: the allowlist entry of the provider comes from
// ANTHROPIC_BASE_URL (default port by scheme), the proxy's own parser
// accepts it, and "private:" is added to a host name only on the opt-in,
// never to an IP literal.
func TestProviderEgressEntry(t *testing.T) {
	for _, c := range []struct {
		url     string
		private bool
		want    string
	}{
		{"", false, "api.anthropic.com:443"},
		{"https://api.example.test", false, "api.example.test:443"},
		{"http://gateway.test", false, "gateway.test:80"},
		{"http://gateway.test:4000/v1", true, "private:gateway.test:4000"},
		{"http://172.18.0.2:8080", false, "172.18.0.2:8080"},
		{"http://172.18.0.2:8080", true, "172.18.0.2:8080"},
		{"http://[fd00::2]:8080", true, "[fd00::2]:8080"},
	} {
		got, err := ProviderEgress(c.url, c.private)
		if err != nil || got != c.want {
			t.Errorf("ProviderEgress(%q, %v) = %q, %v; want %q", c.url, c.private, got, err, c.want)
			continue
		}
		if _, err := egress.ParsePolicy([]string{got}); err != nil {
			t.Errorf("the proxy refuses %q: %v", got, err)
		}
	}
	if _, err := ProviderEgress("ftp://x.test", false); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_BASE_URL=ftp://x.test") {
		t.Errorf("ftp URL: %v", err)
	}
}

func TestRedactorRawAndJSONEscaped(t *testing.T) {
	key := `sk-"a\b`
	r := NewRedactor(map[string]string{"ANTHROPIC_API_KEY": key, "SHORT": "ab"})
	in := `raw ` + key + ` json "sk-\"a\\b" ab`
	got := r.String(in)
	if strings.Contains(got, "sk-") || strings.Count(got, "[REDACTED:ANTHROPIC_API_KEY]") != 2 || !strings.HasSuffix(got, " ab") {
		t.Fatalf("redacted %q", got)
	}
	// A value split across writes is still found.
	var b bytes.Buffer
	w := r.Writer(&b)
	_, _ = w.Write([]byte("x sk-\"a"))
	_, _ = w.Write([]byte("\\b y\npartial"))
	_ = w.Close()
	if b.String() != "x [REDACTED:ANTHROPIC_API_KEY] y\npartial" {
		t.Fatalf("writer: %q", b.String())
	}
}

func TestClaudeStreamOutcomeRules(t *testing.T) {
	s := newClaudeStream("")
	s.line(`{"type":"system","subtype":"init","model":"m1","plugins":[],"skills":["doctor"]}`)
	s.line(`{"type":"assistant","message":{"id":"a","model":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}`)
	s.line(`{"type":"assistant","message":{"id":"b","model":"m1","content":[{"type":"text","text":"hm"}]}}`)
	evs := s.line(`{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":2,"total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":4},"terminal_reason":"max_turns","modelUsage":{"m1":{"costUSD":0.1},"m2":{"costUSD":0.4}}}`)
	if !s.failed() || !s.attempted() {
		t.Fatalf("error_max_turns after two turns: failed=%v attempted=%v (want a failure that is scored)", s.failed(), s.attempted())
	}
	if len(evs) != 1 || evs[0].Type != events.Usage {
		t.Fatalf("result events %+v", evs)
	}
	u := evs[0].Data.(events.UsageData)
	// Two assistant messages counted a call each already: num_turns 2 adds 0.
	if *u.CostUSD != 0.5 || *u.Calls != 0 || *u.CompletionTokens != 4 || u.Model != "m2" {
		t.Errorf("result usage %+v (model: the entry that cost most; calls beyond the messages' own)", u)
	}
	m := s.metrics(false)
	if m["model"] != "m2" || m["terminal_reason"] != "max_turns" || m["tool_calls"].(map[string]int)["Bash"] != 1 {
		t.Errorf("metrics %v", m)
	}

	// An error before any attempt: one turn, no output tokens.
	e := newClaudeStream("")
	e.line(`{"type":"result","subtype":"success","is_error":true,"num_turns":1,"usage":{"output_tokens":0},"api_error_status":401}`)
	if !e.failed() || e.attempted() {
		t.Errorf("rejected credentials: failed=%v attempted=%v", e.failed(), e.attempted())
	}
	// A truncated stream: no result, no cost or tokens.
	tr := newClaudeStream("")
	tr.line(`{"type":"assistant","message":{"id":"a","model":"m1","content":[]}}`)
	if tr.result != nil || tr.metrics(true)["stream_truncated"] != true || tr.metrics(true)["cost_usd"] != nil {
		t.Errorf("truncated: %v", tr.metrics(true))
	}
}

func TestClaudeStreamSkillInvocations(t *testing.T) {
	s := newClaudeStream("greet")
	s.line(`{"type":"system","subtype":"init","plugins":[{"name":"abskill"}],"skills":["abskill:greet","doctor"]}`)
	s.line(`{"type":"assistant","message":{"id":"a","model":"m","content":[{"type":"tool_use","id":"t1","name":"Skill","input":{"skill":"abskill:greet"}},{"type":"tool_use","id":"t2","name":"Skill","input":{"skill":"abskill:greet"}},{"type":"tool_use","id":"t3","name":"Skill","input":{"skill":"doctor"}}]}}`)
	s.line(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":"rejected"}]}}`)
	m := s.metrics(false)
	if m["n_skill_invocations"] != 1 || strings.Join(m["unexpected_skills"].([]string), ",") != "doctor" || !s.treatmentOffered() {
		t.Fatalf("metrics %v (one accepted call of the treatment; doctor unexpected)", m)
	}
}

func TestSkillPluginCopyRules(t *testing.T) {
	base := t.TempDir()
	skill := filepath.Join(base, "greet")
	outside := filepath.Join(base, "secret.txt")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(skill, "evals"), 0o755))
	must(os.MkdirAll(filepath.Join(skill, "ref"), 0o755))
	must(os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: greet\ndescription: d\n---\nbody\n"), 0o644))
	must(os.WriteFile(filepath.Join(skill, "ref", "a.md"), []byte("A"), 0o644))
	must(os.WriteFile(filepath.Join(skill, "evals", "key.txt"), []byte("K"), 0o644))
	must(os.WriteFile(outside, []byte("S"), 0o644))
	must(os.Symlink("ref/a.md", filepath.Join(skill, "inside-link.md")))
	must(os.Symlink(outside, filepath.Join(skill, "outside-link.md")))
	must(os.Symlink("evals/key.txt", filepath.Join(skill, "evals-link.md")))
	s, err := LoadSkill(base, "greet/SKILL.md")
	if err != nil || s.Name != "greet" {
		t.Fatalf("load: %+v %v", s, err)
	}
	dst := filepath.Join(t.TempDir(), "abskill")
	skipped, err := s.WritePlugin(dst)
	must(err)
	got := filepath.Join(dst, "skills", "greet")
	if b, err := os.ReadFile(filepath.Join(got, "inside-link.md")); err != nil || string(b) != "A" {
		t.Errorf("a link inside the skill is copied as its file: %q %v", b, err)
	}
	for _, p := range []string{"outside-link.md", "evals-link.md", "evals"} {
		if _, err := os.Lstat(filepath.Join(got, p)); err == nil {
			t.Errorf("%s was copied", p)
		}
	}
	if len(skipped) != 3 {
		t.Errorf("skipped %v", skipped)
	}
	if _, err := os.Stat(filepath.Join(dst, ".claude-plugin", "plugin.json")); err != nil {
		t.Error(err)
	}
	// Names that would leave the plugin directory are refused.
	must(os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: ../../x\n---\n"), 0o644))
	if _, err := LoadSkill(base, "greet"); err == nil || !strings.Contains(err.Error(), "skill name") {
		t.Errorf("a name with ../: %v", err)
	}
	// A misspelt skill directory is named as a directory that is not
	// there; a directory without SKILL.md names the file.
	if _, err := LoadSkill(base, "gret"); err == nil || !strings.Contains(err.Error(), "skill "+filepath.Join(base, "gret")+": no such directory") {
		t.Errorf("a missing skill directory: %v", err)
	}
	must(os.MkdirAll(filepath.Join(base, "empty"), 0o755))
	if _, err := LoadSkill(base, "empty"); err == nil || !strings.Contains(err.Error(), filepath.Join(base, "empty", "SKILL.md")) {
		t.Errorf("a skill directory without SKILL.md: %v", err)
	}
}

// TestGatewayCAEnv: behind the gateway the operator's CA bundles give way
// to the sandbox's own (which trust the gateway), AWS_CA_BUNDLE points at
// that bundle, and only credential files are copied in.
func TestGatewayCAEnv(t *testing.T) {
	env := map[string]string{"NODE_EXTRA_CA_CERTS": "/x/ca", "SSL_CERT_FILE": "/x/b", "AWS_CA_BUNDLE": "/x/aws", "AWS_SHARED_CREDENTIALS_FILE": "/x/creds", "AWS_REGION": "eu-west-1"}
	files := []providers.File{{Env: "NODE_EXTRA_CA_CERTS"}, {Env: "AWS_CA_BUNDLE"}, {Env: "AWS_SHARED_CREDENTIALS_FILE", Secret: true}}
	got, kept := gatewayCAEnv(env, files)
	if _, ok := got["NODE_EXTRA_CA_CERTS"]; ok || got["SSL_CERT_FILE"] != "" || got["AWS_CA_BUNDLE"] != sandbox.GatewayBundlePath ||
		got["AWS_SHARED_CREDENTIALS_FILE"] != "/x/creds" || got["AWS_REGION"] != "eu-west-1" {
		t.Errorf("env %v", got)
	}
	if len(kept) != 1 || kept[0].Env != "AWS_SHARED_CREDENTIALS_FILE" || env["NODE_EXTRA_CA_CERTS"] != "/x/ca" {
		t.Errorf("files %v (env given %v)", kept, env)
	}
}

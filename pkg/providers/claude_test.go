package providers

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestClaudeChoice: Bedrock, then Foundry, then Vertex, each only for
// 1/true/yes/on (any case, blanks around), as the CLI chooses.
func TestClaudeChoice(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, ClaudeAnthropic},
		{map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "CLAUDE_CODE_USE_FOUNDRY": "1", "CLAUDE_CODE_USE_VERTEX": "1"}, ClaudeBedrock},
		{map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "true", "CLAUDE_CODE_USE_VERTEX": "1"}, ClaudeFoundry},
		{map[string]string{"CLAUDE_CODE_USE_BEDROCK": "0", "CLAUDE_CODE_USE_VERTEX": " YES "}, ClaudeVertex},
		{map[string]string{"CLAUDE_CODE_USE_BEDROCK": "false", "CLAUDE_CODE_USE_FOUNDRY": "off", "CLAUDE_CODE_USE_VERTEX": "On"}, ClaudeVertex},
		{map[string]string{"CLAUDE_CODE_USE_BEDROCK": "enabled", "CLAUDE_CODE_USE_VERTEX": "2"}, ClaudeAnthropic},
		{map[string]string{"CLAUDE_CODE_USE_BEDROCK": "TRUE"}, ClaudeBedrock},
	} {
		if got := ClaudeChoice(c.env); got != c.want {
			t.Errorf("ClaudeChoice(%v) = %s, want %s", c.env, got, c.want)
		}
	}
}

// TestVertexHost: the CLI's region → host mapping, multi-regions and
// global included.
func TestVertexHost(t *testing.T) {
	for region, want := range map[string]string{
		"global":          "aiplatform.googleapis.com",
		"us":              "aiplatform.us.rep.googleapis.com",
		"eu":              "aiplatform.eu.rep.googleapis.com",
		"us-east5":        "us-east5-aiplatform.googleapis.com",
		"europe-west1":    "europe-west1-aiplatform.googleapis.com",
		"asia-southeast1": "asia-southeast1-aiplatform.googleapis.com",
	} {
		if got := VertexHost(region); got != want {
			t.Errorf("VertexHost(%s) = %s, want %s", region, got, want)
		}
	}
}

func files(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if b, ok := m[p]; ok {
			return []byte(b), nil
		}
		return nil, os.ErrNotExist
	}
}

// TestClaudeHosts: each provider's allowlist as the CLI reaches it.
func TestClaudeHosts(t *testing.T) {
	creds := files(map[string]string{"/sa.json": `{"type":"service_account","private_key":"-----PK-----","token_uri":"https://oauth2.googleapis.com/token"}`})
	for name, c := range map[string]struct {
		env       map[string]string
		hosts     []string
		tunnelled []string
	}{
		"anthropic":                        {map[string]string{"ANTHROPIC_API_KEY": "k"}, []string{"api.anthropic.com:443"}, nil},
		"anthropic base url adds its host": {map[string]string{"CLAUDE_CODE_OAUTH_TOKEN": "t", "ANTHROPIC_BASE_URL": "http://gw.corp.test:4000"}, []string{"api.anthropic.com:443", "gw.corp.test:4000"}, nil},
		"bedrock default region": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_BEARER_TOKEN_BEDROCK": "b"},
			[]string{"bedrock-runtime.us-east-1.amazonaws.com:443", "bedrock.us-east-1.amazonaws.com:443"}, nil},
		"bedrock AWS_REGION over AWS_DEFAULT_REGION, small fast model region": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_BEARER_TOKEN_BEDROCK": "b",
			"AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "us-west-2", "ANTHROPIC_SMALL_FAST_MODEL_AWS_REGION": "us-east-1"},
			[]string{"bedrock-runtime.eu-central-1.amazonaws.com:443", "bedrock.eu-central-1.amazonaws.com:443", "bedrock-runtime.us-east-1.amazonaws.com:443", "bedrock.us-east-1.amazonaws.com:443"}, nil},
		"bedrock AWS_DEFAULT_REGION": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_BEARER_TOKEN_BEDROCK": "b", "AWS_DEFAULT_REGION": "ap-northeast-1"},
			[]string{"bedrock-runtime.ap-northeast-1.amazonaws.com:443", "bedrock.ap-northeast-1.amazonaws.com:443"}, nil},
		"bedrock govcloud fips": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_BEARER_TOKEN_BEDROCK": "b", "AWS_REGION": "us-gov-west-1"},
			[]string{"bedrock-runtime-fips.us-gov-west-1.amazonaws.com:443", "bedrock-fips.us-gov-west-1.amazonaws.com:443"}, nil},
		"bedrock base url": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1", "ANTHROPIC_BEDROCK_BASE_URL": "https://bedrock.gw.test"},
			[]string{"bedrock.gw.test:443"}, nil},
		"foundry resource": {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_RESOURCE": "my-res", "ANTHROPIC_FOUNDRY_API_KEY": "f"},
			[]string{"my-res.services.ai.azure.com:443"}, nil},
		"foundry base url": {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_BASE_URL": "https://x.openai.azure.com/anthropic", "ANTHROPIC_FOUNDRY_API_KEY": "f"},
			[]string{"x.openai.azure.com:443"}, nil},
		"foundry azure ad": {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_RESOURCE": "r1", "AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t", "AZURE_CLIENT_SECRET": "s"},
			[]string{"r1.services.ai.azure.com:443"}, []string{"login.microsoftonline.com:443"}},
		"vertex default region": {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1"},
			[]string{"us-east5-aiplatform.googleapis.com:443"}, nil},
		"vertex global and a model's region": {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "CLOUD_ML_REGION": "global", "VERTEX_REGION_CLAUDE_HAIKU_4_5": "us", "VERTEX_REGION_CLAUDE_4_5_OPUS": "eu",
			"GOOGLE_APPLICATION_CREDENTIALS": "/sa.json"},
			[]string{"aiplatform.googleapis.com:443", "aiplatform.eu.rep.googleapis.com:443", "aiplatform.us.rep.googleapis.com:443"}, []string{"oauth2.googleapis.com:443"}},
		"vertex base url": {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1", "ANTHROPIC_VERTEX_BASE_URL": "http://10.1.2.3:8080/v1"},
			[]string{"10.1.2.3:8080"}, nil},
	} {
		got, err := Claude(c.env, ClaudeOptions{ReadFile: creds, FilesDir: "/h/f"})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !slices.Equal(got.Route.Hosts, c.hosts) || !slices.Equal(got.Tunnelled, c.tunnelled) {
			t.Errorf("%s: hosts %v tunnelled %v, want %v %v", name, got.Route.Hosts, got.Tunnelled, c.hosts, c.tunnelled)
		}
	}
}

// TestClaudeFailFast: the seed's list of setups that cannot work in a
// sandbox fail before anything starts, each naming the variables.
func TestClaudeFailFast(t *testing.T) {
	fs := files(map[string]string{
		"/aws/config-sso":  "[profile dev]\nsso_session = corp\nsso_account_id = 1\n[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\n",
		"/aws/creds-other": "[other]\naws_access_key_id = AKIA\naws_secret_access_key = s\n",
		"/gcp/bad.json":    "not json",
	})
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"anthropic without credential": {map[string]string{}, "no provider credential"},
		"bedrock with only a profile":  {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_PROFILE": "dev"}, "only a profile or SSO"},
		"bedrock with SSO":             {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_CONFIG_FILE": "/aws/config-sso"}, "only a profile or SSO"},
		"bedrock, keys of another profile": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_PROFILE": "dev", "AWS_SHARED_CREDENTIALS_FILE": "/aws/creds-other"},
			"only a profile or SSO"},
		"bedrock, an access key without its secret": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_ACCESS_KEY_ID": "AKIA"}, "no AWS credential"},
		"bedrock, a region that is no region":       {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_BEARER_TOKEN_BEDROCK": "b", "AWS_REGION": "evil.test/x"}, "AWS_REGION=evil.test/x is not an AWS region"},
		"vertex without credentials":                {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "ANTHROPIC_VERTEX_PROJECT_ID": "p"}, "Vertex without credentials"},
		"vertex skip-auth that is off":              {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "0"}, "Vertex without credentials"},
		"vertex credentials not JSON":               {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/gcp/bad.json"}, "GOOGLE_APPLICATION_CREDENTIALS=/gcp/bad.json is not a JSON credentials file"},
		"vertex credentials missing":                {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/gcp/none.json"}, "GOOGLE_APPLICATION_CREDENTIALS=/gcp/none.json cannot be read"},
		"vertex region that is no region":           {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1", "CLOUD_ML_REGION": "a.b"}, "CLOUD_ML_REGION=a.b is not a Vertex region"},
		"foundry without hosts":                     {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_API_KEY": "f"}, "Foundry without hosts"},
		"foundry without credentials":               {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_RESOURCE": "r"}, "Foundry without credentials"},
		"foundry resource that is no name":          {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_RESOURCE": "r.evil.test", "ANTHROPIC_FOUNDRY_API_KEY": "f"}, "is not a resource name"},
		"loopback base url":                         {map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:4000"}, "ANTHROPIC_BASE_URL=http://127.0.0.1:4000 is a loopback address"},
		"loopback bedrock base url":                 {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1", "ANTHROPIC_BEDROCK_BASE_URL": "http://localhost:9000"}, "ANTHROPIC_BEDROCK_BASE_URL=http://localhost:9000 is a loopback address"},
		"loopback vertex base url":                  {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1", "ANTHROPIC_VERTEX_BASE_URL": "http://[::1]:1"}, "is a loopback address"},
		"loopback foundry base url":                 {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "1", "ANTHROPIC_FOUNDRY_API_KEY": "f", "ANTHROPIC_FOUNDRY_BASE_URL": "https://api.localhost"}, "is a loopback address"},
		"bad custom headers":                        {map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_CUSTOM_HEADERS": "no colon here"}, "ANTHROPIC_CUSTOM_HEADERS"},
	} {
		_, err := Claude(c.env, ClaudeOptions{ReadFile: fs})
		var se *ClaudeSetupError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a ClaudeSetupError with %q", name, err, c.want)
		}
	}
}

// TestClaudeCredentials: what the gateway can stand in for gets a
// placeholder (a key sent as a header: API keys, OAuth and Bedrock
// bearer tokens, the Foundry key); what signs or mints inside the CLI
// (SigV4 keys, a Google or Azure credential) is named as in the sandbox;
// only the chosen provider's variables pass, and file-valued ones point
// at their copies.
func TestClaudeCredentials(t *testing.T) {
	fs := files(map[string]string{
		"/aws/creds": "[dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = dev-secret-key\n",
		"/aws/ca":    "-----BEGIN CERTIFICATE-----\n",
		"/gcp/sa":    `{"type":"service_account","private_key":"-----PRIVATE-----","client_email":"x@y"}`,
	})
	for name, c := range map[string]struct {
		env          map[string]string
		placeholders []string
		inSandbox    []string
		header       []string
	}{
		"api key":     {map[string]string{"ANTHROPIC_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "not passed"}, []string{"ANTHROPIC_API_KEY"}, nil, []string{"X-Api-Key", "Authorization"}},
		"oauth token": {map[string]string{"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-x"}, []string{"CLAUDE_CODE_OAUTH_TOKEN"}, nil, []string{"X-Api-Key", "Authorization"}},
		"bedrock bearer": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "yes", "AWS_BEARER_TOKEN_BEDROCK": "bt", "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s", "ANTHROPIC_API_KEY": "not passed"},
			[]string{"AWS_BEARER_TOKEN_BEDROCK"}, nil, []string{"Authorization"}},
		"bedrock sigv4":        {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "st"}, nil, []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}, []string{"Authorization"}},
		"bedrock profile file": {map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_PROFILE": "dev", "AWS_SHARED_CREDENTIALS_FILE": "/aws/creds", "AWS_CA_BUNDLE": "/aws/ca"}, nil, []string{"AWS_SHARED_CREDENTIALS_FILE"}, []string{"Authorization"}},
		"foundry key":          {map[string]string{"CLAUDE_CODE_USE_FOUNDRY": "on", "ANTHROPIC_FOUNDRY_RESOURCE": "r", "ANTHROPIC_FOUNDRY_API_KEY": "fk"}, []string{"ANTHROPIC_FOUNDRY_API_KEY"}, nil, []string{"Api-Key", "X-Api-Key", "Authorization"}},
		"vertex service account": {map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/gcp/sa", "ANTHROPIC_VERTEX_PROJECT_ID": "p"},
			nil, []string{"GOOGLE_APPLICATION_CREDENTIALS"}, []string{"Authorization"}},
	} {
		got, err := Claude(c.env, ClaudeOptions{ReadFile: fs, FilesDir: "/home/agent/.pf"})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var ph []string
		for _, cr := range got.Route.Credentials {
			ph = append(ph, cr.Env)
			if !strings.HasPrefix(cr.Placeholder, PlaceholderPrefix) || cr.Value != c.env[cr.Env] || got.Secrets[cr.Env] != cr.Value {
				t.Errorf("%s: credential %+v", name, cr)
			}
		}
		if !slices.Equal(ph, c.placeholders) || !slices.Equal(got.InSandbox, c.inSandbox) || !slices.Equal(got.Route.AuthHeaders, c.header) {
			t.Errorf("%s: placeholders %v in sandbox %v headers %v; want %v %v %v", name, ph, got.InSandbox, got.Route.AuthHeaders, c.placeholders, c.inSandbox, c.header)
		}
		if got.Env["ANTHROPIC_API_KEY"] == "not passed" || got.Env["AWS_SECRET_ACCESS_KEY"] == "not passed" {
			t.Errorf("%s: another provider's variable passed: %v", name, got.Env)
		}
		for _, f := range got.Files {
			if got.Env[f.Env] != f.Sandbox || filepath.Dir(f.Sandbox) != "/home/agent/.pf" || string(f.Data) == "" {
				t.Errorf("%s: file %s → %s, env %s", name, f.Host, f.Sandbox, got.Env[f.Env])
			}
		}
	}
	got, _ := Claude(map[string]string{"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_PROFILE": "dev", "AWS_SHARED_CREDENTIALS_FILE": "/aws/creds"}, ClaudeOptions{ReadFile: fs})
	found := false
	for _, v := range got.Secrets {
		found = found || v == "dev-secret-key"
	}
	if !found {
		t.Errorf("the secret key of a credentials file is not among the values redacted: %v", got.Secrets)
	}
	got, _ = Claude(map[string]string{"CLAUDE_CODE_USE_VERTEX": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/gcp/sa"}, ClaudeOptions{ReadFile: fs})
	if got.Secrets["GOOGLE_APPLICATION_CREDENTIALS private_key"] != "-----PRIVATE-----" {
		t.Errorf("the private key of a Google credentials file is not among the values redacted: %v", got.Secrets)
	}
}

// TestClaudeSettingsEnv: the settings file's env block, where it is
// looked for, and a malformed one as an error naming the file and key.
func TestClaudeSettingsEnv(t *testing.T) {
	d := t.TempDir()
	if p := ClaudeSettingsPath(func(k string) string { return map[string]string{"HOME": "/h", "CLAUDE_CONFIG_DIR": d}[k] }); p != filepath.Join(d, "settings.json") {
		t.Errorf("CLAUDE_CONFIG_DIR: %s", p)
	}
	if p := ClaudeSettingsPath(func(k string) string { return map[string]string{"HOME": "/h"}[k] }); p != "/h/.claude/settings.json" {
		t.Errorf("HOME: %s", p)
	}
	p := filepath.Join(d, "settings.json")
	if env, err := ClaudeSettingsEnv(p); env != nil || err != nil {
		t.Errorf("missing file: %v %v", env, err)
	}
	for body, want := range map[string]string{
		`{"env":{"AWS_REGION":"eu-west-1"},"model":"x"}`: "",
		`{"model":"x"}`:    "",
		`{"env":{"A":1}}`:  "env.A is not a string",
		`{"env":"A=1"}`:    "env is not an object",
		`[1,2]`:            "not a JSON object",
		`{"env":{"A":"1"}`: "not a JSON object",
	} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		env, err := ClaudeSettingsEnv(p)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p)):
			t.Errorf("%s: %v, want an error naming %s and %q", body, err, p, want)
		case want == "" && body[2] == 'e' && env["AWS_REGION"] != "eu-west-1":
			t.Errorf("%s: %v", body, env)
		}
	}
	m := MergeSettingsEnv(map[string]string{"A": "shell", "B": "shell"}, map[string]string{"A": "settings"})
	if m["A"] != "settings" || m["B"] != "shell" {
		t.Errorf("merge: %v", m)
	}
}

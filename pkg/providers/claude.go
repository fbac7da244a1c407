package providers

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// The providers the Claude Code CLI can be pointed at (ClaudeChoice).
const (
	ClaudeAnthropic = "anthropic"
	ClaudeBedrock   = "bedrock"
	ClaudeFoundry   = "foundry"
	ClaudeVertex    = "vertex"
)

// Truthy reports whether v switches a CLI option on, as the Claude CLI
// reads its CLAUDE_CODE_USE_* variables: "1", "true", "yes" or "on",
// case-insensitive, surrounding blanks ignored. Anything else ("0",
// "false", "enabled", "") is off.
func Truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// ClaudeChoice is the provider the Claude CLI uses for environment env,
// in the CLI's order: Bedrock when CLAUDE_CODE_USE_BEDROCK is Truthy,
// then Foundry (CLAUDE_CODE_USE_FOUNDRY), then Vertex
// (CLAUDE_CODE_USE_VERTEX), else the Anthropic API.
func ClaudeChoice(env map[string]string) string {
	switch {
	case Truthy(env["CLAUDE_CODE_USE_BEDROCK"]):
		return ClaudeBedrock
	case Truthy(env["CLAUDE_CODE_USE_FOUNDRY"]):
		return ClaudeFoundry
	case Truthy(env["CLAUDE_CODE_USE_VERTEX"]):
		return ClaudeVertex
	}
	return ClaudeAnthropic
}

// DefaultVertexRegion is the region the CLI uses when CLOUD_ML_REGION is
// unset; DefaultBedrockRegion when AWS_REGION and AWS_DEFAULT_REGION are.
const (
	DefaultVertexRegion  = "us-east5"
	DefaultBedrockRegion = "us-east-1"
)

// VertexHost is the Vertex AI API host of region as the CLI maps it:
// "global" → aiplatform.googleapis.com, the multi-regions "us" and "eu"
// → aiplatform.<r>.rep.googleapis.com, any other region r →
// <r>-aiplatform.googleapis.com.
func VertexHost(region string) string {
	switch region {
	case "global":
		return "aiplatform.googleapis.com"
	case "us", "eu":
		return "aiplatform." + region + ".rep.googleapis.com"
	}
	return region + "-aiplatform.googleapis.com"
}

// BedrockHosts are the Bedrock hosts of region as the CLI's AWS clients
// name them: the runtime (bedrock-runtime.<r>.amazonaws.com) and the
// control plane (bedrock.<r>.amazonaws.com, inference profiles); GovCloud
// regions (us-gov-*) use their -fips hosts.
func BedrockHosts(region string) []string {
	fips := ""
	if strings.HasPrefix(region, "us-gov-") {
		fips = "-fips"
	}
	return []string{"bedrock-runtime" + fips + "." + region + ".amazonaws.com", "bedrock" + fips + "." + region + ".amazonaws.com"}
}

// FoundryHost is the host of Microsoft Foundry resource r, as the CLI
// builds its URL from ANTHROPIC_FOUNDRY_RESOURCE.
func FoundryHost(resource string) string { return resource + ".services.ai.azure.com" }

var (
	awsRegionRE = regexp.MustCompile(`^[a-z]{2,}(-[a-z]+)+-\d{1,2}$`)
	labelRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// claudeCommonEnv are the variables every provider's CLI gets: the model
// choice, output and turn limits, and the provider switches.
var claudeCommonEnv = []string{
	"ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
	"ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
	"CLAUDE_CODE_MAX_TURNS", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_USE_VERTEX",
}

// ClaudeEnvByProvider are the variables the CLI reads for each provider
// (beside claudeCommonEnv): the allowlist of what reaches it from
// proctor's environment. Vertex also gets every VERTEX_REGION_CLAUDE_*
// variable (a model's own region).
var ClaudeEnvByProvider = map[string][]string{
	ClaudeAnthropic: {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS"},
	ClaudeBedrock: {"AWS_REGION", "AWS_DEFAULT_REGION", "ANTHROPIC_SMALL_FAST_MODEL_AWS_REGION", "AWS_BEARER_TOKEN_BEDROCK",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE",
		"AWS_CONFIG_FILE", "AWS_CA_BUNDLE", "ANTHROPIC_BEDROCK_BASE_URL", "CLAUDE_CODE_SKIP_BEDROCK_AUTH", "ANTHROPIC_CUSTOM_HEADERS"},
	ClaudeFoundry: {"ANTHROPIC_FOUNDRY_RESOURCE", "ANTHROPIC_FOUNDRY_BASE_URL", "ANTHROPIC_FOUNDRY_API_KEY",
		"CLAUDE_CODE_SKIP_FOUNDRY_AUTH", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "ANTHROPIC_CUSTOM_HEADERS"},
	ClaudeVertex: {"CLOUD_ML_REGION", "ANTHROPIC_VERTEX_PROJECT_ID", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT",
		"GOOGLE_APPLICATION_CREDENTIALS", "ANTHROPIC_VERTEX_BASE_URL", "CLAUDE_CODE_SKIP_VERTEX_AUTH", "ANTHROPIC_CUSTOM_HEADERS"},
}

// ClaudeEnvNames are the variables Claude reads from its environment by
// name, every provider's, sorted; beside them it reads each
// VERTEX_REGION_CLAUDE_* variable the environment holds.
func ClaudeEnvNames() []string {
	names := append(slices.Clone(claudeCommonEnv), caBundleEnv...)
	for _, ks := range ClaudeEnvByProvider {
		names = append(names, ks...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// vertexRegionPrefix starts the variables that give one model its own
// Vertex region.
const vertexRegionPrefix = "VERTEX_REGION_CLAUDE_"

// FileEnv are the variables whose values are paths of files the CLI
// reads: each one set is copied into the sandbox and re-pointed at its
// copy (ClaudeConfig.Files). The CA bundle variables matter only with
// --no-intercept: behind the model gateway the sandbox's own CA
// variables replace them.
var FileEnv = []string{
	"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "GOOGLE_APPLICATION_CREDENTIALS", "AWS_CA_BUNDLE",
	"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
}

// caBundleEnv are the FileEnv variables that name CA bundles: every
// provider's CLI gets them.
var caBundleEnv = []string{"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}

// maxProviderFile caps a file-valued variable's file (1 MiB: credentials,
// configs and CA bundles are far smaller).
const maxProviderFile = 1 << 20

// ClaudeOptions say how Claude reads an environment.
type ClaudeOptions struct {
	// Private lets a base URL's host name resolve to a private address
	// (PROCTOR_PROVIDER_PRIVATE=1; BaseURLEntry).
	Private bool
	// FilesDir is the sandbox directory file-valued variables are
	// re-pointed into; empty means /proctor-provider-files.
	FilesDir string
	// ReadFile reads a file-valued variable's file; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
}

// ClaudeConfig is how the Claude CLI of a sandbox reaches its model.
type ClaudeConfig struct {
	// Provider is ClaudeChoice's.
	Provider string
	// Env are the variables the CLI gets, real values (a model gateway
	// replaces the credentials of Route with placeholders); file-valued
	// ones hold the path of the file's copy in the sandbox.
	Env map[string]string
	// Files are the files to copy in, one for each file-valued variable
	// set.
	Files []File
	// Route is the provider as the model gateway serves it: every host
	// the CLI reaches (the allowlist entries), and the credentials the
	// proxy can put into requests itself (sent as a header, never used
	// to sign), each with a placeholder.
	Route Route
	// Tunnelled are allowlist entries ("host:443") the CLI reaches that
	// are not its model API (a token endpoint): tunnelled, not
	// intercepted, so no model call is recorded for them.
	Tunnelled []string
	// InSandbox names the credential variables and files whose real
	// values must reach the sandbox: a key that signs requests (AWS
	// SigV4) or mints tokens (a Google or Azure credential) cannot be
	// replaced by a placeholder the proxy swaps.
	InSandbox []string
	// Secrets are every credential value set (variables and the contents
	// of credential files), name → value, for redaction.
	Secrets map[string]string
}

// File is a file-valued variable's file: read from Host (on proctor's
// machine), copied to Sandbox, which Env names.
type File struct {
	Env     string
	Host    string
	Sandbox string
	Data    []byte
	// Secret marks a file that holds credentials (not a CA bundle).
	Secret bool
}

// ClaudeSetupError is a Claude provider environment that cannot work,
// one of the seed's fail-fast rules; it names the variables.
type ClaudeSetupError struct {
	Provider string
	Reason   string
}

func (e *ClaudeSetupError) Error() string {
	return "docker-claude (" + e.Provider + "): " + e.Reason
}

// Claude reads environment env (proctor's environment with the operator's
// Claude settings merged in: MergeSettingsEnv) the way the Claude CLI
// does and returns what a sandboxed CLI needs, or a *ClaudeSetupError for
// a setup that cannot work in a sandbox (the seed's fail-fast list):
//   - no credential: Anthropic without ANTHROPIC_API_KEY,
//     ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN; Bedrock with only a
//     profile or SSO (no AWS_BEARER_TOKEN_BEDROCK, no
//     AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no static keys in
//     AWS_SHARED_CREDENTIALS_FILE, no CLAUDE_CODE_SKIP_BEDROCK_AUTH);
//     Vertex without GOOGLE_APPLICATION_CREDENTIALS or
//     CLAUDE_CODE_SKIP_VERTEX_AUTH; Foundry without
//     ANTHROPIC_FOUNDRY_API_KEY, an Azure client secret or
//     CLAUDE_CODE_SKIP_FOUNDRY_AUTH;
//   - no hosts: Foundry without ANTHROPIC_FOUNDRY_RESOURCE or
//     ANTHROPIC_FOUNDRY_BASE_URL, a region or resource that is not a host
//     name label;
//   - a base URL that is not an http(s) URL with a host, or whose host is
//     loopback (inside the container that is the container itself);
//   - a file-valued variable whose file cannot be read, is over 1 MiB, or
//     (GOOGLE_APPLICATION_CREDENTIALS) is not a JSON object.
func Claude(env map[string]string, o ClaudeOptions) (ClaudeConfig, error) {
	if o.FilesDir == "" {
		o.FilesDir = "/proctor-provider-files"
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	p := ClaudeChoice(env)
	c := ClaudeConfig{Provider: p, Env: map[string]string{}, Secrets: map[string]string{}, Route: Route{Provider: p}}
	fail := func(f string, a ...any) (ClaudeConfig, error) {
		return ClaudeConfig{}, &ClaudeSetupError{Provider: p, Reason: fmt.Sprintf(f, a...)}
	}
	names := append(append(slices.Clone(claudeCommonEnv), ClaudeEnvByProvider[p]...), caBundleEnv...)
	if p == ClaudeVertex {
		for k := range env {
			if strings.HasPrefix(k, vertexRegionPrefix) {
				names = append(names, k)
			}
		}
	}
	for _, k := range names {
		if v := env[k]; strings.TrimSpace(v) != "" {
			c.Env[k] = v
		}
	}
	for _, k := range []string{"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_FOUNDRY", "CLAUDE_CODE_USE_VERTEX"} {
		if _, ok := c.Env[k]; ok && !Truthy(c.Env[k]) {
			delete(c.Env, k) // off: the CLI ignores it, so does the sandbox
		}
	}
	get := func(k string) string { return strings.TrimSpace(c.Env[k]) }
	// File-valued variables: read now (a bad one fails the run), copied in
	// under FilesDir.
	for _, k := range FileEnv {
		hp := get(k)
		if hp == "" {
			continue
		}
		b, err := o.ReadFile(hp)
		if err != nil {
			return fail("%s=%s cannot be read: %v", k, hp, err)
		}
		if len(b) > maxProviderFile {
			return fail("%s=%s is %d bytes, over the %d a provider file may hold", k, hp, len(b), maxProviderFile)
		}
		f := File{Env: k, Host: hp, Sandbox: path.Join(o.FilesDir, strings.ToLower(k)), Data: b, Secret: !slices.Contains(caBundleEnv, k) && k != "AWS_CA_BUNDLE"}
		c.Files = append(c.Files, f)
		c.Env[k] = f.Sandbox
		if f.Secret {
			maps.Copy(c.Secrets, fileSecrets(k, b))
		}
	}
	hosts := []string{}
	addHost := func(h string) {
		e := net.JoinHostPort(h, "443")
		if !slices.Contains(hosts, e) {
			hosts = append(hosts, e)
		}
	}
	baseURL := func(k string) (string, bool, error) {
		b := get(k)
		if b == "" {
			return "", false, nil
		}
		e, err := BaseURLEntry(k, b, o.Private)
		if err != nil {
			return "", false, err
		}
		if u, _ := url.Parse(b); isLoopback(u.Hostname()) {
			return "", false, fmt.Errorf("%s=%s is a loopback address, which inside the task container is the container itself: use an address the container can reach", k, b)
		}
		if !slices.Contains(hosts, e) {
			hosts = append(hosts, e)
		}
		return e, true, nil
	}
	cred := func(k string) bool {
		v := c.Env[k]
		if v == "" {
			return false
		}
		c.Secrets[k] = v
		return true
	}
	placeholder := func(k string) {
		c.Route.Credentials = append(c.Route.Credentials, Credential{Env: k, Placeholder: NewPlaceholder(), Value: c.Env[k]})
	}
	inSandbox := func(k string) { c.InSandbox = append(c.InSandbox, k) }
	switch p {
	case ClaudeAnthropic:
		addHost("api.anthropic.com")
		if _, _, err := baseURL("ANTHROPIC_BASE_URL"); err != nil {
			return fail("%v", err)
		}
		any := false
		for _, k := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"} {
			if cred(k) {
				placeholder(k)
				any = true
			}
		}
		if !any {
			return fail("no provider credential: set ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN (or choose Bedrock, Foundry or Vertex with CLAUDE_CODE_USE_*)")
		}
		c.Route.AuthHeaders = []string{"X-Api-Key", "Authorization"}
	case ClaudeBedrock:
		region := firstSet(get("AWS_REGION"), get("AWS_DEFAULT_REGION"), DefaultBedrockRegion)
		regions := []string{region}
		if r := get("ANTHROPIC_SMALL_FAST_MODEL_AWS_REGION"); r != "" && r != region {
			regions = append(regions, r)
		}
		for i, r := range regions {
			if !awsRegionRE.MatchString(r) {
				k := "AWS_REGION"
				if i > 0 {
					k = "ANTHROPIC_SMALL_FAST_MODEL_AWS_REGION"
				} else if get("AWS_REGION") == "" {
					k = "AWS_DEFAULT_REGION"
				}
				return fail("%s=%s is not an AWS region: no Bedrock host to allow", k, r)
			}
		}
		_, custom, err := baseURL("ANTHROPIC_BEDROCK_BASE_URL")
		if err != nil {
			return fail("%v", err)
		}
		if !custom {
			for _, r := range regions {
				for _, h := range BedrockHosts(r) {
					addHost(h)
				}
			}
		}
		switch {
		case cred("AWS_BEARER_TOKEN_BEDROCK"):
			placeholder("AWS_BEARER_TOKEN_BEDROCK")
		case get("AWS_ACCESS_KEY_ID") != "" && get("AWS_SECRET_ACCESS_KEY") != "":
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
				if cred(k) {
					inSandbox(k)
				}
			}
		case fileHasStaticKeys(c.Files, firstSet(get("AWS_PROFILE"), "default")):
			inSandbox("AWS_SHARED_CREDENTIALS_FILE")
		case Truthy(get("CLAUDE_CODE_SKIP_BEDROCK_AUTH")):
		default:
			what := "no AWS credential"
			if get("AWS_PROFILE") != "" || fileHasSSO(c.Files) {
				what = "only a profile or SSO (AWS_PROFILE, ~/.aws or an SSO session: none of it reaches the sandbox)"
			}
			return fail("Bedrock with %s: set AWS_BEARER_TOKEN_BEDROCK, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_SHARED_CREDENTIALS_FILE with static keys for the profile, or CLAUDE_CODE_SKIP_BEDROCK_AUTH=1 behind a gateway that signs", what)
		}
		c.Route.AuthHeaders = []string{"Authorization"}
	case ClaudeFoundry:
		_, custom, err := baseURL("ANTHROPIC_FOUNDRY_BASE_URL")
		if err != nil {
			return fail("%v", err)
		}
		if !custom {
			r := get("ANTHROPIC_FOUNDRY_RESOURCE")
			if r == "" {
				return fail("Foundry without hosts: set ANTHROPIC_FOUNDRY_RESOURCE or ANTHROPIC_FOUNDRY_BASE_URL")
			}
			if !labelRE.MatchString(r) {
				return fail("ANTHROPIC_FOUNDRY_RESOURCE=%s is not a resource name (a host name label)", r)
			}
			addHost(FoundryHost(r))
		}
		switch {
		case cred("ANTHROPIC_FOUNDRY_API_KEY"):
			placeholder("ANTHROPIC_FOUNDRY_API_KEY")
		case get("AZURE_CLIENT_SECRET") != "" && get("AZURE_CLIENT_ID") != "" && get("AZURE_TENANT_ID") != "":
			cred("AZURE_CLIENT_SECRET")
			inSandbox("AZURE_CLIENT_SECRET")
			c.Tunnelled = append(c.Tunnelled, "login.microsoftonline.com:443")
		case Truthy(get("CLAUDE_CODE_SKIP_FOUNDRY_AUTH")):
		default:
			return fail("Foundry without credentials: set ANTHROPIC_FOUNDRY_API_KEY, or AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, or CLAUDE_CODE_SKIP_FOUNDRY_AUTH=1 behind a gateway that authenticates (an Azure CLI login does not reach the sandbox)")
		}
		c.Route.AuthHeaders = []string{"Api-Key", "X-Api-Key", "Authorization"}
	case ClaudeVertex:
		_, custom, err := baseURL("ANTHROPIC_VERTEX_BASE_URL")
		if err != nil {
			return fail("%v", err)
		}
		if !custom {
			regions := []string{firstSet(get("CLOUD_ML_REGION"), DefaultVertexRegion)}
			for _, k := range slices.Sorted(maps.Keys(c.Env)) {
				if strings.HasPrefix(k, vertexRegionPrefix) {
					regions = append(regions, get(k))
				}
			}
			for i, r := range regions {
				if !labelRE.MatchString(r) {
					k := "CLOUD_ML_REGION"
					if i > 0 {
						k = "a " + vertexRegionPrefix + "* variable"
					}
					return fail("%s=%s is not a Vertex region: no host to allow", k, r)
				}
				addHost(VertexHost(r))
			}
		}
		switch {
		case get("GOOGLE_APPLICATION_CREDENTIALS") != "":
			tokenHosts, err := googleTokenHosts(c.Files)
			if err != nil {
				return fail("%v", err)
			}
			for _, h := range tokenHosts {
				c.Tunnelled = append(c.Tunnelled, net.JoinHostPort(h, "443"))
			}
			inSandbox("GOOGLE_APPLICATION_CREDENTIALS")
		case Truthy(get("CLAUDE_CODE_SKIP_VERTEX_AUTH")):
		default:
			return fail("Vertex without credentials: set GOOGLE_APPLICATION_CREDENTIALS (a service account or authorized user file; a gcloud login does not reach the sandbox) or CLAUDE_CODE_SKIP_VERTEX_AUTH=1 behind a gateway that authenticates")
		}
		c.Route.AuthHeaders = []string{"Authorization"}
	}
	if h := get("ANTHROPIC_CUSTOM_HEADERS"); h != "" {
		hs, err := ParseHeaders(h)
		if err != nil {
			return fail("ANTHROPIC_CUSTOM_HEADERS: %v", err)
		}
		c.Route.Headers, c.Route.HeaderEnv = hs, "ANTHROPIC_CUSTOM_HEADERS"
		c.Secrets["ANTHROPIC_CUSTOM_HEADERS"] = h
	}
	c.Route.Hosts = hosts
	return c, nil
}

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// isLoopback reports whether host names this machine: localhost, a
// .localhost name, a loopback or unspecified address.
func isLoopback(h string) bool {
	ip := net.ParseIP(h)
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// IsLoopbackURL reports whether raw (a URL, or host[:port] without a
// scheme, as proxy variables hold them) names a loopback host.
func IsLoopbackURL(raw string) bool {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	return err == nil && isLoopback(u.Hostname())
}

func fileOf(files []File, env string) *File {
	for i := range files {
		if files[i].Env == env {
			return &files[i]
		}
	}
	return nil
}

// iniSections reads an AWS shared config or credentials file: section
// name ("profile " prefix dropped) → keys (lower case) → values.
func iniSections(b []byte) map[string]map[string]string {
	out := map[string]map[string]string{}
	var cur map[string]string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			n := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l[1:len(l)-1]), "profile "))
			cur = map[string]string{}
			out[n] = cur
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && cur != nil {
			cur[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return out
}

// fileHasStaticKeys reports whether AWS_SHARED_CREDENTIALS_FILE (or
// AWS_CONFIG_FILE) gives profile an access key and a secret key.
func fileHasStaticKeys(files []File, profile string) bool {
	for _, k := range []string{"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"} {
		if f := fileOf(files, k); f != nil {
			s := iniSections(f.Data)[profile]
			if s["aws_access_key_id"] != "" && s["aws_secret_access_key"] != "" {
				return true
			}
		}
	}
	return false
}

// fileHasSSO reports whether AWS_CONFIG_FILE has an SSO profile or session.
func fileHasSSO(files []File) bool {
	f := fileOf(files, "AWS_CONFIG_FILE")
	if f == nil {
		return false
	}
	for _, s := range iniSections(f.Data) {
		for k := range s {
			if strings.HasPrefix(k, "sso_") {
				return true
			}
		}
	}
	return false
}

// googleTokenHosts are the hosts a Google credentials file sends its
// token requests to: its token_uri / token_url and
// service_account_impersonation_url hosts, oauth2.googleapis.com when it
// names none. A file that is not a JSON object is an error naming it.
func googleTokenHosts(files []File) ([]string, error) {
	f := fileOf(files, "GOOGLE_APPLICATION_CREDENTIALS")
	if f == nil {
		return nil, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(f.Data, &doc); err != nil {
		return nil, fmt.Errorf("GOOGLE_APPLICATION_CREDENTIALS=%s is not a JSON credentials file: %v", f.Host, err)
	}
	var hosts []string
	for _, k := range []string{"token_uri", "token_url", "service_account_impersonation_url"} {
		if s, _ := doc[k].(string); s != "" {
			if u, err := url.Parse(s); err == nil && u.Scheme == "https" && u.Hostname() != "" && !slices.Contains(hosts, u.Hostname()) {
				hosts = append(hosts, u.Hostname())
			}
		}
	}
	if len(hosts) == 0 {
		hosts = []string{"oauth2.googleapis.com"}
	}
	return hosts, nil
}

// fileSecrets are the secret values of a credentials file held by
// variable env, name → value, for redaction: the whole file, and the
// values of its secret keys (AWS: aws_secret_access_key,
// aws_session_token; Google: private_key, refresh_token, client_secret).
func fileSecrets(env string, b []byte) map[string]string {
	out := map[string]string{"file " + env: string(b)}
	if env == "GOOGLE_APPLICATION_CREDENTIALS" {
		var doc map[string]any
		if json.Unmarshal(b, &doc) == nil {
			for _, k := range []string{"private_key", "refresh_token", "client_secret"} {
				if s, _ := doc[k].(string); s != "" {
					out[env+" "+k] = s
				}
			}
		}
		return out
	}
	for name, sec := range iniSections(b) {
		for _, k := range []string{"aws_secret_access_key", "aws_session_token"} {
			if v := sec[k]; v != "" {
				out[env+" ["+name+"] "+k] = v
			}
		}
	}
	return out
}

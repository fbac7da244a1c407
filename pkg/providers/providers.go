// Package providers maps the model providers the gateway knows (DESIGN
// §6.1) to their API hosts, their credential variables and the headers a
// credential travels in, and prices their calls from a pinned, dated
// table (prices.toml).
//
// A cell's gateway serves each provider as a Route: the hosts the egress
// proxy intercepts for it (its API host, plus the host of its base-URL
// variable when set), and its credentials, each with a per-cell
// placeholder. The agent gets the placeholders; the proxy, and only the
// proxy, holds the real values and puts them into the auth headers of
// requests to that provider's hosts.
package providers

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
)

// Provider is a model provider: where its API is, which variables hold
// its credentials, and where a request carries them.
type Provider struct {
	// Name is "anthropic", "openai" or "gemini".
	Name string
	// Hosts are the API's host names (port 443).
	Hosts []string
	// CredentialEnv are the variables whose values are credentials, each
	// sent by the provider's clients in one of AuthHeaders or AuthQuery.
	CredentialEnv []string
	// BaseURLEnv is the variable that points the provider's clients at
	// another endpoint (a gateway, a test endpoint); its host is added to
	// Hosts.
	BaseURLEnv string
	// HeaderEnv, when set, is a variable of "Name: value" lines the
	// clients add to every request (ANTHROPIC_CUSTOM_HEADERS): the proxy
	// adds them instead, so they stay outside the sandbox too.
	HeaderEnv string
	// AuthHeaders are the request headers (canonical form) a credential
	// travels in: the proxy replaces a placeholder there, and nowhere
	// else. Authorization is matched as "Bearer <placeholder>" or any
	// value containing it.
	AuthHeaders []string
	// AuthQuery are the query parameters a credential may travel in
	// (Gemini's ?key=).
	AuthQuery []string
}

// known is the provider table, in a fixed order.
var known = []Provider{
	{
		Name: "anthropic", Hosts: []string{"api.anthropic.com"},
		CredentialEnv: []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"},
		BaseURLEnv:    "ANTHROPIC_BASE_URL", HeaderEnv: "ANTHROPIC_CUSTOM_HEADERS",
		AuthHeaders: []string{"X-Api-Key", "Authorization"},
	},
	{
		Name: "openai", Hosts: []string{"api.openai.com"},
		CredentialEnv: []string{"OPENAI_API_KEY"},
		BaseURLEnv:    "OPENAI_BASE_URL",
		AuthHeaders:   []string{"Authorization"},
	},
	{
		Name: "gemini", Hosts: []string{"generativelanguage.googleapis.com"},
		CredentialEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"},
		BaseURLEnv:    "GOOGLE_GEMINI_BASE_URL",
		AuthHeaders:   []string{"X-Goog-Api-Key", "Authorization"},
		AuthQuery:     []string{"key"},
	},
}

// All returns every known provider.
func All() []Provider {
	out := make([]Provider, len(known))
	for i, p := range known {
		out[i] = p.clone()
	}
	return out
}

// Lookup returns the provider named name (case-insensitive).
func Lookup(name string) (Provider, bool) {
	for _, p := range known {
		if strings.EqualFold(p.Name, name) {
			return p.clone(), true
		}
	}
	return Provider{}, false
}

func (p Provider) clone() Provider {
	p.Hosts = slices.Clone(p.Hosts)
	p.CredentialEnv = slices.Clone(p.CredentialEnv)
	p.AuthHeaders = slices.Clone(p.AuthHeaders)
	p.AuthQuery = slices.Clone(p.AuthQuery)
	return p
}

// Route is a provider as one cell's gateway serves it. It is what the
// egress proxy's sidecar receives (as JSON, in a file only it reads): it
// holds secrets.
type Route struct {
	// Provider is the provider's name.
	Provider string `json:"provider"`
	// Hosts are allowlist entries ("host:port", "private:" prefixed for a
	// name that may resolve to a private address) the proxy intercepts
	// for this provider: its API hosts and its base URL's host.
	Hosts []string `json:"hosts"`
	// Credentials are the provider's credentials that were set.
	Credentials []Credential `json:"credentials,omitempty"`
	// Headers are extra request headers (HeaderEnv) the proxy adds to
	// every request to Hosts.
	Headers map[string]string `json:"headers,omitempty"`
	// HeaderEnv is the variable Headers were read from: the agent never
	// gets it behind the gateway.
	HeaderEnv string `json:"header_env,omitempty"`
	// AuthHeaders and AuthQuery are Provider's.
	AuthHeaders []string `json:"auth_headers,omitempty"`
	AuthQuery   []string `json:"auth_query,omitempty"`
}

// Credential is one credential variable: its real value and the
// placeholder the agent gets instead.
type Credential struct {
	Env         string `json:"env"`
	Placeholder string `json:"placeholder"`
	Value       string `json:"value"`
}

// PlaceholderPrefix starts every placeholder: a value no provider issues.
const PlaceholderPrefix = "proctor-placeholder-"

// NewPlaceholder returns a fresh placeholder: PlaceholderPrefix and 32 hex
// digits of randomness, so one cell's placeholder opens nothing in
// another cell's gateway.
func NewPlaceholder() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return PlaceholderPrefix + hex.EncodeToString(b)
}

// Resolve reads p's variables through getenv and returns its Route: the
// API hosts as "host:443" entries, plus the host of the base-URL variable
// when it is set ("host:port", the port from the URL or its scheme's;
// "private:" before a name when private is set, an IP literal as is), and
// each credential variable that is set with a fresh placeholder. A base
// URL that is not an http(s) URL with a host is an error naming the
// variable; a HeaderEnv line without a colon likewise.
func Resolve(p Provider, getenv func(string) string, private bool) (Route, error) {
	r := Route{Provider: p.Name, AuthHeaders: slices.Clone(p.AuthHeaders), AuthQuery: slices.Clone(p.AuthQuery)}
	for _, h := range p.Hosts {
		r.Hosts = append(r.Hosts, net.JoinHostPort(h, "443"))
	}
	if p.BaseURLEnv != "" {
		if b := strings.TrimSpace(getenv(p.BaseURLEnv)); b != "" {
			e, err := BaseURLEntry(p.BaseURLEnv, b, private)
			if err != nil {
				return Route{}, err
			}
			if !slices.Contains(r.Hosts, e) {
				r.Hosts = append(r.Hosts, e)
			}
		}
	}
	for _, k := range p.CredentialEnv {
		if v := getenv(k); v != "" {
			r.Credentials = append(r.Credentials, Credential{Env: k, Placeholder: NewPlaceholder(), Value: v})
		}
	}
	if p.HeaderEnv != "" {
		if raw := getenv(p.HeaderEnv); strings.TrimSpace(raw) != "" {
			h, err := ParseHeaders(raw)
			if err != nil {
				return Route{}, fmt.Errorf("%s: %w", p.HeaderEnv, err)
			}
			r.Headers, r.HeaderEnv = h, p.HeaderEnv
		}
	}
	return r, nil
}

// BaseURLEntry is the allowlist entry of a base URL held by variable env:
// "host:port", the port from the URL or its scheme's (http 80, https
// 443); private prefixes a host name with "private:" so it may resolve to
// a private address, an IP literal is never prefixed. A URL without an
// http(s) scheme and a host is an error naming env.
func BaseURLEntry(env, raw string, private bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", fmt.Errorf("%s=%s is not an http(s) URL with a host", env, raw)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	h := u.Hostname()
	entry := net.JoinHostPort(h, port)
	if private && net.ParseIP(h) == nil {
		entry = "private:" + entry
	}
	return entry, nil
}

// ParseHeaders reads "Name: value" lines (as ANTHROPIC_CUSTOM_HEADERS
// holds them) into a map of canonical header names; blank lines are
// skipped, a line without a colon or with an empty name is an error.
func ParseHeaders(raw string) (map[string]string, error) {
	out := map[string]string{}
	for i, l := range strings.Split(raw, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("line %d is not \"Name: value\"", i+1)
		}
		out[textproto.CanonicalMIMEHeaderKey(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// AgentEnv returns what the agent gets for the route's credentials: each
// credential variable set to its placeholder. HeaderEnv is never given.
func (r Route) AgentEnv() map[string]string {
	env := map[string]string{}
	for _, c := range r.Credentials {
		env[c.Env] = c.Placeholder
	}
	return env
}

// Secrets returns the route's real values (credentials and header
// values), for redaction.
func (r Route) Secrets() []string {
	var out []string
	for _, c := range r.Credentials {
		out = append(out, c.Value)
	}
	for _, v := range r.Headers {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

package providers

import (
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestResolveAddsTheBaseURLHostAndPlaceholders(t *testing.T) {
	p, _ := Lookup("anthropic")
	r, err := Resolve(p, env(map[string]string{
		"ANTHROPIC_API_KEY":        "sk-real",
		"ANTHROPIC_BASE_URL":       "https://gw.internal:8443/anthropic",
		"ANTHROPIC_CUSTOM_HEADERS": "X-Team: blue\n\nx-gw-token: t0k",
	}), true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api.anthropic.com:443", "private:gw.internal:8443"}; strings.Join(r.Hosts, ",") != strings.Join(want, ",") {
		t.Errorf("hosts %v, want %v", r.Hosts, want)
	}
	if len(r.Credentials) != 1 || r.Credentials[0].Env != "ANTHROPIC_API_KEY" || r.Credentials[0].Value != "sk-real" {
		t.Fatalf("credentials %+v", r.Credentials)
	}
	ph := r.Credentials[0].Placeholder
	if !strings.HasPrefix(ph, PlaceholderPrefix) || len(ph) != len(PlaceholderPrefix)+32 || strings.Contains(ph, "sk-real") {
		t.Errorf("placeholder %q", ph)
	}
	ae := r.AgentEnv()
	if ae["ANTHROPIC_API_KEY"] != ph || len(ae) != 1 {
		t.Errorf("agent env %v: want only the placeholder", ae)
	}
	if r.Headers["X-Gw-Token"] != "t0k" || r.Headers["X-Team"] != "blue" {
		t.Errorf("headers %v", r.Headers)
	}
	r2, _ := Resolve(p, env(map[string]string{"ANTHROPIC_API_KEY": "sk-real"}), false)
	if r2.Credentials[0].Placeholder == ph {
		t.Error("two resolutions share a placeholder")
	}
	// An IP literal base URL is never prefixed; plain http has port 80.
	r3, _ := Resolve(p, env(map[string]string{"ANTHROPIC_BASE_URL": "http://10.0.0.5"}), true)
	if r3.Hosts[1] != "10.0.0.5:80" {
		t.Errorf("hosts %v", r3.Hosts)
	}
}

func TestResolveRefusesBadVariables(t *testing.T) {
	p, _ := Lookup("gemini")
	if _, err := Resolve(p, env(map[string]string{"GOOGLE_GEMINI_BASE_URL": "ftp://x"}), false); err == nil || !strings.Contains(err.Error(), "GOOGLE_GEMINI_BASE_URL") {
		t.Errorf("err %v", err)
	}
	a, _ := Lookup("anthropic")
	if _, err := Resolve(a, env(map[string]string{"ANTHROPIC_CUSTOM_HEADERS": "no colon here"}), false); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_CUSTOM_HEADERS") {
		t.Errorf("err %v", err)
	}
}

func TestProviderTable(t *testing.T) {
	want := map[string]string{"anthropic": "api.anthropic.com", "openai": "api.openai.com", "gemini": "generativelanguage.googleapis.com"}
	for _, p := range All() {
		if want[p.Name] != p.Hosts[0] || len(p.CredentialEnv) == 0 || p.BaseURLEnv == "" || len(p.AuthHeaders) == 0 {
			t.Errorf("%+v", p)
		}
		delete(want, p.Name)
	}
	if len(want) != 0 {
		t.Errorf("missing %v", want)
	}
	if _, ok := Lookup("OpenAI"); !ok {
		t.Error("lookup is case-insensitive")
	}
}

func TestPriceTable(t *testing.T) {
	pt := Prices()
	if pt.Date == "" || pt.Source == "" || len(pt.Models) == 0 {
		t.Fatalf("%+v", pt)
	}
	cases := []struct {
		model string
		n     Tokens
		want  float64
	}{
		// 1M input at $3 + 1M output at $15 + 1M read at $0.30 + 1M write at $3.75.
		{"claude-sonnet-4-5", Tokens{1e6, 1e6, 1e6, 1e6}, 22.05},
		{"claude-sonnet-4-5-20250929", Tokens{1000, 0, 0, 0}, 0.003},
		{"gpt-4o-2024-08-06", Tokens{0, 1000, 0, 0}, 0.01},
		{"models/gemini-2.5-pro", Tokens{0, 0, 1e6, 0}, 0.125},
	}
	for _, c := range cases {
		got, why := pt.Cost(c.model, c.n)
		if got == nil || *got != c.want {
			t.Errorf("%s: cost %v (%s), want %v", c.model, got, why, c.want)
		}
	}
	if got, why := pt.Cost("my-local-llama", Tokens{Input: 10}); got != nil || !strings.Contains(why, "my-local-llama") || !strings.Contains(why, pt.Date) {
		t.Errorf("unknown model: %v %q", got, why)
	}
	if got, why := pt.Cost("", Tokens{}); got != nil || why == "" {
		t.Errorf("no model: %v %q", got, why)
	}
}

// TestPriceTableBedrockIDs: Amazon Bedrock's ids of Anthropic models,
// with and without a cross-region prefix, a dated name, a context-window
// variant or an ARN around them, cost what the Anthropic model they name
// costs in the table; ids that name no listed model stay unpriced.
func TestPriceTableBedrockIDs(t *testing.T) {
	pt := Prices()
	tokens := Tokens{Input: 1000, Output: 2000, CacheRead: 3000, CacheWrite: 4000}
	for id, anthropic := range map[string]string{
		"anthropic.claude-sonnet-4-5-20250929-v1:0":                                                             "claude-sonnet-4-5",
		"us.anthropic.claude-sonnet-4-5-20250929-v1:0":                                                          "claude-sonnet-4-5",
		"eu.anthropic.claude-sonnet-4-20250514-v1:0":                                                            "claude-sonnet-4",
		"apac.anthropic.claude-3-7-sonnet-20250219-v1:0":                                                        "claude-3-7-sonnet",
		"global.anthropic.claude-haiku-4-5-20251001-v1:0":                                                       "claude-haiku-4-5",
		"us-gov.anthropic.claude-3-haiku-20240307-v1:0":                                                         "claude-3-haiku",
		"anthropic.claude-3-haiku-20240307-v1:0:200k":                                                           "claude-3-haiku",
		"anthropic.claude-opus-4-6-v1":                                                                          "claude-opus-4-6",
		"US.Anthropic.Claude-Opus-4-1-20250805-v1:0":                                                            "claude-opus-4-1",
		"anthropic.claude-3-5-haiku-20241022-v1:0":                                                              "claude-3-5-haiku",
		"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-opus-4-5-20251101-v1:0":                   "claude-opus-4-5",
		"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5",
	} {
		want, why := pt.Cost(anthropic, tokens)
		if want == nil {
			t.Fatalf("%s is not in the table: %s", anthropic, why)
		}
		got, why := pt.Cost(id, tokens)
		if got == nil || *got != *want {
			t.Errorf("%s: cost %v (%s), want %v, the cost of %s", id, got, why, *want, anthropic)
		}
	}
	// Opus 4.5 on Bedrock: 1000 × $5 + 2000 × $25 + 3000 × $0.50 + 4000 × $6.25 per million.
	if got, _ := pt.Cost("global.anthropic.claude-opus-4-5-20251101-v1:0", tokens); got == nil || *got != 0.0815 {
		t.Errorf("global Opus 4.5: cost %v, want 0.0815", got)
	}
	for _, id := range []string{
		"anthropic.claude-instant-v1",                                                 // not in the table
		"amazon.nova-pro-v1:0",                                                        // not an Anthropic model
		"us.meta.llama3-1-70b-instruct-v1:0",                                          // nor this
		"anthropic.claude-sonnet-4-5-extra-v1:0",                                      // a name the table does not hold
		"arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3", // names no model
	} {
		if got, why := pt.Cost(id, tokens); got != nil || !strings.Contains(why, "not in the price table") {
			t.Errorf("%s: cost %v (%q), want none", id, got, why)
		}
	}
}

func TestParsePricesRefusesBadTables(t *testing.T) {
	for name, src := range map[string]string{
		"no date":   "source = \"x\"\n",
		"duplicate": "date = \"2026-01-01\"\nsource = \"x\"\n[[model]]\nnames=[\"a\"]\n[[model]]\nnames=[\"A\"]\n",
		"negative":  "date = \"2026-01-01\"\nsource = \"x\"\n[[model]]\nnames=[\"a\"]\ninput = -1.0\n",
		"unknown":   "date = \"2026-01-01\"\nsource = \"x\"\n[[model]]\nnames=[\"a\"]\nprice = 1.0\n",
	} {
		if _, err := ParsePrices([]byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

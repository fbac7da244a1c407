package proxylogger

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// TestGatewayQueryKeyOnlyInItsParameter: an agent that puts its Gemini
// placeholder in ?key= (as Google's clients do) and also in another query
// parameter, on the streamed path, gets the real key in key= only; the
// other parameter reaches the upstream as sent (the gateway is no oracle
// that turns a placeholder into the key wherever the agent asks), and
// neither the call nor the proxy's decisions record the query or the key.
func TestGatewayQueryKeyOnlyInItsParameter(t *testing.T) {
	g := newGatewaySetup(t, nil, nil)
	roots, _ := g.ca.Pool()
	c := g.client(roots)
	path := "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=" + phGemini + "&echo=" + phGemini
	post(t, c, g.url("generativelanguage.googleapis.com", path), nil, `{}`)
	seen := g.fp.requests()
	if len(seen) != 1 {
		t.Fatalf("%d requests: %+v", len(seen), seen)
	}
	q, err := url.ParseQuery(seen[0].Query)
	if err != nil || q.Get("key") != realGemini || q.Get("echo") != phGemini || q.Get("alt") != "sse" {
		t.Errorf("upstream query %q (%v): want key= the real key, echo= the placeholder, alt=sse", seen[0].Query, err)
	}
	calls := g.calls.waitFor(t, 1)
	if calls[0].Path != "/v1beta/models/gemini-2.5-pro:streamGenerateContent" {
		t.Errorf("call path %q, want the path without its query", calls[0].Path)
	}
	for _, v := range []any{calls, g.recs.all()} {
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), realGemini) || strings.Contains(string(b), "key=") {
			t.Errorf("a record holds the key or the query: %s", b)
		}
	}
}

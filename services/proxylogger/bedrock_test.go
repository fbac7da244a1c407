package proxylogger

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// esEvent encodes one event-stream event message with the AWS SDK's
// encoder, as Bedrock sends it.
func esEvent(t testing.TB, eventType, payload string) []byte {
	var b bytes.Buffer
	var h eventstream.Headers
	h.Set(":message-type", eventstream.StringValue("event"))
	h.Set(":event-type", eventstream.StringValue(eventType))
	h.Set(":content-type", eventstream.StringValue("application/json"))
	if err := eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: h, Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// esChunk is an InvokeModelWithResponseStream chunk carrying one
// Messages API event.
func esChunk(t testing.TB, event string) []byte {
	return esEvent(t, "chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(event))+`","p":"abcd"}`)
}

func esException(t testing.TB, kind, payload string) []byte {
	var b bytes.Buffer
	var h eventstream.Headers
	h.Set(":message-type", eventstream.StringValue("exception"))
	h.Set(":exception-type", eventstream.StringValue(kind))
	if err := eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: h, Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func cat(parts ...[]byte) string { return string(bytes.Join(parts, nil)) }

// bedrockInvokeStream is an InvokeModelWithResponseStream answer: the
// Messages events as chunks, the model's text naming usage and Bedrock's
// metrics to tempt a careless parser, the last chunk with the
// invocation metrics.
func bedrockInvokeStream(t testing.TB) string {
	return cat(
		esChunk(t, `{"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":3,"cache_creation_input_tokens":7}}}`),
		esChunk(t, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"{\"usage\":{\"output_tokens\":999},\"amazon-bedrock-invocationMetrics\":{\"outputTokenCount\":999}}"}}`),
		esChunk(t, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":25}}`),
		esChunk(t, `{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":25,"invocationLatency":900,"firstByteLatency":300,"cacheReadInputTokenCount":3,"cacheWriteInputTokenCount":7}}`))
}

func bedrockConverseStream(t testing.TB) string {
	return cat(
		esEvent(t, "messageStart", `{"role":"assistant"}`),
		esEvent(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"\"usage\":{\"inputTokens\":999}"}}`),
		esEvent(t, "contentBlockStop", `{"contentBlockIndex":0}`),
		esEvent(t, "messageStop", `{"stopReason":"end_turn"}`),
		esEvent(t, "metadata", `{"usage":{"inputTokens":100,"outputTokens":20,"totalTokens":175,"cacheReadInputTokens":50,"cacheWriteInputTokens":5},"metrics":{"latencyMs":812}}`))
}

const (
	bedrockModelID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
	esType         = "application/vnd.amazon.eventstream"
)

// TestUsageParserBedrockEventStream: Bedrock's streamed answers, framed
// by the AWS SDK's encoder and fed whole, split at every boundary and a
// byte at a time, give the usage their events report, never the figures
// the model's text names.
func TestUsageParserBedrockEventStream(t *testing.T) {
	exception := esException(t, "throttlingException", `{"message":"Too many requests"}`)
	bad := []byte(esChunk(t, `{"type":"message_delta","usage":{"output_tokens":5000}}`))
	bad[len(bad)-1] ^= 0xff // its message CRC no longer checks
	cases := []struct {
		name, path, body, want string
	}{
		{"invoke stream", "/model/" + bedrockModelID + "/invoke-with-response-stream", bedrockInvokeStream(t), "claude-sonnet-4-5-20250929 10 25 3 7"},
		{"converse stream", "/model/" + bedrockModelID + "/converse-stream", bedrockConverseStream(t), " 100 20 50 5"},
		{"an exception carries no usage", "/model/m/invoke-with-response-stream", string(exception), " - - - -"},
		{"a message whose CRC fails is skipped", "/model/m/invoke-with-response-stream", cat(
			esChunk(t, `{"type":"message_start","message":{"model":"m","usage":{"input_tokens":4,"output_tokens":1}}}`), bad,
			esChunk(t, `{"type":"message_delta","usage":{"output_tokens":6}}`)), "m 4 6 - -"},
		{"a length out of bounds ends the parse", "/model/m/invoke-with-response-stream", cat(
			esChunk(t, `{"type":"message_start","message":{"model":"m","usage":{"input_tokens":4,"output_tokens":1}}}`),
			[]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
			esChunk(t, `{"type":"message_delta","usage":{"output_tokens":6}}`)), "m 4 1 - -"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			feeds := [][]string{{c.body}, splitEvery(c.body, 1)}
			for i := 1; i < len(c.body); i += max(1, len(c.body)/97) {
				feeds = append(feeds, []string{c.body[:i], c.body[i:]})
			}
			for _, parts := range feeds {
				p := newUsageParser(APIOf(c.path), esType)
				for _, part := range parts {
					p.Write([]byte(part))
				}
				if got := fmtUsage(p.Finish()); got != c.want {
					t.Fatalf("%d parts: got %q, want %q", len(parts), got, c.want)
				}
				if cap(p.frame) > maxEvent {
					t.Fatalf("kept %d bytes", cap(p.frame))
				}
			}
		})
	}
}

// TestGatewayUsageOfBedrockVertexFoundry sends Bedrock's InvokeModel and
// Converse (JSON and event stream), Vertex AI's rawPredict and
// streamRawPredict and Foundry's Messages API through the gateway to an
// upstream answering each as the provider does: every call is recorded
// with its API, its model (the response's, else the path's) and its
// usage.
func TestGatewayUsageOfBedrockVertexFoundry(t *testing.T) {
	messagesJSON := `{"id":"msg_1","type":"message","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":1200,"output_tokens":40,"cache_creation_input_tokens":300,"cache_read_input_tokens":5000}}`
	messagesSSE := sse(
		`event: message_start`+"\n"+`data: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":7,"cache_read_input_tokens":3}}}`,
		`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":25}}`,
		`event: message_stop`+"\n"+`data: {"type":"message_stop"}`)
	vertex := "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929"
	bedrock := "/model/" + url.PathEscape(bedrockModelID)
	answers := map[string]struct{ ct, body string }{
		bedrock + "/invoke-with-response-stream": {esType, bedrockInvokeStream(t)},
		bedrock + "/converse-stream":             {esType, bedrockConverseStream(t)},
		bedrock + "/invoke":                      {"application/json", messagesJSON},
		bedrock + "/converse":                    {"application/json", `{"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":100,"outputTokens":20,"totalTokens":175,"cacheReadInputTokens":50,"cacheWriteInputTokens":5},"metrics":{"latencyMs":800}}`},
		vertex + ":streamRawPredict":             {"text/event-stream", messagesSSE},
		vertex + ":rawPredict":                   {"application/json", messagesJSON},
		"/anthropic/v1/messages":                 {"application/json", messagesJSON},
	}
	ca, _ := tlsca.New("upstream CA")
	certPEM, keyPEM, _ := tlsca.ServerCert(ca, "provider.test")
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a, ok := answers[r.URL.EscapedPath()]
		if !ok {
			http.Error(w, "no "+r.URL.EscapedPath(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", a.ct)
		// Written in pieces across message boundaries, each flushed.
		for b := []byte(a.body); len(b) > 0; {
			k := min(len(b), 37)
			w.Write(b[:k])
			w.(http.Flusher).Flush()
			b = b[k:]
		}
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := "provider.test:" + port
	runCA, _ := tlsca.New("run CA")
	upRoots, _ := ca.Pool()
	calls := &callCollector{}
	proxy := startProxy(t, Config{Policy: policy(t, host), Resolver: mapResolver{"provider.test": loopback}, AllowLoopbackUpstreams: true,
		UpstreamRoots: upRoots, ModelSink: calls.sink,
		Gateway: &Gateway{CA: runCA, Routes: []providers.Route{{Provider: "bedrock", Hosts: []string{host}}}}})
	roots, _ := runCA.Pool()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	cases := []struct{ path, api, want string }{
		{bedrock + "/invoke-with-response-stream", APIBedrockInvoke, "claude-sonnet-4-5-20250929 10 25 3 7"},
		{bedrock + "/converse-stream", APIBedrockConverse, bedrockModelID + " 100 20 50 5"},
		{bedrock + "/invoke", APIBedrockInvoke, "claude-sonnet-4-5-20250929 1200 40 5000 300"},
		{bedrock + "/converse", APIBedrockConverse, bedrockModelID + " 100 20 50 5"},
		{vertex + ":streamRawPredict", APIAnthropicMessages, "claude-sonnet-4-5-20250929 10 25 3 7"},
		{vertex + ":rawPredict", APIAnthropicMessages, "claude-sonnet-4-5-20250929 1200 40 5000 300"},
		{"/anthropic/v1/messages", APIAnthropicMessages, "claude-sonnet-4-5-20250929 1200 40 5000 300"},
	}
	for _, cs := range cases {
		resp, body := post(t, c, "https://"+host+cs.path, nil, `{"anthropic_version":"bedrock-2023-05-31","messages":[]}`)
		if resp.StatusCode != 200 || body != answers[cs.path].body {
			t.Fatalf("%s: %d, body %d bytes, want %d", cs.path, resp.StatusCode, len(body), len(answers[cs.path].body))
		}
	}
	for i, m := range calls.waitFor(t, len(cases)) {
		cs := cases[i]
		g := fmtUsage(Usage{Model: m.Model, Input: m.InputTokens, Output: m.OutputTokens, CacheRead: m.CacheReadTokens, CacheWrite: m.CacheWriteTokens})
		wantStream := strings.Contains(cs.path, "stream")
		if g != cs.want || m.API != cs.api || m.Stream != wantStream {
			t.Errorf("%s: %s (%s, stream %v), want %s (%s, stream %v)", cs.path, g, m.API, m.Stream, cs.want, cs.api, wantStream)
		}
	}
}

// TestGatewayKeepsSigV4SignedHeaders: a Bedrock request signed with AWS
// Signature Version 4 over Accept-Encoding reaches Bedrock with the header
// it was signed with (the gateway asks for an uncompressed answer only
// where no signature covers the header).
func TestGatewayKeepsSigV4SignedHeaders(t *testing.T) {
	ca, _ := tlsca.New("upstream CA")
	certPEM, keyPEM, _ := tlsca.ServerCert(ca, "provider.test")
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"inputTokens":1,"outputTokens":2}}`)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := "provider.test:" + port
	runCA, _ := tlsca.New("run CA")
	upRoots, _ := ca.Pool()
	proxy := startProxy(t, Config{Policy: policy(t, host), Resolver: mapResolver{"provider.test": loopback}, AllowLoopbackUpstreams: true,
		UpstreamRoots: upRoots, ModelSink: (&callCollector{}).sink,
		Gateway: &Gateway{CA: runCA, Routes: []providers.Route{{Provider: "bedrock", Hosts: []string{host}}}}})
	roots, _ := runCA.Pool()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	sig := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/us-east-1/bedrock/aws4_request, SignedHeaders=%s, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
	for _, c2 := range []struct{ signed, want string }{
		{"accept-encoding;content-type;host;x-amz-date", "gzip, br"},
		{"content-type;host;x-amz-date", "identity"},
	} {
		resp, body := post(t, c, "https://"+host+"/model/m/converse", map[string]string{
			"Authorization": strings.Replace(sig, "%s", c2.signed, 1), "Accept-Encoding": "gzip, br", "X-Amz-Date": "20261202T190000Z"}, `{}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if got := <-seen; got != c2.want {
			t.Errorf("signed %s: Bedrock got Accept-Encoding %q, want %q", c2.signed, got, c2.want)
		}
	}
}

package proxylogger

import (
	"fmt"
	"strings"
	"testing"
)

func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e)
		b.WriteString("\n\n")
	}
	return b.String()
}

// usageCases are one response of each shape the parser reads, with the
// figures it must find.
var usageCases = []struct {
	name, path string
	sse        bool
	body       string
	want       string // model in out cacheRead cacheWrite, "-" for nil
}{
	{"anthropic json", "/v1/messages", false,
		`{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[{"type":"text","text":"usage: input_tokens 999"}],"usage":{"input_tokens":1200,"output_tokens":40,"cache_creation_input_tokens":300,"cache_read_input_tokens":5000}}`,
		"claude-sonnet-4-5 1200 40 5000 300"},
	{"anthropic sse", "/anthropic/v1/messages", true, sse(
		`event: message_start`+"\n"+`data: {"type":"message_start","message":{"model":"claude-haiku-4-5","usage":{"input_tokens":10,"output_tokens":1,"cache_creation_input_tokens":7,"cache_read_input_tokens":3}}}`,
		`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"{\"usage\":{\"output_tokens\":77}}"}}`,
		`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":25}}`,
		`event: message_stop`+"\n"+`data: {"type":"message_stop"}`),
		"claude-haiku-4-5 10 25 3 7"},
	{"anthropic sse with cumulative input in the delta", "/v1/messages", true, sse(
		`data: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`,
		`data: {"type":"message_delta","usage":{"input_tokens":12,"output_tokens":30,"cache_read_input_tokens":4}}`),
		"m 12 30 4 -"},
	{"openai chat json", "/v1/chat/completions", false,
		`{"id":"c","object":"chat.completion","model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":60}}}`,
		"gpt-4o-2024-08-06 40 20 60 0"},
	{"openai chat sse", "/v1/chat/completions", true, sse(
		`data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"delta":{"content":"hi"}}]}`,
		`data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":9}}`,
		`data: [DONE]`),
		"gpt-4.1 50 9 0 0"},
	{"openai chat sse without usage", "/v1/chat/completions", true, sse(
		`data: {"object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"delta":{"content":"hi"}}]}`,
		`data: [DONE]`),
		"gpt-4.1 - - - -"},
	{"openai responses json", "/v1/responses", false,
		`{"id":"r","object":"response","model":"o3","output":[],"usage":{"input_tokens":300,"input_tokens_details":{"cached_tokens":100},"output_tokens":80,"output_tokens_details":{"reasoning_tokens":50}}}`,
		"o3 200 80 100 0"},
	{"openai responses sse", "/v1/responses", true, sse(
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5\",\"usage\":null}}",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":30,\"output_tokens\":7,\"input_tokens_details\":{\"cached_tokens\":0}}}}"),
		"gpt-5 30 7 0 0"},
	{"gemini json", "/v1beta/models/gemini-2.5-pro:generateContent", false,
		`{"candidates":[],"usageMetadata":{"promptTokenCount":90,"candidatesTokenCount":15,"thoughtsTokenCount":5,"cachedContentTokenCount":40,"totalTokenCount":110},"modelVersion":"gemini-2.5-pro"}`,
		"gemini-2.5-pro 50 20 40 0"},
	{"gemini sse", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", true, sse(
		`data: {"candidates":[{"content":{"parts":[{"text":"a"}]}}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":1},"modelVersion":"gemini-2.5-flash"}`,
		`data: {"candidates":[{"content":{"parts":[{"text":"b"}]}}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":6,"totalTokenCount":15},"modelVersion":"gemini-2.5-flash"}`),
		"gemini-2.5-flash 9 6 0 0"},
	{"gemini json array stream", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", false,
		`[{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":1}},{"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4},"modelVersion":"gemini-2.5-flash"}]`,
		"gemini-2.5-flash 9 4 0 0"},
	{"count_tokens has no usage", "/v1/messages/count_tokens", false, `{"input_tokens":44}`, " - - - -"},
	{"error answer", "/v1/messages", false, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, " - - - -"},
	{"stream without a final blank line", "/v1/messages", true,
		`data: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":1,"output_tokens":1}}}` + "\n\n" +
			`data: {"type":"message_delta","usage":{"output_tokens":2}}`,
		"m 1 2 - -"},
	{"an event's data across lines", "/v1/messages", true,
		"data: {\"type\":\"message_start\",\n: a comment\ndata: \"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n" +
			"data: {\"type\":\"message_delta\",\ndata: \"usage\":{\"output_tokens\":7}}\n\n",
		"m 5 7 - -"},
	{"CRLF lines", "/v1/messages", true,
		"data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\r\n\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\r\n\r\n",
		"m 5 3 - -"},
}

func fmtUsage(u Usage) string {
	n := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return strings.Join([]string{u.Model, n(u.Input), n(u.Output), n(u.CacheRead), n(u.CacheWrite)}, " ")
}

func TestUsageParserShapes(t *testing.T) {
	for _, c := range usageCases {
		t.Run(c.name, func(t *testing.T) {
			// Whole, and split at every byte boundary into two writes, and
			// fed one byte at a time: a stream read in any pieces gives
			// the same figures.
			feeds := [][]string{{c.body}, splitEvery(c.body, 1)}
			for i := 1; i < len(c.body); i += max(1, len(c.body)/97) {
				feeds = append(feeds, []string{c.body[:i], c.body[i:]})
			}
			for _, parts := range feeds {
				p := newUsageParser(APIOf(c.path), contentType(c.sse))
				for _, part := range parts {
					if n, err := p.Write([]byte(part)); n != len(part) || err != nil {
						t.Fatalf("write %d, %v", n, err)
					}
				}
				u := p.Finish()
				if got := fmtUsage(u); got != c.want {
					t.Fatalf("%d parts: got %q, want %q", len(parts), got, c.want)
				}
			}
		})
	}
}

func contentType(sse bool) string {
	if sse {
		return "text/event-stream; charset=utf-8"
	}
	return "application/json"
}

func splitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

func TestUsageParserBounds(t *testing.T) {
	// An event larger than maxEvent is skipped, the others still count.
	big := `data: {"type":"content_block_delta","delta":{"text":"` + strings.Repeat("x", maxEvent) + `"}}`
	p := newUsageParser(APIAnthropicMessages, "text/event-stream")
	for _, e := range []string{
		`data: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":1,"output_tokens":0}}}`, big,
		`data: {"type":"message_delta","usage":{"output_tokens":9}}`,
	} {
		p.Write([]byte(e + "\n\n"))
	}
	if got := fmtUsage(p.Finish()); got != "m 1 9 - -" {
		t.Errorf("got %q", got)
	}
	if len(p.line) != 0 || cap(p.data) > 2*maxEvent {
		t.Errorf("kept %d/%d bytes", len(p.line), cap(p.data))
	}
}

func TestAPIOfAndGeminiModel(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/messages": APIAnthropicMessages, "/v1/messages/count_tokens": "", "/v1/models": "",
		"/openai/v1/chat/completions": APIOpenAIChat, "/v1/responses": APIOpenAIResponses,
		"/v1beta/models/gemini-2.5-pro:streamGenerateContent":                                                   APIGeminiGenerate,
		"/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-1@20250805:streamRawPredict": APIAnthropicMessages,
		"/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-1@20250805:rawPredict":       APIAnthropicMessages,
		"/v1/projects/p/locations/global/publishers/anthropic/models/count-tokens:rawPredict":                   "",
		"/anthropic/v1/messages":                                                                                                       APIAnthropicMessages,
		"/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke":                                                                   APIBedrockInvoke,
		"/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke-with-response-stream":                                              APIBedrockInvoke,
		"/model/anthropic.claude-3-haiku-20240307-v1:0/converse":                                                                       APIBedrockConverse,
		"/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream": APIBedrockConverse,
		"/model/m/count-tokens": "",
	} {
		if got := APIOf(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	for path, want := range map[string]string{
		"/v1beta/models/gemini-2.5-pro:generateContent":                                                              "gemini-2.5-pro",
		"/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict":        "claude-sonnet-4-5@20250929",
		"/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke":                                                 "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
		"/model/arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse": "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0",
		"/v1/messages": "",
	} {
		if got := modelOfPath(path); got != want {
			t.Errorf("model of %s: %q, want %q", path, got, want)
		}
	}
}

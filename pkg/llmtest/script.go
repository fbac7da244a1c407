// Package llmtest is a scripted model endpoint: an HTTP(S) server that
// speaks the Anthropic Messages API (POST /v1/messages), OpenAI's Chat
// Completions (/v1/chat/completions) and Responses (/v1/responses) and
// Gemini's generateContent and streamGenerateContent
// (/v1beta/models/MODEL:...), each streamed as its API streams or answered
// as one JSON body, and answers each request from a script instead of a
// model, recording every request it got. The docker-claude arms and the
// model gateway are tested with real clients against it, and `proctor
// serve fake-model --script FILE [--tls-cert F --tls-key F]` runs it as a
// process.
//
// The script (YAML, or JSON, which is YAML) lists the replies of the
// conversation by turn:
//
//	model: claude-sonnet-4-5          # echoed when a reply names none (default: the request's model)
//	replies:
//	  - text: "Let me look."          # a text block
//	    tool_use:                     # then any number of tool_use blocks
//	      - name: Bash                # any tool name the client offered, or not
//	        input: {command: "ls /app"}
//	    usage: {input_tokens: 1200, output_tokens: 40, cache_read_input_tokens: 0, cache_creation_input_tokens: 0}
//	  - error: {status: 529, type: overloaded_error, message: "Overloaded"}   # retry: true lets the client retry
//	  - error: {status: 429, times: 1}  # the first request of this turn only; later ones get the rest of the reply
//	    text: "Now it works."
//	  - hang: true                    # message_start, then nothing until the client goes
//	  - text: "Done."                 # stop_reason end_turn (tool_use when the reply has tool_use)
//	after: end                        # past the last reply: "end" (default) a text "done" ending the turn, "repeat" the last reply again
//	cases:                            # optional: conversations chosen by a string of the request
//	  - when: "CASE-429"
//	    replies: [{error: {status: 429}}]
//	  - when: "CASE-A"
//	    api: openai.responses       # optional: only requests of this API (anthropic, openai.chat, gemini)
//	    replies: [{text: "codex"}]
//
// The turn of a request is the number of the model's earlier answers in
// it (assistant messages; the Responses API's assistant and function_call
// input items; Gemini's "model" contents), so a client's retry of a turn (after a 429 or 529) gets
// the same reply again: an error reply is an error for every retry of its
// turn, unless its times limits it to the first requests of that turn
// (counted per server, over every client: a second run of the same task
// gets the rest of the reply). A reply with When set is used only when the request's system
// prompt or messages contain that string (a skill the client listed);
// otherwise the next reply of the same turn number in Alt is used.
package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/goccy/go-yaml"
)

// Script is a scripted conversation.
type Script struct {
	// Model is the model name the replies carry ("" echoes the request's).
	Model string `json:"model,omitempty"`
	// Replies are the answers by turn: Replies[0] answers a request with no
	// assistant message yet, Replies[1] one with one, and so on.
	Replies []Reply `json:"replies"`
	// Alt are the replies used instead of Replies[i] when Replies[i].When
	// is set and the request does not contain it (same indexing; may be
	// shorter, then After applies).
	Alt []Reply `json:"alt,omitempty"`
	// Cases are whole conversations chosen by the request: the first case
	// whose When the request body contains answers it from its own
	// Replies (and After); a request no case matches is answered from
	// Replies and Alt. One endpoint so serves many tasks, told apart by
	// a string of their prompts.
	Cases []Case `json:"cases,omitempty"`
	// After is what answers a turn past the last reply: "end" (default)
	// a text reply "done" with stop_reason end_turn, "repeat" the last
	// reply again.
	After string `json:"after,omitempty"`
}

// Case is a conversation of a Script chosen by a string of the request
// and, when API is set, by the API the request speaks ("anthropic",
// "openai.chat", "openai.responses", "gemini"): one script so answers
// two agent CLIs differently on the same task.
type Case struct {
	When    string  `json:"when"`
	API     string  `json:"api,omitempty"`
	Replies []Reply `json:"replies"`
	After   string  `json:"after,omitempty"`
}

// Reply is one turn's answer.
type Reply struct {
	// When, if set, makes this reply apply only to a request whose body
	// contains the string; otherwise Script.Alt at the same turn answers.
	When string `json:"when,omitempty"`
	// Text is the text block, before any tool_use block ("" none).
	Text string `json:"text,omitempty"`
	// ToolUse are tool_use blocks, streamed with input_json_delta.
	ToolUse []ToolUse `json:"tool_use,omitempty"`
	// StopReason defaults to tool_use when ToolUse is set, else end_turn.
	StopReason string `json:"stop_reason,omitempty"`
	// Usage are the token figures of the reply (zero values by default).
	Usage Usage `json:"usage,omitempty"`
	// Model overrides Script.Model for this reply.
	Model string `json:"model,omitempty"`
	// Error answers the request with an HTTP error instead.
	Error *ErrorReply `json:"error,omitempty"`
	// Hang starts the stream (message_start, a text block start) and then
	// sends nothing until the client disconnects or the server closes.
	Hang bool `json:"hang,omitempty"`
	// Large appends this many bytes of filler ("x") to the text: a reply
	// whose text makes a long result line.
	Large int `json:"large,omitempty"`
}

// ToolUse is one tool_use block.
type ToolUse struct {
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

// Usage are an Anthropic reply's token counts.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// ErrorReply is an HTTP error answer in the Anthropic error shape
// {"type":"error","error":{"type":...,"message":...}}.
type ErrorReply struct {
	// Status is the HTTP status (429, 529, 401, 400, 500...).
	Status int `json:"status"`
	// Type is the error type (default rate_limit_error for 429,
	// overloaded_error for 529, authentication_error for 401, else
	// api_error).
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	// Retry lets the client retry: the answer carries retry-after-ms: 10
	// (which Claude Code 2.1.332 does not honour: it backs off up to 10
	// times, for minutes). Without it the answer carries x-should-retry:
	// false, which the Anthropic SDKs obey by giving up at once.
	Retry bool `json:"retry,omitempty"`
	// Times, when above 0, answers with the error only the first Times
	// requests of its turn (per conversation: case, or replies/alt); the
	// requests after them get the rest of the reply (its text, tool_use,
	// usage) as if it had no error.
	Times int `json:"times,omitempty"`
}

// LoadScript reads a script file (YAML or JSON); an error names the file
// and, for a parse error, the line.
func LoadScript(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseScript(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseScript parses a script and checks it: unknown keys are refused, an
// error reply needs a 4xx/5xx status, a tool_use needs a name.
func ParseScript(b []byte) (*Script, error) {
	var s Script
	if err := yaml.UnmarshalWithOptions(b, &s, yaml.Strict(), yaml.UseJSONUnmarshaler()); err != nil {
		return nil, fmt.Errorf("fake model script: %s", yaml.FormatError(err, false, true))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks the script's values.
func (s *Script) Validate() error {
	switch s.After {
	case "", "end", "repeat":
	default:
		return fmt.Errorf("fake model script: after: %q is not end or repeat", s.After)
	}
	check := func(key string, rs []Reply) error {
		for i, r := range rs {
			if r.Error != nil && (r.Error.Status < 400 || r.Error.Status > 599) {
				return fmt.Errorf("fake model script: %s[%d].error.status: %d is not an HTTP error status", key, i, r.Error.Status)
			}
			if r.Error != nil && r.Error.Times < 0 {
				return fmt.Errorf("fake model script: %s[%d].error.times: %d is below 0", key, i, r.Error.Times)
			}
			for j, tu := range r.ToolUse {
				if tu.Name == "" {
					return fmt.Errorf("fake model script: %s[%d].tool_use[%d].name is empty", key, i, j)
				}
			}
		}
		return nil
	}
	if err := check("replies", s.Replies); err != nil {
		return err
	}
	for i, c := range s.Cases {
		if c.When == "" {
			return fmt.Errorf("fake model script: cases[%d].when is empty", i)
		}
		if c.API != "" && c.API != apiAnthropic && c.API != apiChat && c.API != apiResponses && c.API != apiGemini {
			return fmt.Errorf("fake model script: cases[%d].api: %q is not anthropic, openai.chat, openai.responses or gemini", i, c.API)
		}
		if c.After != "" && c.After != "end" && c.After != "repeat" {
			return fmt.Errorf("fake model script: cases[%d].after: %q is not end or repeat", i, c.After)
		}
		if err := check(fmt.Sprintf("cases[%d].replies", i), c.Replies); err != nil {
			return err
		}
	}
	return check("alt", s.Alt)
}

// reply picks the answer of turn n for a request body, and names the
// conversation it came from ("case<i>", "replies", "alt") for counting its
// requests.
func (s *Script) reply(n int, api string, body []byte) (Reply, string) {
	after := s.After
	pick := func(rs []Reply) (Reply, bool) {
		if n < len(rs) {
			return rs[n], true
		}
		if after == "repeat" && len(rs) > 0 {
			return rs[len(rs)-1], true
		}
		return Reply{}, false
	}
	for i, c := range s.Cases {
		if bytes.Contains(body, []byte(c.When)) && (c.API == "" || c.API == api) {
			after = c.After
			if r, ok := pick(c.Replies); ok {
				return r, fmt.Sprintf("case%d", i)
			}
			return Reply{Text: "done", StopReason: "end_turn"}, ""
		}
	}
	r, ok := pick(s.Replies)
	from := "replies"
	if ok && r.When != "" && !bytes.Contains(body, []byte(r.When)) {
		r, ok = pick(s.Alt)
		from = "alt"
	}
	if !ok {
		return Reply{Text: "done", StopReason: "end_turn"}, ""
	}
	return r, from
}

// MarshalJSON-free helper: the input of a tool_use as compact JSON.
func toolInput(in map[string]any) string {
	if in == nil {
		return "{}"
	}
	b, err := json.Marshal(in)
	if err != nil {
		return "{}"
	}
	return string(b)
}

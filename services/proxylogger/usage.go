package proxylogger

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"
)

// APIs the usage parser knows, as ModelCall.API names them.
const (
	APIAnthropicMessages = "anthropic.messages"
	APIOpenAIChat        = "openai.chat"
	APIOpenAIResponses   = "openai.responses"
	APIGeminiGenerate    = "gemini.generate"
	// Bedrock's InvokeModel (/model/{id}/invoke; with a stream,
	// invoke-with-response-stream): an Anthropic model's Messages body,
	// or an event stream of its events as chunks.
	APIBedrockInvoke = "bedrock.invoke"
	// Bedrock's Converse and ConverseStream (/model/{id}/converse,
	// converse-stream).
	APIBedrockConverse = "bedrock.converse"
)

// APIOf returns the API a request path is a call of, by its suffix (so a
// gateway's prefix, /anthropic/v1/messages, is still the Messages API),
// or "" for any other path (count_tokens, models, files: requests without
// usage). Vertex AI's rawPredict and streamRawPredict on an Anthropic
// model answer the Messages API; Foundry's /anthropic/v1/messages is it.
func APIOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/messages"):
		return APIAnthropicMessages
	case strings.HasSuffix(path, "/chat/completions"):
		return APIOpenAIChat
	case strings.HasSuffix(path, "/responses"):
		return APIOpenAIResponses
	case strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent"):
		return APIGeminiGenerate
	case vertexAnthropicModel(path) != "":
		return APIAnthropicMessages
	}
	if _, op := bedrockModel(path); op == "invoke" || op == "invoke-with-response-stream" {
		return APIBedrockInvoke
	} else if op == "converse" || op == "converse-stream" {
		return APIBedrockConverse
	}
	return ""
}

// modelOfPath returns the model a request's path names (Gemini, Vertex
// AI, Bedrock), or "".
func modelOfPath(path string) string {
	if m := vertexAnthropicModel(path); m != "" {
		return m
	}
	if m, _ := bedrockModel(path); m != "" {
		return m
	}
	if APIOf(path) == APIGeminiGenerate {
		return geminiModel(path)
	}
	return ""
}

// geminiModel returns the model named in a Gemini path
// (.../models/gemini-2.5-pro:generateContent), or "".
func geminiModel(path string) string {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return ""
	}
	m, _, _ := strings.Cut(path[i+len("/models/"):], ":")
	return m
}

// vertexAnthropicModel returns the model of a Vertex AI call of an
// Anthropic model (.../publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict),
// or "" (another path, or count-tokens, which reports no usage).
func vertexAnthropicModel(path string) string {
	i := strings.LastIndex(path, "/publishers/anthropic/models/")
	if i < 0 {
		return ""
	}
	m, method, ok := strings.Cut(path[i+len("/publishers/anthropic/models/"):], ":")
	if !ok || m == "count-tokens" || (method != "rawPredict" && method != "streamRawPredict") {
		return ""
	}
	return m
}

// bedrockModel splits a Bedrock runtime path, /model/{modelId}/{op},
// into its model id (unescaped; an ARN's slashes kept) and its operation,
// or returns "", "".
func bedrockModel(path string) (model, op string) {
	rest, ok := strings.CutPrefix(path, "/model/")
	if !ok {
		return "", ""
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", ""
	}
	model, op = rest[:i], rest[i+1:]
	if m, err := url.PathUnescape(model); err == nil {
		model = m
	}
	return model, op
}

var (
	usageWord = []byte(`sage`) // "usage", "usageMetadata"
	modelWord = []byte(`odel`) // "model", "modelVersion"
)

// Usage are the figures a response reported; a nil count was not
// reported.
type Usage struct {
	Model                                  string
	Input, Output, CacheRead, CacheWrite   *int64
	inputTotal, cachedInput, geminiToolUse *int64 // OpenAI's and Gemini's inputs include the cached ones
	geminiThoughts, geminiCandidates       *int64
}

// Limits of the parser: a JSON body beyond maxJSON, or one Server-Sent
// event beyond maxEvent, is not parsed (the call is recorded without its
// usage); nothing is ever kept past the parse.
const (
	maxJSON  = 32 << 20
	maxEvent = 1 << 20
)

// usageParser reads a response body as it streams to the client (Write),
// and Finish returns its usage. It keeps only a bounded JSON body, the
// current Server-Sent event or the current event-stream message, never the
// whole stream.
type usageParser struct {
	api    string
	sse    bool
	es     bool // an AWS event stream (application/vnd.amazon.eventstream)
	u      Usage
	body   bytes.Buffer // a JSON body
	over   bool         // the JSON body or an event overflowed
	line   []byte       // the current SSE line, across writes
	data   []byte       // the current SSE event's data lines
	hasEvt bool
	// ref is the current event's only data line while it is still in the
	// bytes being written (inRef); keepData copies it to data.
	ref   []byte
	inRef bool
	frame []byte // the current event-stream message, across writes
	lost  bool   // the event stream is past a message it could not frame
}

// newUsageParser returns a parser of a response of api whose body has
// contentType.
func newUsageParser(api, contentType string) *usageParser {
	ct := strings.ToLower(contentType)
	return &usageParser{api: api,
		sse: strings.HasPrefix(ct, "text/event-stream"),
		es:  strings.HasPrefix(ct, "application/vnd.amazon.eventstream")}
}

// streamed reports whether the body is a stream of events.
func (p *usageParser) streamed() bool { return p.sse || p.es }

// Write feeds response body bytes; it never fails.
func (p *usageParser) Write(b []byte) (int, error) {
	if p.api == "" {
		return len(b), nil
	}
	if p.es {
		p.frames(b)
		return len(b), nil
	}
	if !p.sse {
		if !p.over {
			if p.body.Len()+len(b) > maxJSON {
				p.over = true
				p.body = bytes.Buffer{}
			} else {
				p.body.Write(b)
			}
		}
		return len(b), nil
	}
	// Lines whole in b are read where they are; only a line across
	// writes, and the data of an event not yet ended, are copied.
	rest := b
	if len(p.line) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			p.appendLine(rest)
			return len(b), nil
		}
		p.appendLine(rest[:i])
		p.sseLine(p.line)
		p.keepData()
		p.line = p.line[:0]
		rest = rest[i+1:]
	}
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			p.appendLine(rest)
			break
		}
		p.sseLine(rest[:i])
		rest = rest[i+1:]
	}
	p.keepData()
	return len(b), nil
}

// keepData copies the current event's data out of the bytes being
// written, which the caller reuses.
func (p *usageParser) keepData() {
	if p.inRef {
		p.data = append(p.data[:0], p.ref...)
		p.ref, p.inRef = nil, false
	}
}

func (p *usageParser) appendLine(b []byte) {
	if len(p.line)+len(b) > maxEvent {
		p.over = true
		p.line = p.line[:0]
		return
	}
	p.line = append(p.line, b...)
}

// sseLine handles one line of an event stream (text/event-stream: "data:"
// lines accumulate, a blank line dispatches, other fields are ignored).
func (p *usageParser) sseLine(l []byte) {
	l = bytes.TrimSuffix(l, []byte("\r"))
	if len(l) == 0 {
		if p.inRef {
			p.event(p.ref)
		} else if p.hasEvt {
			p.event(p.data)
		}
		p.data, p.hasEvt, p.ref, p.inRef = p.data[:0], false, nil, false
		return
	}
	if v, ok := bytes.CutPrefix(l, []byte("data:")); ok {
		v = bytes.TrimPrefix(v, []byte(" "))
		if !p.hasEvt {
			// An event's first data line is kept where it is: most
			// events are one line, ended in the same write.
			if len(v)+1 > maxEvent {
				p.over = true
				return
			}
			p.ref, p.inRef, p.hasEvt = v, true, true
			return
		}
		p.keepData()
		if len(p.data)+len(v)+1 > maxEvent {
			p.over = true
			return
		}
		p.data = append(p.data, '\n')
		p.data = append(p.data, v...)
	}
}

// event reads one SSE event's data. Only an event that names usage, or
// a model while none is known, is parsed: the many content deltas of a
// stream are skipped with a byte search.
func (p *usageParser) event(d []byte) {
	if !bytes.Contains(d, usageWord) && (p.u.Model != "" || !bytes.Contains(d, modelWord)) {
		return
	}
	if !gjson.ValidBytes(d) {
		return // [DONE], a keep-alive, a truncated event
	}
	switch p.api {
	case APIAnthropicMessages:
		p.anthropicEvent(d)
	case APIOpenAIChat:
		p.model(gjson.GetBytes(d, "model"))
		p.openAIChat(gjson.GetBytes(d, "usage"))
	case APIOpenAIResponses:
		r := gjson.GetBytes(d, "response")
		if r.Exists() {
			p.model(r.Get("model"))
			p.openAIResponses(r.Get("usage"))
		}
	case APIGeminiGenerate:
		p.gemini(gjson.ParseBytes(d))
	}
}

// anthropicEvent reads one event of a Messages API stream.
func (p *usageParser) anthropicEvent(d []byte) {
	switch gjson.GetBytes(d, "type").String() {
	case "message_start":
		m := gjson.GetBytes(d, "message")
		p.model(m.Get("model"))
		p.anthropic(m.Get("usage"))
	case "message_delta":
		// Cumulative counts: each field present replaces the start's.
		p.anthropic(gjson.GetBytes(d, "usage"))
	}
}

// minFrame is the size of an event-stream message with no headers and
// no payload: prelude (total and headers lengths), its CRC, message CRC.
const minFrame = 16

// frames reads an event stream's bytes: each whole message (its total
// length is its first 4 bytes) is decoded by the AWS SDK's decoder, which
// checks its CRCs; a message across writes is kept until whole. A length
// out of bounds loses the stream's framing: nothing after it is read.
func (p *usageParser) frames(b []byte) {
	for len(b) > 0 && !p.lost {
		if len(p.frame) == 0 && len(b) >= 4 {
			n := int(binary.BigEndian.Uint32(b))
			if n < minFrame || n > maxEvent {
				p.lose()
				return
			}
			if len(b) >= n {
				p.message(b[:n])
				b = b[n:]
				continue
			}
		}
		if len(p.frame) < 4 {
			k := min(len(b), 4-len(p.frame))
			p.frame, b = append(p.frame, b[:k]...), b[k:]
			if len(p.frame) < 4 {
				return
			}
		}
		n := int(binary.BigEndian.Uint32(p.frame))
		if n < minFrame || n > maxEvent {
			p.lose()
			return
		}
		k := min(len(b), n-len(p.frame))
		p.frame, b = append(p.frame, b[:k]...), b[k:]
		if len(p.frame) == n {
			p.message(p.frame)
			p.frame = p.frame[:0]
		}
	}
}

func (p *usageParser) lose() {
	p.lost, p.over = true, true
	p.frame = nil
}

// message reads one event-stream message: an event of InvokeModel's
// stream (a chunk: {"bytes": base64 of a Messages API event}, the last
// one also with Bedrock's amazon-bedrock-invocationMetrics) or of
// ConverseStream's (metadata: {"usage": ...}). Exceptions and other
// events carry no usage.
func (p *usageParser) message(frame []byte) {
	m, err := eventstream.NewDecoder().Decode(bytes.NewReader(frame), nil)
	if err != nil {
		return // a CRC or header that does not check: skipped, the next is framed by its length
	}
	if v := m.Headers.Get(":message-type"); v == nil || v.String() != "event" {
		return
	}
	ev := m.Headers.Get(":event-type")
	if ev == nil {
		return
	}
	switch p.api {
	case APIBedrockInvoke:
		if ev.String() != "chunk" {
			return
		}
		b := gjson.GetBytes(m.Payload, "bytes")
		if b.Type != gjson.String {
			return
		}
		d, err := base64.StdEncoding.DecodeString(b.Str)
		if err != nil || !gjson.ValidBytes(d) {
			return
		}
		p.anthropicEvent(d)
		p.bedrockMetrics(gjson.GetBytes(d, "amazon-bedrock-invocationMetrics"))
	case APIBedrockConverse:
		if ev.String() == "metadata" {
			p.bedrockConverse(gjson.GetBytes(m.Payload, "usage"))
		}
	}
}

// bedrockMetrics reads the invocation metrics Bedrock adds to the last
// chunk of an InvokeModel stream: the call's totals, as billed.
func (p *usageParser) bedrockMetrics(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	set(&p.u.Input, u.Get("inputTokenCount"))
	set(&p.u.Output, u.Get("outputTokenCount"))
	set(&p.u.CacheRead, u.Get("cacheReadInputTokenCount"))
	set(&p.u.CacheWrite, u.Get("cacheWriteInputTokenCount"))
}

// bedrockConverse reads Converse's usage (its inputTokens, as the Messages
// API's input_tokens, exclude the cached input counted beside them).
func (p *usageParser) bedrockConverse(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	set(&p.u.Input, u.Get("inputTokens"))
	set(&p.u.Output, u.Get("outputTokens"))
	set(&p.u.CacheRead, u.Get("cacheReadInputTokens"))
	set(&p.u.CacheWrite, u.Get("cacheWriteInputTokens"))
}

func (p *usageParser) model(v gjson.Result) {
	if s := v.String(); v.Type == gjson.String && s != "" {
		p.u.Model = s
	}
}

func set(dst **int64, v gjson.Result) {
	if v.Type == gjson.Number {
		n := v.Int()
		*dst = &n
	}
}

func (p *usageParser) anthropic(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	set(&p.u.Input, u.Get("input_tokens"))
	set(&p.u.Output, u.Get("output_tokens"))
	set(&p.u.CacheRead, u.Get("cache_read_input_tokens"))
	set(&p.u.CacheWrite, u.Get("cache_creation_input_tokens"))
}

func (p *usageParser) openAIChat(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	set(&p.u.inputTotal, u.Get("prompt_tokens"))
	set(&p.u.Output, u.Get("completion_tokens"))
	set(&p.u.cachedInput, u.Get("prompt_tokens_details.cached_tokens"))
}

func (p *usageParser) openAIResponses(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	set(&p.u.inputTotal, u.Get("input_tokens"))
	set(&p.u.Output, u.Get("output_tokens"))
	set(&p.u.cachedInput, u.Get("input_tokens_details.cached_tokens"))
}

// gemini reads one GenerateContentResponse (a whole body, or one chunk of
// a stream: each chunk's usageMetadata is the total so far).
func (p *usageParser) gemini(r gjson.Result) {
	p.model(r.Get("modelVersion"))
	u := r.Get("usageMetadata")
	if !u.IsObject() {
		return
	}
	set(&p.u.inputTotal, u.Get("promptTokenCount"))
	set(&p.u.geminiCandidates, u.Get("candidatesTokenCount"))
	set(&p.u.geminiThoughts, u.Get("thoughtsTokenCount"))
	set(&p.u.cachedInput, u.Get("cachedContentTokenCount"))
	set(&p.u.geminiToolUse, u.Get("toolUsePromptTokenCount"))
}

// Finish parses a JSON body (or the last SSE event, when the stream did
// not end with a blank line) and returns the usage: input without cached
// input, cached input as cache reads, 0 cache writes for OpenAI and Gemini
// (they bill none) once any usage was reported.
func (p *usageParser) Finish() Usage {
	if p.api == "" {
		return Usage{}
	}
	if p.sse {
		if len(p.line) > 0 {
			p.sseLine(p.line)
			p.keepData()
			p.line = p.line[:0]
		}
		if p.hasEvt {
			p.event(p.data)
			p.hasEvt = false
		}
	} else if !p.es && !p.over && p.body.Len() > 0 {
		b := p.body.Bytes()
		switch p.api {
		case APIAnthropicMessages, APIBedrockInvoke:
			p.model(gjson.GetBytes(b, "model"))
			p.anthropic(gjson.GetBytes(b, "usage"))
		case APIBedrockConverse:
			p.bedrockConverse(gjson.GetBytes(b, "usage"))
		case APIOpenAIChat:
			p.model(gjson.GetBytes(b, "model"))
			p.openAIChat(gjson.GetBytes(b, "usage"))
		case APIOpenAIResponses:
			p.model(gjson.GetBytes(b, "model"))
			p.openAIResponses(gjson.GetBytes(b, "usage"))
		case APIGeminiGenerate:
			// generateContent answers one object; streamGenerateContent
			// without alt=sse a JSON array of them, the last holding the
			// totals.
			r := gjson.ParseBytes(b)
			if r.IsArray() {
				r.ForEach(func(_, v gjson.Result) bool { p.gemini(v); return true })
			} else {
				p.gemini(r)
			}
		}
		p.body = bytes.Buffer{}
	}
	u := p.u
	if u.inputTotal != nil {
		in := *u.inputTotal
		cached := int64(0)
		if u.cachedInput != nil {
			cached = *u.cachedInput
		}
		if u.geminiToolUse != nil {
			in += *u.geminiToolUse
		}
		in -= cached
		u.Input, u.CacheRead = &in, &cached
		zero := int64(0)
		u.CacheWrite = &zero
	}
	if u.geminiCandidates != nil || u.geminiThoughts != nil {
		out := int64(0)
		for _, v := range []*int64{u.geminiCandidates, u.geminiThoughts} {
			if v != nil {
				out += *v
			}
		}
		u.Output = &out
	}
	return u
}

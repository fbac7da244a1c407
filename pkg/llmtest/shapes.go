package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
)

// The APIs the endpoint speaks besides Anthropic's Messages API, answered
// from the same script. Usage figures are the script's (Anthropic's
// names): OpenAI's and Gemini's input counts include the cached input
// (input_tokens + cache_read_input_tokens), with the cached part beside
// it; they have no cache writes.
const (
	apiAnthropic = "anthropic"
	apiChat      = "openai.chat"
	apiResponses = "openai.responses"
	apiGemini    = "gemini"
)

// requestBody is the part of any request the endpoint reads: the model,
// whether it streams, and what tells the turn (assistant messages; the
// Responses API's assistant and function_call input items; Gemini's
// model contents).
type requestBody struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role string `json:"role"`
	} `json:"messages"`
	Input         json.RawMessage         `json:"input"`
	Contents      []struct{ Role string } `json:"contents"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// turn counts the earlier answers of the model in the request, for api.
func (b requestBody) turn(api string) int {
	n := 0
	switch api {
	case apiGemini:
		for _, c := range b.Contents {
			if c.Role == "model" {
				n++
			}
		}
	case apiResponses:
		// One answer of the model is a run of output items (its
		// reasoning, message and function calls, as a client such as the
		// Codex CLI sends them back): a run counts once.
		var items []struct{ Role, Type string }
		if json.Unmarshal(b.Input, &items) == nil {
			inRun := false
			for _, it := range items {
				out := it.Role == "assistant" || it.Type == "function_call" || it.Type == "reasoning" || it.Type == "custom_tool_call"
				if out && !inRun {
					n++
				}
				inRun = out
			}
		}
	default:
		for _, m := range b.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
	}
	return n
}

// apiOf is the API of a POST path, or "".
func apiOf(path string) string {
	switch {
	case path == "/v1/messages":
		return apiAnthropic
	case path == "/v1/chat/completions":
		return apiChat
	case path == "/v1/responses":
		return apiResponses
	case strings.HasPrefix(path, "/v1beta/models/") && (strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent")):
		return apiGemini
	}
	return ""
}

// openAIUsage is a reply's usage as Chat Completions reports it.
func openAIUsage(u Usage) map[string]any {
	in := u.InputTokens + u.CacheReadInputTokens
	return map[string]any{
		"prompt_tokens": in, "completion_tokens": u.OutputTokens, "total_tokens": in + u.OutputTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CacheReadInputTokens},
	}
}

// responsesUsage is a reply's usage as the Responses API reports it.
func responsesUsage(u Usage) map[string]any {
	in := u.InputTokens + u.CacheReadInputTokens
	return map[string]any{
		"input_tokens": in, "output_tokens": u.OutputTokens, "total_tokens": in + u.OutputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadInputTokens},
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
	}
}

// geminiUsage is a reply's usageMetadata.
func geminiUsage(u Usage) map[string]any {
	in := u.InputTokens + u.CacheReadInputTokens
	return map[string]any{
		"promptTokenCount": in, "candidatesTokenCount": u.OutputTokens, "cachedContentTokenCount": u.CacheReadInputTokens,
		"totalTokenCount": in + u.OutputTokens,
	}
}

func replyText(rep Reply) string {
	if rep.Large > 0 {
		return rep.Text + strings.Repeat("x", rep.Large)
	}
	return rep.Text
}

// sseWriter writes Server-Sent Events and flushes each.
type sseWriter struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func newSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &sseWriter{w: w, fl: fl}
}

func (s *sseWriter) send(event string, data any) {
	var b bytes.Buffer
	if event != "" {
		b.WriteString("event: " + event + "\n")
	}
	b.WriteString("data: ")
	if raw, ok := data.(string); ok {
		b.WriteString(raw)
	} else {
		j, _ := json.Marshal(data)
		b.Write(j)
	}
	b.WriteString("\n\n")
	_, _ = s.w.Write(b.Bytes())
	if s.fl != nil {
		s.fl.Flush()
	}
}

// chat answers a Chat Completions request: one chat.completion, or chunks
// (the text, then each tool call, then the finish reason) and, when the
// request asked for stream_options.include_usage, a last chunk with the
// usage and no choices, then [DONE].
func (h *Server) chat(w http.ResponseWriter, r *http.Request, rb requestBody, rep Reply, model string, id int) {
	cid := fmt.Sprintf("chatcmpl-fake-%04d", id)
	finish := "stop"
	var calls []map[string]any
	for i, tu := range rep.ToolUse {
		calls = append(calls, map[string]any{"index": i, "id": fmt.Sprintf("call_%04d_%d", id, i), "type": "function",
			"function": map[string]any{"name": tu.Name, "arguments": toolInput(tu.Input)}})
		finish = "tool_calls"
	}
	text := replyText(rep)
	if !rb.Stream {
		msg := map[string]any{"role": "assistant", "content": text}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": cid, "object": "chat.completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": openAIUsage(rep.Usage)})
		return
	}
	s := newSSE(w)
	chunk := func(delta map[string]any, fin any) map[string]any {
		return map[string]any{"id": cid, "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin}}}
	}
	s.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	if h.hang(r, rep) {
		return
	}
	if text != "" {
		s.send("", chunk(map[string]any{"content": text}, nil))
	}
	for _, c := range calls {
		s.send("", chunk(map[string]any{"tool_calls": []any{c}}, nil))
	}
	s.send("", chunk(map[string]any{}, finish))
	if rb.StreamOptions.IncludeUsage {
		s.send("", map[string]any{"id": cid, "object": "chat.completion.chunk", "model": model, "choices": []any{}, "usage": openAIUsage(rep.Usage)})
	}
	s.send("", "[DONE]")
}

// responses answers a Responses API request: one response object, or
// the stream the API sends: response.created, then for each output item
// (the message with the text, then each function call)
// response.output_item.added, its delta (output_text.delta or
// function_call_arguments.delta) and response.output_item.done, and
// last response.completed with the whole response and its usage.
func (h *Server) responses(w http.ResponseWriter, r *http.Request, rb requestBody, rep Reply, model string, id int) {
	rid := fmt.Sprintf("resp_fake_%04d", id)
	text := replyText(rep)
	var output []map[string]any
	if text != "" || len(rep.ToolUse) == 0 {
		output = append(output, map[string]any{"type": "message", "id": fmt.Sprintf("msg_%04d", id), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	for i, tu := range rep.ToolUse {
		output = append(output, map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%04d_%d", id, i), "call_id": fmt.Sprintf("call_%04d_%d", id, i),
			"name": tu.Name, "arguments": toolInput(tu.Input), "status": "completed"})
	}
	final := map[string]any{"id": rid, "object": "response", "status": "completed", "model": model, "output": output, "usage": responsesUsage(rep.Usage)}
	if !rb.Stream {
		writeJSON(w, http.StatusOK, final)
		return
	}
	s := newSSE(w)
	s.send("response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": rid, "object": "response", "status": "in_progress", "model": model, "output": []any{}, "usage": nil}})
	if h.hang(r, rep) {
		return
	}
	for i, it := range output {
		added := maps.Clone(it)
		added["status"] = "in_progress"
		if it["type"] == "message" {
			added["content"] = []any{}
		} else {
			added["arguments"] = ""
		}
		s.send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": i, "item": added})
		switch {
		case it["type"] == "message" && text != "":
			s.send("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": it["id"], "output_index": i, "content_index": 0, "delta": text})
		case it["type"] == "function_call":
			s.send("response.function_call_arguments.delta", map[string]any{"type": "response.function_call_arguments.delta", "item_id": it["id"], "output_index": i, "delta": it["arguments"]})
		}
		s.send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": i, "item": it})
	}
	s.send("response.completed", map[string]any{"type": "response.completed", "response": final})
}

// gemini answers generateContent with one GenerateContentResponse, and
// streamGenerateContent with chunks (the text, then the function calls
// with the finish reason and the usage), as Server-Sent Events with
// ?alt=sse, else as one JSON array.
func (h *Server) gemini(w http.ResponseWriter, r *http.Request, rep Reply, model string) {
	text := replyText(rep)
	var parts []any
	if text != "" || len(rep.ToolUse) == 0 {
		parts = append(parts, map[string]any{"text": text})
	}
	var calls []any
	for _, tu := range rep.ToolUse {
		in := tu.Input
		if in == nil {
			in = map[string]any{}
		}
		calls = append(calls, map[string]any{"functionCall": map[string]any{"name": tu.Name, "args": in}})
	}
	resp := func(parts []any, final bool) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		m := map[string]any{"candidates": []any{c}, "modelVersion": model}
		if final {
			c["finishReason"] = "STOP"
			m["usageMetadata"] = geminiUsage(rep.Usage)
		}
		return m
	}
	if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		writeJSON(w, http.StatusOK, resp(append(parts, calls...), true))
		return
	}
	chunks := []any{resp(parts, len(calls) == 0)}
	if len(calls) > 0 {
		chunks = append(chunks, resp(calls, true))
	}
	if r.URL.Query().Get("alt") != "sse" {
		writeJSON(w, http.StatusOK, chunks)
		return
	}
	s := newSSE(w)
	for i, c := range chunks {
		if i == 1 && h.hang(r, rep) {
			return
		}
		s.send("", c)
	}
}

// hang, for a Hang reply, waits until the client goes or the server
// closes and reports true.
func (h *Server) hang(r *http.Request, rep Reply) bool {
	if !rep.Hang {
		return false
	}
	select {
	case <-r.Context().Done():
	case <-h.done:
	}
	return true
}

// writeShapedError answers an error reply in api's error shape.
func writeShapedError(w http.ResponseWriter, api string, e *ErrorReply) {
	switch api {
	case apiChat, apiResponses:
		msg := e.Message
		if msg == "" {
			msg = http.StatusText(e.Status)
		}
		typ := e.Type
		if typ == "" {
			typ = "server_error"
		}
		writeJSON(w, e.Status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": nil}})
	case apiGemini:
		msg := e.Message
		if msg == "" {
			msg = http.StatusText(e.Status)
		}
		writeJSON(w, e.Status, map[string]any{"error": map[string]any{"code": e.Status, "message": msg, "status": strings.ToUpper(strings.ReplaceAll(http.StatusText(e.Status), " ", "_"))}})
	default:
		writeError(w, e)
	}
}

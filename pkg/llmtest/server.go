package llmtest

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Request is one request the endpoint got, as recorded.
type Request struct {
	// At is when it arrived.
	At     time.Time `json:"at"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	// Turn is the number of the model's earlier answers in the body (-1
	// for a body that is not a request of an API the endpoint speaks).
	Turn int `json:"turn"`
	// Model and Stream are the body's.
	Model  string `json:"model,omitempty"`
	Stream bool   `json:"stream"`
	// APIKey is the x-api-key header, else the bearer token of
	// Authorization, else x-goog-api-key, else api-key (Azure Foundry), else the ?key= parameter; tests
	// check what credential reached the model.
	APIKey string `json:"api_key,omitempty"`
	// Body is the request body as sent.
	Body json.RawMessage `json:"body,omitempty"`
	// Status is the HTTP status answered (200 for a stream, even one that
	// hung).
	Status int `json:"status"`
}

// Server is a scripted Anthropic Messages endpoint. Its methods are safe
// for concurrent use.
type Server struct {
	script *Script
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	requests []Request
	seq      int
	// errored counts the requests answered with a limited error reply
	// (ErrorReply.Times), by conversation and turn.
	errored map[string]int
	// OnRequest, when set before serving, is called with each recorded
	// request (from the request's goroutine).
	OnRequest func(Request)
}

// New returns a server answering from s.
func New(s *Script) *Server {
	return &Server{script: s, done: make(chan struct{})}
}

// Close releases every reply that hangs (Reply.Hang); it does not stop an
// http.Server serving h.
func (h *Server) Close() { h.once.Do(func() { close(h.done) }) }

// Requests returns a copy of the requests recorded so far, in arrival
// order.
func (h *Server) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// Listen serves the endpoint on addr ("127.0.0.1:0" for a free port) until
// the returned stop function is called; it returns the base URL
// ("http://127.0.0.1:PORT").
func (h *Server) Listen(addr string) (baseURL string, stop func(), err error) {
	return h.ListenTLS(addr, nil, nil)
}

// ListenTLS is Listen over HTTPS with the PEM certificate (chain) and key
// (a test's own CA signs them, see tlsca.ServerCert); with no certificate
// it serves plain HTTP. The base URL is "https://127.0.0.1:PORT".
func (h *Server) ListenTLS(addr string, certPEM, keyPEM []byte) (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	scheme := "http"
	if certPEM != nil {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			ln.Close()
			return "", nil, err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
		scheme = "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	return scheme + "://" + ln.Addr().String(), func() { h.Close(); _ = srv.Close() }, nil
}

// ServeHTTP answers, from the script, POST /v1/messages (Anthropic),
// /v1/chat/completions and /v1/responses (OpenAI), and
// /v1beta/models/MODEL:generateContent and :streamGenerateContent
// (Gemini), each as JSON or streamed as its API streams; it answers
// /v1/messages/count_tokens with a count and anything else 404, recording
// every request.
func (h *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rec := Request{At: time.Now().UTC(), Method: r.Method, Path: r.URL.Path, Turn: -1, APIKey: r.Header.Get("x-api-key")}
	if a := r.Header.Get("Authorization"); rec.APIKey == "" && strings.HasPrefix(a, "Bearer ") {
		rec.APIKey = strings.TrimPrefix(a, "Bearer ")
	}
	if rec.APIKey == "" {
		rec.APIKey = cmp.Or(r.Header.Get("x-goog-api-key"), r.Header.Get("api-key"), r.URL.Query().Get("key"))
	}
	if json.Valid(body) {
		rec.Body = json.RawMessage(body)
	}
	api := ""
	if r.Method == http.MethodPost {
		api = apiOf(r.URL.Path)
	}
	var rb requestBody
	if err := json.Unmarshal(body, &rb); err == nil && api != "" {
		rec.Model, rec.Stream = rb.Model, rb.Stream
		rec.Turn = rb.turn(api)
	}
	if api == apiGemini {
		m := strings.TrimPrefix(r.URL.Path, "/v1beta/models/")
		rec.Model, _, _ = strings.Cut(m, ":")
		rec.Stream = strings.HasSuffix(r.URL.Path, ":streamGenerateContent")
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		rec.Status = http.StatusOK
		h.record(rec)
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(body) / 4})
	case api != "" && rec.Turn >= 0:
		rep, from := h.script.reply(rec.Turn, api, body)
		if rep.Error != nil && rep.Error.Times > 0 && !h.countError(fmt.Sprintf("%s/%d", from, rec.Turn), rep.Error.Times) {
			rep.Error = nil // its times are spent: the rest of the reply
		}
		if rep.Error != nil {
			rec.Status = rep.Error.Status
			h.record(rec)
			writeShapedError(w, api, rep.Error)
			return
		}
		rec.Status = http.StatusOK
		id := h.record(rec)
		model := cmp.Or(rep.Model, h.script.Model, rec.Model)
		switch api {
		case apiChat:
			h.chat(w, r, rb, rep, model, id)
		case apiResponses:
			h.responses(w, r, rb, rep, model, id)
		case apiGemini:
			h.gemini(w, r, rep, model)
		default:
			if rb.Stream {
				h.stream(w, r, rep, model, id)
			} else {
				writeJSON(w, http.StatusOK, message(rep, model, id, true))
			}
		}
	default:
		rec.Status = http.StatusNotFound
		h.record(rec)
		writeError(w, &ErrorReply{Status: http.StatusNotFound, Type: "not_found_error", Message: "fake model: no " + r.Method + " " + r.URL.Path})
	}
}

// countError reports whether the request of conversation turn key is
// still among the first times ones, counting it.
func (h *Server) countError(key string, times int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errored == nil {
		h.errored = map[string]int{}
	}
	h.errored[key]++
	return h.errored[key] <= times
}

func (h *Server) record(rec Request) int {
	h.mu.Lock()
	h.requests = append(h.requests, rec)
	h.seq++
	id := h.seq
	h.mu.Unlock()
	if h.OnRequest != nil {
		h.OnRequest(rec)
	}
	return id
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *ErrorReply) {
	typ := e.Type
	if typ == "" {
		switch e.Status {
		case 429:
			typ = "rate_limit_error"
		case 529:
			typ = "overloaded_error"
		case 401:
			typ = "authentication_error"
		default:
			typ = "api_error"
		}
	}
	msg := e.Message
	if msg == "" {
		msg = typ
	}
	if e.Retry {
		w.Header().Set("retry-after-ms", "10")
		w.Header().Set("retry-after", "0")
	} else {
		w.Header().Set("x-should-retry", "false")
	}
	writeJSON(w, e.Status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// blocks are the content blocks of a reply: its text (with Large filler)
// then its tool_use blocks, ids toolu_<msg>_<i>.
func blocks(rep Reply, id int) []map[string]any {
	var out []map[string]any
	text := rep.Text
	if rep.Large > 0 {
		text += strings.Repeat("x", rep.Large)
	}
	if text != "" || len(rep.ToolUse) == 0 {
		out = append(out, map[string]any{"type": "text", "text": text})
	}
	for i, tu := range rep.ToolUse {
		in := tu.Input
		if in == nil {
			in = map[string]any{}
		}
		out = append(out, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%04d_%d", id, i), "name": tu.Name, "input": in})
	}
	return out
}

func stopReason(rep Reply) string {
	switch {
	case rep.StopReason != "":
		return rep.StopReason
	case len(rep.ToolUse) > 0:
		return "tool_use"
	}
	return "end_turn"
}

func usageMap(u Usage, output int) map[string]any {
	return map[string]any{
		"input_tokens": u.InputTokens, "output_tokens": output,
		"cache_creation_input_tokens": u.CacheCreationInputTokens, "cache_read_input_tokens": u.CacheReadInputTokens,
	}
}

// message is the whole reply as one Messages API object (final: with the
// stop reason and the output tokens; else as message_start carries it).
func message(rep Reply, model string, id int, final bool) map[string]any {
	m := map[string]any{
		"id": fmt.Sprintf("msg_fake_%04d", id), "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usageMap(rep.Usage, 1),
	}
	if final {
		m["content"] = blocks(rep, id)
		m["stop_reason"] = stopReason(rep)
		m["usage"] = usageMap(rep.Usage, rep.Usage.OutputTokens)
	}
	return m
}

// stream writes the reply as the Messages API's SSE events: message_start,
// per block content_block_start / _delta (text_delta, or input_json_delta
// for a tool_use) / _stop, message_delta with the stop reason and usage,
// message_stop.
func (h *Server) stream(w http.ResponseWriter, r *http.Request, rep Reply, model string, id int) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	send := func(event string, data any) {
		var b bytes.Buffer
		b.WriteString("event: " + event + "\ndata: ")
		j, _ := json.Marshal(data)
		b.Write(j)
		b.WriteString("\n\n")
		_, _ = w.Write(b.Bytes())
		if fl != nil {
			fl.Flush()
		}
	}
	send("message_start", map[string]any{"type": "message_start", "message": message(rep, model, id, false)})
	if rep.Hang {
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		select {
		case <-r.Context().Done():
		case <-h.done:
		}
		return
	}
	for i, b := range blocks(rep, id) {
		if b["type"] == "text" {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		} else {
			start := map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
			in, _ := b["input"].(map[string]any)
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": toolInput(in)}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{
		"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(rep), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": rep.Usage.OutputTokens, "input_tokens": rep.Usage.InputTokens,
			"cache_creation_input_tokens": rep.Usage.CacheCreationInputTokens, "cache_read_input_tokens": rep.Usage.CacheReadInputTokens},
	})
	send("message_stop", map[string]any{"type": "message_stop"})
}

package harness

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// LineKind says what a line of an agent's stdout is.
type LineKind int

const (
	// LineText is response text (anything that is not an event line).
	LineText LineKind = iota
	// LineEvent is a JSON object with a known _tag.
	LineEvent
	// LineOperation is a `PROCTOR_OP {json}` or `DOKIMI_OP {json}` line.
	LineOperation
)

// Line is one parsed line of an agent's stdout.
type Line struct {
	Kind LineKind
	// Type and Data are set for LineEvent and LineOperation (Type
	// Operation); Data is a pointer to the events package's data type.
	Type events.Type
	Data any
	// At is the line's `at` (epoch milliseconds) when it carried one, else
	// the time the line was read.
	At time.Time
	// Text is the line itself for LineText.
	Text string
}

// Operation line prefixes, as the Dokimi and proctor agent runtimes print
// them: the prefix, a space, a JSON object.
var opPrefixes = []string{"PROCTOR_OP ", "DOKIMI_OP "}

// ParseLine reads one line of agent stdout under the event-line protocol
// (DESIGN §5.1, compatible with the Anpord command harness): a JSON object
// with a known `_tag` (Started, Message, Command, FileChange, ToolCall,
// Usage, Finished) is an event; `PROCTOR_OP {json}` / `DOKIMI_OP {json}` is
// an Operation; every other line is response text. Field names are read in
// snake_case and camelCase and under the names common agent runtimes use
// (input_tokens / inputTokens / prompt_tokens, exitCode, toolName, ...).
// An `at` field in epoch milliseconds sets the event time; otherwise readAt.
func ParseLine(line string, readAt time.Time) Line {
	s := strings.TrimSpace(line)
	for _, p := range opPrefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			if op, ok := parseOperation(rest); ok {
				return Line{Kind: LineOperation, Type: events.Operation, Data: op, At: readAt}
			}
		}
	}
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return Line{Kind: LineText, Text: line, At: readAt}
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return Line{Kind: LineText, Text: line, At: readAt}
	}
	tag, _ := m["_tag"].(string)
	f := fields(m)
	at := readAt
	if ms, ok := f.int("at", "timestamp_ms", "atMs"); ok && ms > 0 {
		at = time.UnixMilli(ms).UTC()
	}
	var data any
	switch events.Type(tag) {
	case events.Started:
		data = &events.StartedData{Harness: f.str("harness", "agent"), Model: f.str("model")}
	case events.Message:
		data = &events.MessageData{Role: f.str("role"), Text: f.str("text", "content", "message")}
	case events.Command:
		d := &events.CommandData{Command: f.str("command", "cmd"), Output: f.str("output", "stdout")}
		if c, ok := f.int("exit_code", "exitCode", "returncode"); ok {
			code := int(c)
			d.ExitCode = &code
		}
		data = d
	case events.FileChange:
		data = &events.FileChangeData{Path: f.str("path", "file"), Kind: f.str("kind", "change", "action", "type")}
	case events.ToolCall:
		d := &events.ToolCallData{Name: f.str("name", "tool", "toolName", "tool_name"), Error: f.bool("error", "is_error", "isError")}
		if in, ok := f.any("input", "args", "arguments"); ok {
			d.Input = in
		}
		data = d
	case events.Usage:
		d := &events.UsageData{Model: f.str("model")}
		d.PromptTokens, _ = f.int("prompt_tokens", "input_tokens", "inputTokens", "promptTokens")
		d.CompletionTokens, _ = f.int("completion_tokens", "output_tokens", "outputTokens", "completionTokens")
		d.CacheReadTokens, _ = f.int("cache_read_tokens", "cache_read_input_tokens", "cacheReadTokens", "cacheReadInputTokens")
		d.CacheWriteTokens, _ = f.int("cache_write_tokens", "cache_creation_input_tokens", "cacheWriteTokens", "cacheCreationInputTokens")
		d.Calls, _ = f.int("calls", "n_calls", "llm_calls", "llmCallCount")
		if c, ok := f.float("cost_usd", "costUsd", "cost", "total_cost_usd"); ok {
			d.CostUSD = &c
		}
		data = d
	case events.Finished:
		d := &events.FinishedData{Reason: f.str("reason", "exitReason", "exit_reason", "status")}
		if c, ok := f.int("exit_code", "exitCode"); ok {
			d.ExitCode = int(c)
		}
		data = d
	default:
		return Line{Kind: LineText, Text: line, At: readAt}
	}
	return Line{Kind: LineEvent, Type: events.Type(tag), Data: data, At: at}
}

func parseOperation(s string) (*events.OperationData, bool) {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(strings.TrimSpace(s)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, false
	}
	return OperationFrom(m), true
}

// OperationFrom builds an Operation from a JSON object: its type is the
// `op_type`, `type`, `op` or `operation` key ("operation" when none), the
// other keys are its fields.
func OperationFrom(m map[string]any) *events.OperationData {
	op := &events.OperationData{OpType: "operation", Fields: map[string]any{}}
	for _, k := range []string{"op_type", "type", "op", "operation"} {
		if v, ok := m[k].(string); ok && v != "" {
			op.OpType = v
			delete(m, k)
			break
		}
	}
	for k, v := range m {
		op.Fields[k] = normalizeNumber(v)
	}
	if len(op.Fields) == 0 {
		op.Fields = nil
	}
	return op
}

func normalizeNumber(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumber(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumber(e)
		}
	}
	return v
}

type fields map[string]any

func (f fields) any(keys ...string) (any, bool) {
	for _, k := range keys {
		if v, ok := f[k]; ok && v != nil {
			return normalizeNumber(v), true
		}
	}
	return nil, false
}

func (f fields) str(keys ...string) string {
	for _, k := range keys {
		switch v := f[k].(type) {
		case string:
			return v
		case json.Number:
			return v.String()
		}
	}
	return ""
}

func (f fields) int(keys ...string) (int64, bool) {
	for _, k := range keys {
		if n, ok := f[k].(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				return i, true
			}
			if x, err := n.Float64(); err == nil {
				return int64(x), true
			}
		}
	}
	return 0, false
}

func (f fields) float(keys ...string) (float64, bool) {
	for _, k := range keys {
		if n, ok := f[k].(json.Number); ok {
			if x, err := n.Float64(); err == nil {
				return x, true
			}
		}
	}
	return 0, false
}

func (f fields) bool(keys ...string) bool {
	for _, k := range keys {
		if b, ok := f[k].(bool); ok {
			return b
		}
	}
	return false
}

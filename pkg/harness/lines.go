package harness

import (
	"encoding/json"
	"errors"
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
// an Operation; every other line is response text. An `at` field in epoch
// milliseconds sets the event time; otherwise readAt.
//
// Field names are read in snake_case and camelCase and under the names
// common agent runtimes use (input_tokens / inputTokens / prompt_tokens,
// exitCode, toolName, ...).
func ParseLine(line string, readAt time.Time) Line {
	return parseLine(line, readAt, new(lineFields))
}

// fastLines turns on fastFields, the decoder of plain lines (off: every
// line through encoding/json, which the tests compare it with).
var fastLines = true

// parseLine is ParseLine decoding into f, which it clears first: a caller
// parsing many lines in turn keeps one (the fields are about a kilobyte;
// nothing parseLine returns points into f).
func parseLine(line string, readAt time.Time, f *lineFields) Line {
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
	*f = lineFields{}
	if !fastLines || !fastFields(s, f) {
		*f = lineFields{}
		err := json.Unmarshal([]byte(s), f)
		// A field of an unexpected type is skipped, the rest are read (as
		// encoding/json does for an UnmarshalTypeError); a line that is
		// not JSON at all is text.
		var typeErr *json.UnmarshalTypeError
		if err != nil && !errors.As(err, &typeErr) {
			return Line{Kind: LineText, Text: line, At: readAt}
		}
	}
	if f.Tag == nil {
		return Line{Kind: LineText, Text: line, At: readAt}
	}
	tag := *f.Tag
	at := readAt
	if ms, ok := num(f.At, f.TimestampMs, f.AtMs).int(); ok && ms > 0 {
		at = time.UnixMilli(ms).UTC()
	}
	var data any
	switch events.Type(tag) {
	case events.Started:
		data = &events.StartedData{Harness: str(f.Harness, f.Agent), Model: str(f.Model), SessionID: str(f.SessionID, f.SessionIDS)}
	case events.Message:
		data = &events.MessageData{Role: str(f.Role), Text: str(f.Text, f.Content, f.Message)}
	case events.Command:
		d := &events.CommandData{Command: str(f.Command, f.Cmd), Output: str(f.Output, f.Stdout)}
		if c, ok := num(f.ExitCodeS, f.ExitCodeC, f.Returncode).int(); ok {
			code := int(c)
			d.ExitCode = &code
		}
		data = d
	case events.FileChange:
		d := &events.FileChangeData{Path: str(f.Path, f.File), Kind: str(f.Kind, f.Change, f.Action, f.Type)}
		for _, p := range f.Paths {
			if p, ok := p.(string); ok {
				d.Paths = append(d.Paths, p)
			}
		}
		if d.Path == "" && len(d.Paths) > 0 {
			d.Path = d.Paths[0]
		}
		data = d
	case events.ToolCall:
		d := &events.ToolCallData{Name: str(f.Name, f.Tool, f.ToolName, f.ToolNameS), Error: f.Error || f.IsError || f.IsErrorC,
			CallID: str(f.CallID, f.CallIDS, f.ToolCallID, f.ID), Status: str(f.Status)}
		for _, in := range []any{f.Input, f.Args, f.Arguments} {
			if in != nil {
				d.Input = normalizeNumber(in)
				break
			}
		}
		data = d
	case events.Usage:
		d := &events.UsageData{Model: str(f.Model)}
		// A count the line does not carry stays nil: unreported, not 0.
		d.PromptTokens = num(f.PromptTokens, f.InputTokens, f.InputTokensC, f.PromptTokensC).intPtr()
		d.CompletionTokens = num(f.CompletionTokens, f.OutputTokens, f.OutputTokensC, f.CompletionTokensC).intPtr()
		d.CacheReadTokens = num(f.CacheReadTokens, f.CacheReadInputTokens, f.CacheReadTokensC, f.CacheReadInputTokensC).intPtr()
		d.CacheWriteTokens = num(f.CacheWriteTokens, f.CacheCreationInputTokens, f.CacheWriteTokensC, f.CacheCreationInputTokensC).intPtr()
		d.Calls = num(f.Calls, f.NCalls, f.LLMCalls, f.LLMCallCount).intPtr()
		d.TotalTokens = num(f.TotalTokens, f.TotalTokensC).intPtr()
		if c, ok := num(f.CostUSD, f.CostUsdC, f.Cost, f.TotalCostUSD).float(); ok {
			d.CostUSD = &c
		}
		data = d
	case events.Finished:
		d := &events.FinishedData{Reason: str(f.Reason, f.ExitReason, f.ExitReasonS, f.Status)}
		if c, ok := num(f.ExitCodeS, f.ExitCodeC).int(); ok {
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

// lineFields are the keys an event line may use, under every alias
// ParseLine reads; decoding into a struct avoids a map per line.
type lineFields struct {
	Tag         *string     `json:"_tag"`
	At          json.Number `json:"at"`
	TimestampMs json.Number `json:"timestamp_ms"`
	AtMs        json.Number `json:"atMs"`

	SessionID  *string `json:"sessionId"`
	SessionIDS *string `json:"session_id"`

	Harness *string `json:"harness"`
	Agent   *string `json:"agent"`
	Model   *string `json:"model"`

	Role    *string `json:"role"`
	Text    *string `json:"text"`
	Content *string `json:"content"`
	Message *string `json:"message"`

	Command    *string     `json:"command"`
	Cmd        *string     `json:"cmd"`
	Output     *string     `json:"output"`
	Stdout     *string     `json:"stdout"`
	ExitCodeS  json.Number `json:"exit_code"`
	ExitCodeC  json.Number `json:"exitCode"`
	Returncode json.Number `json:"returncode"`

	Paths  []any   `json:"paths"`
	Path   *string `json:"path"`
	File   *string `json:"file"`
	Kind   *string `json:"kind"`
	Change *string `json:"change"`
	Action *string `json:"action"`
	Type   *string `json:"type"`

	Name       *string `json:"name"`
	Tool       *string `json:"tool"`
	ToolName   *string `json:"toolName"`
	ToolNameS  *string `json:"tool_name"`
	CallID     *string `json:"callId"`
	CallIDS    *string `json:"call_id"`
	ToolCallID *string `json:"toolCallId"`
	ID         *string `json:"id"`
	Input      any     `json:"input"`
	Args       any     `json:"args"`
	Arguments  any     `json:"arguments"`
	Error      bool    `json:"error"`
	IsError    bool    `json:"is_error"`
	IsErrorC   bool    `json:"isError"`

	PromptTokens              json.Number `json:"prompt_tokens"`
	InputTokens               json.Number `json:"input_tokens"`
	InputTokensC              json.Number `json:"inputTokens"`
	PromptTokensC             json.Number `json:"promptTokens"`
	CompletionTokens          json.Number `json:"completion_tokens"`
	OutputTokens              json.Number `json:"output_tokens"`
	OutputTokensC             json.Number `json:"outputTokens"`
	CompletionTokensC         json.Number `json:"completionTokens"`
	CacheReadTokens           json.Number `json:"cache_read_tokens"`
	CacheReadInputTokens      json.Number `json:"cache_read_input_tokens"`
	CacheReadTokensC          json.Number `json:"cacheReadTokens"`
	CacheReadInputTokensC     json.Number `json:"cacheReadInputTokens"`
	CacheWriteTokens          json.Number `json:"cache_write_tokens"`
	CacheCreationInputTokens  json.Number `json:"cache_creation_input_tokens"`
	CacheWriteTokensC         json.Number `json:"cacheWriteTokens"`
	CacheCreationInputTokensC json.Number `json:"cacheCreationInputTokens"`
	Calls                     json.Number `json:"calls"`
	NCalls                    json.Number `json:"n_calls"`
	LLMCalls                  json.Number `json:"llm_calls"`
	LLMCallCount              json.Number `json:"llmCallCount"`
	CostUSD                   json.Number `json:"cost_usd"`
	CostUsdC                  json.Number `json:"costUsd"`
	Cost                      json.Number `json:"cost"`
	TotalCostUSD              json.Number `json:"total_cost_usd"`
	TotalTokens               json.Number `json:"total_tokens"`
	TotalTokensC              json.Number `json:"totalTokens"`

	Reason      *string `json:"reason"`
	ExitReason  *string `json:"exitReason"`
	ExitReasonS *string `json:"exit_reason"`
	Status      *string `json:"status"`
}

// str returns the first set value.
func str(vs ...*string) string {
	for _, v := range vs {
		if v != nil {
			return *v
		}
	}
	return ""
}

// numbers is a list of aliases of one numeric field.
type numbers []json.Number

func num(vs ...json.Number) numbers { return vs }

// int returns the first alias that holds a number, as an integer.
func (ns numbers) int() (int64, bool) {
	for _, n := range ns {
		if n == "" {
			continue
		}
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		if x, err := n.Float64(); err == nil {
			return int64(x), true
		}
	}
	return 0, false
}

// intPtr is int as a pointer: nil when no alias holds a number.
func (ns numbers) intPtr() *int64 {
	if v, ok := ns.int(); ok {
		return &v
	}
	return nil
}

// float returns the first alias that holds a number.
func (ns numbers) float() (float64, bool) {
	for _, n := range ns {
		if n == "" {
			continue
		}
		if x, err := n.Float64(); err == nil {
			return x, true
		}
	}
	return 0, false
}

package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// The JSON columns are written by the appenders below rather than by
// encoding/json, which spends most of a row's conversion time sorting map
// keys through reflection. They produce exactly the bytes of an
// encoding/json Encoder with SetEscapeHTML(false), minus its newline:
// struct fields in declaration order with their omitempty rules, map keys
// sorted bytewise, floats in ES6 form, strings escaped alike (control
// characters, invalid UTF-8 as U+FFFD, U+2028 and U+2029). Values of other
// types than those listed in appendAny are handed to encoding/json.

// jsonEncoder appends JSON to a buffer; fallback is the encoding/json
// encoder for values the appenders do not know.
type jsonEncoder struct {
	fallbackBuf bytes.Buffer
	fallback    *json.Encoder
}

func (e *jsonEncoder) marshalFallback(dst []byte, v any) ([]byte, error) {
	if e.fallback == nil {
		e.fallback = json.NewEncoder(&e.fallbackBuf)
		e.fallback.SetEscapeHTML(false)
	}
	e.fallbackBuf.Reset()
	if err := e.fallback.Encode(v); err != nil {
		return dst, err
	}
	b := e.fallbackBuf.Bytes()
	return append(dst, b[:len(b)-1]...), nil
}

// appendAny appends v, which is typically a value decoded from JSON.
func (e *jsonEncoder) appendAny(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendJSONString(dst, v), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case float64:
		return appendJSONFloat(dst, v)
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case []any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, x := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = e.appendAny(dst, x); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case []string:
		return appendStrings(dst, v), nil
	case map[string]any:
		return appendMap(dst, v, e.appendAny)
	case map[string]int:
		return appendMap(dst, v, func(d []byte, x int) ([]byte, error) { return strconv.AppendInt(d, int64(x), 10), nil })
	case map[string]float64:
		return appendMap(dst, v, func(d []byte, x float64) ([]byte, error) { return appendJSONFloat(d, x) })
	case map[string]string:
		return appendMap(dst, v, func(d []byte, x string) ([]byte, error) { return appendJSONString(d, x), nil })
	case []map[string]any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, m := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendMap(dst, m, e.appendAny); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return e.marshalFallback(dst, v)
}

// appendMap appends m with its keys sorted; a nil map is null, as
// encoding/json writes it.
func appendMap[V any](dst []byte, m map[string]V, value func([]byte, V) ([]byte, error)) ([]byte, error) {
	if m == nil {
		return append(dst, "null"...), nil
	}
	var stack [8]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = value(dst, m[k]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

func appendStrings(dst []byte, v []string) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, s := range v {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

// appendJSONFloat appends f as encoding/json does (ES6 number form); NaN
// and infinities are an error, as there.
func appendJSONFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 -> e-9, as encoding/json writes exponents.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does with HTML
// escaping off.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// metricsFields is the layout of artifact.Metrics appendMetrics was written
// for: field names with their json tags, in order. When the artifact model
// changes, metricsLayoutKnown is false and metrics are encoded with
// encoding/json (correct, slower) until appendMetrics is updated; a test
// fails meanwhile.
var metricsFields = []string{
	"CostUSD cost_usd,omitempty",
	"PromptTokens prompt_tokens,omitempty",
	"CompletionTokens completion_tokens,omitempty",
	"TotalTokens total_tokens,omitempty",
	"CacheReadTokens cache_read_tokens,omitempty",
	"CacheWriteTokens cache_write_tokens,omitempty",
	"NCalls n_calls,omitempty",
	"ToolCalls tool_calls,omitempty",
	"OperationCount operation_count",
	"OperationsByType operations_by_type,omitempty",
	"LowFidelityOperationCount low_fidelity_operation_count,omitempty",
	"LowFidelityOperationsByType low_fidelity_operations_by_type,omitempty",
	"SolverTimeout solver_timeout",
	"VerifierTimeout verifier_timeout",
	"SolverError solver_error",
	"Error error",
	"UnresolvedEnv unresolved_env,omitempty",
	"UnknownKeys unknown_keys,omitempty",
	"Egress egress,omitempty",
	"UsageObserved usage_observed,omitempty",
	"Isolation isolation,omitempty",
	"IsolationProbe isolation_probe,omitempty",
	"Treatment treatment,omitempty",
	"AgentReported agent_reported,omitempty",
	"SolveSec solve_sec,omitempty",
	"VerifySec verify_sec,omitempty",
	"BuildSec build_sec,omitempty",
	"QueueSec queue_sec,omitempty",
	"VerifierLeftoverProcesses verifier_leftover_processes,omitempty",
	"Limits limits,omitempty",
	"OOMKilled oom_killed,omitempty",
	"OOMPhase oom_phase,omitempty",
	"TamperFindings tamper_findings,omitempty",
	"VerifierFindings verifier_findings,omitempty",
	"LongLines long_lines,omitempty",
	"ResponseTruncated response_truncated,omitempty",
	"UsagePartial usage_partial,omitempty",
	"UsagePartialReason usage_partial_reason,omitempty",
	"WorkTree work_tree,omitempty",
	"Recompile recompile,omitempty",
	"RecompileFailed recompile_failed,omitempty",
}

var metricsLayoutKnown = slices.Equal(structLayout(reflect.TypeFor[artifact.Metrics]()), metricsFields) &&
	slices.Equal(structLayout(reflect.TypeFor[artifact.EgressCounts]()), []string{"Allowed allowed", "Denied denied", "Errors errors",
		"AllowedHosts allowed_hosts", "DeniedHosts denied_hosts", "ErrorHosts error_hosts", "DeniedEntries denied_entries"})

func structLayout(t reflect.Type) []string {
	out := make([]string, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		out[i] = f.Name + " " + f.Tag.Get("json")
	}
	return out
}

// appendMetrics appends m as encoding/json encodes an artifact.Metrics.
func (e *jsonEncoder) appendMetrics(dst []byte, m *artifact.Metrics) ([]byte, error) {
	if !metricsLayoutKnown {
		return e.marshalFallback(dst, m)
	}
	var err error
	dst = append(dst, '{')
	first := true
	key := func(k string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':')
	}
	float := func(k string, p *float64) {
		if p != nil && err == nil {
			key(k)
			dst, err = appendJSONFloat(dst, *p)
		}
	}
	int64p := func(k string, p *int64) {
		if p != nil {
			key(k)
			dst = strconv.AppendInt(dst, *p, 10)
		}
	}
	boolean := func(k string, v bool) {
		key(k)
		dst = strconv.AppendBool(dst, v)
	}
	anyv := func(k string, v any) {
		if err == nil {
			key(k)
			dst, err = e.appendAny(dst, v)
		}
	}
	float("cost_usd", m.CostUSD)
	int64p("prompt_tokens", m.PromptTokens)
	int64p("completion_tokens", m.CompletionTokens)
	int64p("total_tokens", m.TotalTokens)
	int64p("cache_read_tokens", m.CacheReadTokens)
	int64p("cache_write_tokens", m.CacheWriteTokens)
	int64p("n_calls", m.NCalls)
	if len(m.ToolCalls) > 0 {
		anyv("tool_calls", m.ToolCalls)
	}
	key("operation_count")
	dst = strconv.AppendInt(dst, int64(m.OperationCount), 10)
	if len(m.OperationsByType) > 0 {
		anyv("operations_by_type", m.OperationsByType)
	}
	if m.LowFidelityOperationCount != 0 {
		key("low_fidelity_operation_count")
		dst = strconv.AppendInt(dst, int64(m.LowFidelityOperationCount), 10)
	}
	if len(m.LowFidelityOperationsByType) > 0 {
		anyv("low_fidelity_operations_by_type", m.LowFidelityOperationsByType)
	}
	boolean("solver_timeout", m.SolverTimeout)
	boolean("verifier_timeout", m.VerifierTimeout)
	boolean("solver_error", m.SolverError)
	boolean("error", m.Error)
	if len(m.UnresolvedEnv) > 0 {
		key("unresolved_env")
		dst = appendStrings(dst, m.UnresolvedEnv)
	}
	if len(m.UnknownKeys) > 0 {
		key("unknown_keys")
		dst = appendStrings(dst, m.UnknownKeys)
	}
	if m.Egress != nil && err == nil {
		// Counts, host sets and denied entries: encoding/json's bytes, as
		// the fallback would write them.
		var b []byte
		if b, err = json.Marshal(m.Egress); err == nil {
			key("egress")
			dst = append(dst, b...)
		}
	}
	if m.UsageObserved != nil && err == nil {
		// Counts, a cost and a few words: the fallback's bytes.
		key("usage_observed")
		dst, err = e.marshalFallback(dst, m.UsageObserved)
	}
	if len(m.Isolation) > 0 {
		anyv("isolation", m.Isolation)
	}
	if len(m.IsolationProbe) > 0 {
		anyv("isolation_probe", m.IsolationProbe)
	}
	if m.Treatment != nil {
		anyv("treatment", m.Treatment)
	}
	if len(m.AgentReported) > 0 {
		anyv("agent_reported", m.AgentReported)
	}
	float("solve_sec", m.SolveSec)
	float("verify_sec", m.VerifySec)
	float("build_sec", m.BuildSec)
	float("queue_sec", m.QueueSec)
	if m.VerifierLeftoverProcesses != nil {
		key("verifier_leftover_processes")
		dst = strconv.AppendInt(dst, int64(*m.VerifierLeftoverProcesses), 10)
	}
	if m.Limits != nil && err == nil {
		// A small flat struct of numbers and fixed words: encoding/json's
		// bytes, as the fallback would write them.
		var b []byte
		if b, err = json.Marshal(m.Limits); err == nil {
			key("limits")
			dst = append(dst, b...)
		}
	}
	if m.OOMKilled {
		boolean("oom_killed", true)
	}
	if m.OOMPhase != "" {
		key("oom_phase")
		dst = appendJSONString(dst, m.OOMPhase)
	}
	// Findings: lists of small structs, encoding/json's bytes.
	if len(m.TamperFindings) > 0 && err == nil {
		key("tamper_findings")
		dst, err = e.marshalFallback(dst, m.TamperFindings)
	}
	if len(m.VerifierFindings) > 0 && err == nil {
		key("verifier_findings")
		dst, err = e.marshalFallback(dst, m.VerifierFindings)
	}
	if m.LongLines != 0 {
		key("long_lines")
		dst = strconv.AppendInt(dst, int64(m.LongLines), 10)
	}
	if m.ResponseTruncated {
		boolean("response_truncated", true)
	}
	if m.UsagePartial {
		boolean("usage_partial", true)
	}
	if m.UsagePartialReason != "" {
		key("usage_partial_reason")
		dst = appendJSONString(dst, m.UsagePartialReason)
	}
	// The work tree's copy and the recompile: small structs, encoding/json's
	// bytes.
	if m.WorkTree != nil && err == nil {
		key("work_tree")
		dst, err = e.marshalFallback(dst, m.WorkTree)
	}
	if m.Recompile != nil && err == nil {
		key("recompile")
		dst, err = e.marshalFallback(dst, m.Recompile)
	}
	if m.RecompileFailed {
		boolean("recompile_failed", true)
	}
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

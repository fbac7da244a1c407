package dataset

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// stdJSON is what the JSON columns must equal: encoding/json with HTML
// escaping off, without the trailing newline.
func stdJSON(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// The appenders were written for this artifact.Metrics layout; when the
// model changes, appendMetrics must learn the new fields (until then the
// export falls back to encoding/json for metrics).
func TestMetricsLayoutKnown(t *testing.T) {
	if !metricsLayoutKnown {
		t.Fatalf("artifact.Metrics changed: layout is now\n%q\nupdate metricsFields and appendMetrics in json.go",
			structLayout(reflectTypeOfMetrics()))
	}
}

func TestAppendersMatchEncodingJSON(t *testing.T) {
	var e jsonEncoder
	check := func(name string, v any, got []byte, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if want := stdJSON(t, v); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	results := append(fixtureResults(), syntheticArtifact(2000).Results...)
	full := artifact.Metrics{
		CostUSD: f64(1e-7), PromptTokens: i64(1), CompletionTokens: i64(2), TotalTokens: i64(3),
		CacheReadTokens: i64(0), CacheWriteTokens: i64(-4), NCalls: i64(5),
		ToolCalls: map[string]int{"z": 1, "a": 2, "é": 3, "A": 4}, OperationCount: 7,
		OperationsByType: map[string]int{"x": 7}, LowFidelityOperationCount: 3, LowFidelityOperationsByType: map[string]int{"tool": 2, "loop": 1}, SolverTimeout: true, VerifierTimeout: true, SolverError: true, Error: true,
		UnresolvedEnv: []string{"A", "B\n"}, Egress: &artifact.EgressCounts{Allowed: 1, Denied: 2, Errors: 3},
		Isolation:      map[string]any{"network": "none", "n": 1.5e21, "nested": map[string]any{"b": []any{true, nil, "x"}}},
		IsolationProbe: map[string]string{"dns": "closed", "env": "open"},
		AgentReported:  map[string]any{"inputTokens": 12.0, "exitReason": "done <ok>", "big": 123456789012.0, "tiny": -2.5e-9},
		SolveSec:       f64(0), VerifySec: f64(1.25), BuildSec: f64(1e21), VerifierLeftoverProcesses: new(int),
		Limits:    &artifact.Limits{CPUs: 1.5, MemoryMB: 64, PidsLimit: 1024, NoNewPrivileges: true, MemorySource: "task", CPUsSource: "default"},
		OOMKilled: true, OOMPhase: "solve",
		TamperFindings:   []artifact.TamperFinding{{Path: "/app/unittest.py", Change: "created", Shadows: "python module <unittest> & co"}},
		VerifierFindings: []artifact.VerifierFinding{{Kind: "no_tests_executed", Detail: "Ran 0 tests\u2028"}},
		LongLines:        2, ResponseTruncated: true,
		UsagePartial: true, UsagePartialReason: "no result event <&>",
		UsageObserved: &artifact.UsageObserved{Requests: 2, InputTokens: 3, CostUSD: nil, CostNullReason: "POST /a&b <x> answered without a price"},
	}
	results = append(results, artifact.Result{Metrics: full})
	for i := range results {
		r := &results[i]
		got, err := e.appendMetrics(nil, &r.Metrics)
		check("metrics "+r.CellID, &r.Metrics, got, err)
		if r.TaskMeta != nil {
			got, err = e.appendAny(nil, r.TaskMeta)
			check("task_metadata "+r.CellID, r.TaskMeta, got, err)
		}
		if r.Rewards != nil {
			got, err = e.appendAny(nil, r.Rewards)
			check("rewards "+r.CellID, r.Rewards, got, err)
		}
		if r.Operations != nil {
			got, err = e.appendAny(nil, r.Operations)
			check("operations "+r.CellID, r.Operations, got, err)
		}
	}
	for _, f := range []float64{0, -0.0, 1, -1, 0.1, 1e-6, 9.99e-7, 1e20, 1e21, 123.456, math.MaxFloat64, math.SmallestNonzeroFloat64, 5e-324, 1e-10} {
		got, err := appendJSONFloat(nil, f)
		check("float", f, got, err)
	}
	// A type the appenders do not know goes through encoding/json.
	type other struct {
		A int `json:"a"`
	}
	v := map[string]any{"o": other{A: 1}, "n": json.Number("12")}
	got, err := e.appendAny(nil, v)
	check("fallback", v, got, err)
	if _, err := appendJSONFloat(nil, math.Inf(1)); err == nil {
		t.Error("appendJSONFloat(+Inf) succeeded")
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c", "<>&", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "é€😀", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendJSONString(nil, s), stdJSON(t, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}

func reflectTypeOfMetrics() reflect.Type { return reflect.TypeFor[artifact.Metrics]() }

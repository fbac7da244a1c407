package projection

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/parquet-go/parquet-go"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/dataset"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
)

// telemetryLog is a run of four agent cells whose Usage events come from
// real event lines (harness.ParseLine), each ending with a Verdict.
func telemetryLog(t *testing.T, runID string, lines map[string][]string, metricsJSON map[string]map[string]any) []events.Envelope {
	t.Helper()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var evs []events.Envelope
	add := func(typ events.Type, cell string, data any) {
		e := events.Must(typ, runID, cell, 1, "test", data)
		at = at.Add(time.Second)
		e.At = at
		evs = append(evs, e)
	}
	var cells []string
	for cell := range lines {
		cells = append(cells, cell)
	}
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"agent:a"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: len(cells)})
	for cell, ls := range lines {
		add(events.CellPlanned, cell, events.CellPlannedData{Task: cell[:2], Harness: "agent:a", Model: "m", Repeat: 1})
		for _, l := range ls {
			pl := harness.ParseLine(l, at)
			if pl.Kind != harness.LineEvent {
				t.Fatalf("%s is not an event line", l)
			}
			add(pl.Type, cell, pl.Data)
		}
		add(events.Finished, cell, events.FinishedData{Reason: "exit 0", AgentReported: metricsJSON[cell]})
		add(events.Verdict, cell, events.VerdictData{Reward: ptr(1.0)})
	}
	return evs
}

// TestUnreportedTelemetryIsNull is issue 9, item 11: a Usage line with
// only input and output tokens leaves cache_read_tokens and
// cache_write_tokens null (not 0) in the artifact and in every dataset
// format, as cost already was; the same holds for every count an agent
// reports and did not.
func TestUnreportedTelemetryIsNull(t *testing.T) {
	const run = "01JTELEMETRY00000000000000"
	lines := map[string][]string{
		// the input
		"t1/agent:a/m/1": {`{"_tag":"Usage","input_tokens":100,"output_tokens":20}`},
		// no Usage, no ToolCall at all
		"t2/agent:a/m/1": {`{"_tag":"Message","text":"hi"}`},
		// reported zeros stay zeros; cost alone leaves the tokens null
		"t3/agent:a/m/1": {`{"_tag":"Usage","prompt_tokens":0,"cache_read_tokens":0,"calls":0}`, `{"_tag":"Usage","cost_usd":0.25}`},
		// only input tokens: no total (its other part is unknown)
		"t4/agent:a/m/1": {`{"_tag":"Usage","input_tokens":7}`, `{"_tag":"Usage","input_tokens":3}`},
	}
	metricsJSON := map[string]map[string]any{"t2/agent:a/m/1": {"toolCallCount": float64(0)}}
	a := fold(run, telemetryLog(t, run, lines, metricsJSON)).Artifact("test")
	if _, err := artifact.Marshal(a); err != nil {
		t.Fatal(err)
	}
	type want struct {
		prompt, completion, total, cacheR, cacheW, calls *int64
		cost                                             *float64
		tools                                            *int64
	}
	n := events.Count
	wants := map[string]want{
		"t1/agent:a/m/1": {prompt: n(100), completion: n(20), total: n(120), calls: n(1)},
		"t2/agent:a/m/1": {tools: n(0)},
		"t3/agent:a/m/1": {prompt: n(0), cacheR: n(0), calls: n(1), cost: ptr(0.25)},
		"t4/agent:a/m/1": {prompt: n(10), calls: n(2)},
	}
	s := func(p *int64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	f := func(p *float64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.CellID] = r
	}
	for cell, w := range wants {
		m := rows[cell].Metrics
		var tools *int64
		if m.ToolCalls != nil {
			tools = n(int64(m.ToolCalls["unnamed"]))
		}
		got := []any{s(m.PromptTokens), s(m.CompletionTokens), s(m.TotalTokens), s(m.CacheReadTokens), s(m.CacheWriteTokens), s(m.NCalls), f(m.CostUSD), s(tools)}
		exp := []any{s(w.prompt), s(w.completion), s(w.total), s(w.cacheR), s(w.cacheW), s(w.calls), f(w.cost), s(w.tools)}
		for i, name := range []string{"prompt_tokens", "completion_tokens", "total_tokens", "cache_read_tokens", "cache_write_tokens", "n_calls", "cost_usd", "tool_calls"} {
			if got[i] != exp[i] {
				t.Errorf("%s: artifact %s = %v, want %v", cell, name, got[i], exp[i])
			}
		}
	}
	// In the artifact's JSON an unreported count is absent, never 0.
	js, err := artifact.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []struct {
			CellID  string         `json:"cell_id"`
			Metrics map[string]any `json:"metrics"`
		} `json:"results"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Results {
		if r.CellID == "t1/agent:a/m/1" {
			for _, k := range []string{"cache_read_tokens", "cache_write_tokens", "cost_usd"} {
				if v, ok := r.Metrics[k]; ok && v != nil {
					t.Errorf("artifact JSON: %s = %v, want null/absent", k, v)
				}
			}
		}
	}

	// The datasets: JSONL, Parquet and the Hugging Face Arrow file.
	dir := t.TempDir()
	for _, format := range dataset.TaskRunFormats() {
		if _, err := dataset.ExportTaskRuns(a, filepath.Join(dir, format), format); err != nil {
			t.Fatalf("export %s: %v", format, err)
		}
	}
	check := func(format, cell, col string, got any, want *int64) {
		t.Helper()
		if (want == nil) != (got == nil) || (want != nil && got != *want) {
			t.Errorf("%s %s: %s = %v, want %v", format, cell, col, got, s(want))
		}
	}
	// JSONL
	data, err := os.ReadFile(filepath.Join(dir, dataset.FormatJSONL, dataset.TaskRunsJSONLFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var r map[string]any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		cell := r["cell_id"].(string)
		num := func(k string) any {
			if v, ok := r[k].(json.Number); ok {
				i, _ := v.Int64()
				return i
			}
			return r[k]
		}
		w := wants[cell]
		check("jsonl", cell, "metric_cache_read_tokens", num("metric_cache_read_tokens"), w.cacheR)
		check("jsonl", cell, "metric_cache_write_tokens", num("metric_cache_write_tokens"), w.cacheW)
		check("jsonl", cell, "metric_total_tokens", num("metric_total_tokens"), w.total)
		check("jsonl", cell, "metric_completion_tokens", num("metric_completion_tokens"), w.completion)
		check("jsonl", cell, "metric_n_calls", num("metric_n_calls"), w.calls)
		check("jsonl", cell, "metric_tool_call_count", num("metric_tool_call_count"), w.tools)
	}
	// Parquet, read back with parquet-go into the row type's pointers.
	prows, err := parquet.ReadFile[dataset.TaskRunRow](filepath.Join(dir, dataset.FormatParquet, dataset.TaskRunsParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(prows) != len(wants) {
		t.Fatalf("parquet: %d rows, want %d", len(prows), len(wants))
	}
	for _, r := range prows {
		w := wants[r.CellID]
		check("parquet", r.CellID, "metric_cache_read_tokens", s(r.MetricCacheReadTokens), w.cacheR)
		check("parquet", r.CellID, "metric_cache_write_tokens", s(r.MetricCacheWriteTokens), w.cacheW)
		check("parquet", r.CellID, "metric_total_tokens", s(r.MetricTotalTokens), w.total)
		check("parquet", r.CellID, "metric_tool_call_count", s(r.MetricToolCallCount), w.tools)
	}
	// Arrow IPC stream of the hf export: the columns' validity bitmaps.
	fh, err := os.Open(filepath.Join(dir, dataset.FormatHF, dataset.HFDataFile))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	rd, err := ipc.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	seen := 0
	for rd.Next() {
		rec := rd.RecordBatch()
		col := func(name string) arrowCol {
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("arrow: no column %s", name)
			}
			return rec.Column(idx[0]).(arrowCol)
		}
		ids := col("cell_id").(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			cell := ids.Value(i)
			w := wants[cell]
			for name, want := range map[string]*int64{"metric_cache_read_tokens": w.cacheR, "metric_cache_write_tokens": w.cacheW,
				"metric_total_tokens": w.total, "metric_tool_call_count": w.tools} {
				c := col(name).(*array.Int64)
				var got any
				if c.IsValid(i) {
					got = c.Value(i)
				}
				check("hf", cell, name, got, want)
			}
			seen++
		}
	}
	if seen != len(wants) {
		t.Errorf("arrow: %d rows, want %d", seen, len(wants))
	}
}

// arrowCol is the part of arrow.Array the test uses.
type arrowCol interface {
	IsValid(i int) bool
	Len() int
}

// TestRawRewardEscaped is issue 9, item 12, from the log: a reward file
// holding 0.5 and a NUL is a verifier error whose raw text reaches the
// artifact quoted and report.md escaped, never as a NUL byte.
func TestRawRewardEscaped(t *testing.T) {
	const run = "01JRAWREWARD00000000000000"
	add, evs := logBuilder(run, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	cell := "nul\x00task/oracle/m/1"
	add(events.RunRequested, "", events.RunRequestedData{Spec: events.RunSpec{Harnesses: []string{"oracle"}, Models: []string{"m"}, Repeats: 1}})
	add(events.RunPlanned, "", events.RunPlannedData{Cells: 1})
	add(events.CellPlanned, cell, events.CellPlannedData{Task: "nul\x00task", Harness: "oracle", Model: "m", Repeat: 1})
	add(events.Finished, cell, events.FinishedData{Reason: "exit 0", StdoutTail: "bell\a and \x1b[31mcolour\n"})
	add(events.Verdict, cell, events.VerdictData{Error: "reward.txt is not a number in [0,1]", RawReward: "0.5\x00"})
	js, md, err := Render(fold(run, evs()), "test")
	if err != nil {
		t.Fatal(err)
	}
	a, err := artifact.Unmarshal("raw", js)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Results[0].Error, `reward.txt is not a number in [0,1] (raw: "0.5\x00")`; got != want {
		t.Errorf("artifact error = %q, want %q", got, want)
	}
	if bytes.ContainsAny(md, "\x00\a\x1b") || !utf8.Valid(md) {
		t.Errorf("report.md holds raw control bytes:\n%q", md)
	}
	for _, want := range []string{`(raw: "0.5\x00")`, "`nul\\x00task`", `bell\x07 and \x1b[31mcolour`} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report.md lacks %s:\n%s", want, md)
		}
	}
}

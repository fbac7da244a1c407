package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// wantColumns pins the task_runs schema (SCHEMA.md): column order, the
// DuckDB type of the Parquet column and the Arrow type of the HF column.
// Changing it is a new SchemaVersion.
var wantColumns = []struct{ name, duck, arrow string }{
	{"cell_id", "VARCHAR", "Utf8"},
	{"run_id", "VARCHAR", "Utf8"},
	{"task", "VARCHAR", "Utf8"},
	{"harness", "VARCHAR", "Utf8"},
	{"model", "VARCHAR", "Utf8"},
	{"repeat", "BIGINT", "Int64"},
	{"attempt", "BIGINT", "Int64"},
	{"outcome", "VARCHAR", "Utf8"},
	{"error_class", "VARCHAR", "Utf8"},
	{"passed", "BOOLEAN", "Bool"},
	{"reward", "DOUBLE", "Float64"},
	{"returncode", "BIGINT", "Int64"},
	{"verifier_returncode", "BIGINT", "Int64"},
	{"elapsed_sec", "DOUBLE", "Float64"},
	{"task_revision", "VARCHAR", "Utf8"},
	{"output_dir", "VARCHAR", "Utf8"},
	{"error", "VARCHAR", "Utf8"},
	{"stdout_tail", "VARCHAR", "Utf8"},
	{"difficulty", "VARCHAR", "Utf8"},
	{"category", "VARCHAR", "Utf8"},
	{"tags", "VARCHAR[]", "List<Utf8>"},
	{"task_metadata_json", "VARCHAR", "Utf8"},
	{"metric_prompt_tokens", "BIGINT", "Int64"},
	{"metric_completion_tokens", "BIGINT", "Int64"},
	{"metric_total_tokens", "BIGINT", "Int64"},
	{"metric_cache_read_tokens", "BIGINT", "Int64"},
	{"metric_cache_write_tokens", "BIGINT", "Int64"},
	{"metric_cost_usd", "DOUBLE", "Float64"},
	{"metric_latency_sec", "DOUBLE", "Float64"},
	{"metric_n_calls", "BIGINT", "Int64"},
	{"metric_tool_call_count", "BIGINT", "Int64"},
	{"metric_operation_count", "BIGINT", "Int64"},
	{"metric_solver_timeout", "BOOLEAN", "Bool"},
	{"metric_verifier_timeout", "BOOLEAN", "Bool"},
	{"metric_solver_error", "BOOLEAN", "Bool"},
	{"metric_error", "BOOLEAN", "Bool"},
	{"metric_solve_sec", "DOUBLE", "Float64"},
	{"metric_verify_sec", "DOUBLE", "Float64"},
	{"metric_build_sec", "DOUBLE", "Float64"},
	{"metric_egress_allowed", "BIGINT", "Int64"},
	{"metric_egress_denied", "BIGINT", "Int64"},
	{"metric_egress_errors", "BIGINT", "Int64"},
	{"metric_observed_requests", "BIGINT", "Int64"},
	{"metric_observed_input_tokens", "BIGINT", "Int64"},
	{"metric_observed_output_tokens", "BIGINT", "Int64"},
	{"metric_observed_cache_read_tokens", "BIGINT", "Int64"},
	{"metric_observed_cache_write_tokens", "BIGINT", "Int64"},
	{"metric_observed_cost_usd", "DOUBLE", "Float64"},
	{"metric_tokens_differ", "BOOLEAN", "Bool"},
	{"metrics_json", "VARCHAR", "Utf8"},
	{"operations_json", "VARCHAR", "Utf8"},
	{"rewards_json", "VARCHAR", "Utf8"},
	{"step_count", "BIGINT", "Int64"},
	{"steps_run", "BIGINT", "Int64"},
	{"steps_skipped", "BIGINT", "Int64"},
	{"steps_json", "VARCHAR", "Utf8"},
}

// readerOutput is what testdata/read_parquet.mjs and read_arrow.mjs print.
type readerOutput struct {
	Rows    int `json:"rows"`
	Batches int `json:"batches"`
	Columns []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Nullable bool   `json:"nullable"`
	} `json:"columns"`
	Compression []string          `json:"compression"`
	KV          map[string]string `json:"kv"`
	Metadata    map[string]string `json:"metadata"`
	Data        []map[string]any  `json:"data"`
}

func export(t *testing.T, a *artifact.Artifact, format string) (dir string, paths []string) {
	t.Helper()
	dir = t.TempDir()
	paths, err := ExportTaskRuns(a, dir, format)
	if err != nil {
		t.Fatalf("ExportTaskRuns(%s): %v", format, err)
	}
	return dir, paths
}

// TestParquetDuckDB reads the Parquet export back with DuckDB and checks
// the row count, the column types, null versus zero, and the values
// against the artifact.
func TestParquetDuckDB(t *testing.T) {
	a := fixtureArtifact(t)
	dir, paths := export(t, a, FormatParquet)
	want := filepath.Join(dir, TaskRunsParquetFile)
	if !slices.Equal(paths, []string{want}) {
		t.Fatalf("paths = %v, want [%s]", paths, want)
	}
	var got readerOutput
	readWithNode(t, "read_parquet.mjs", want, &got)

	if got.Rows != len(a.Results) || len(got.Data) != len(a.Results) {
		t.Fatalf("DuckDB reads %d rows (%d decoded), want %d", got.Rows, len(got.Data), len(a.Results))
	}
	if len(got.Columns) != len(wantColumns) {
		t.Fatalf("DuckDB sees %d columns, want %d: %+v", len(got.Columns), len(wantColumns), got.Columns)
	}
	for i, c := range got.Columns {
		if w := wantColumns[i]; c.Name != w.name || c.Type != w.duck {
			t.Errorf("column %d = %s %s, want %s %s", i, c.Name, c.Type, w.name, w.duck)
		}
	}
	if !slices.Equal(got.Compression, []string{"ZSTD"}) {
		t.Errorf("column chunk codecs = %v, want only ZSTD", got.Compression)
	}
	if got.KV[MetadataKey] != SchemaVersion {
		t.Errorf("key-value metadata %s = %q, want %q", MetadataKey, got.KV[MetadataKey], SchemaVersion)
	}
	checkAgainstArtifact(t, "parquet", a, got.Data)
}

// TestHFArrow reads the hf export's Arrow file back with the apache-arrow
// package and checks the Hugging Face files around it.
func TestHFArrow(t *testing.T) {
	a := fixtureArtifact(t)
	dir, paths := export(t, a, FormatHF)
	want := []string{filepath.Join(dir, HFDataFile), filepath.Join(dir, HFInfoFile), filepath.Join(dir, HFStateFile)}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths = %v, want %v", paths, want)
	}
	data, err := os.ReadFile(want[0])
	if err != nil {
		t.Fatal(err)
	}
	// An IPC stream starts with a continuation marker; the IPC file format
	// (which datasets does not read) would start with "ARROW1".
	if !bytes.HasPrefix(data, []byte{0xff, 0xff, 0xff, 0xff}) {
		t.Errorf("%s does not start as an Arrow IPC stream: % x", HFDataFile, data[:8])
	}

	var got readerOutput
	readWithNode(t, "read_arrow.mjs", want[0], &got)
	if got.Rows != len(a.Results) || len(got.Data) != len(a.Results) {
		t.Fatalf("apache-arrow reads %d rows (%d decoded), want %d", got.Rows, len(got.Data), len(a.Results))
	}
	if len(got.Columns) != len(wantColumns) {
		t.Fatalf("apache-arrow sees %d columns, want %d", len(got.Columns), len(wantColumns))
	}
	for i, c := range got.Columns {
		if w := wantColumns[i]; c.Name != w.name || c.Type != w.arrow || !c.Nullable {
			t.Errorf("field %d = %s %s nullable=%v, want %s %s nullable", i, c.Name, c.Type, c.Nullable, w.name, w.arrow)
		}
	}
	if got.Metadata[MetadataKey] != SchemaVersion {
		t.Errorf("schema metadata %s = %q, want %q", MetadataKey, got.Metadata[MetadataKey], SchemaVersion)
	}
	checkAgainstArtifact(t, "arrow", a, got.Data)

	// dataset_info.json: the features datasets rebuilds the table with,
	// one per column, in column order, the same as the schema metadata.
	infoBytes, err := os.ReadFile(want[1])
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Citation    *string                    `json:"citation"`
		Description *string                    `json:"description"`
		Homepage    *string                    `json:"homepage"`
		License     *string                    `json:"license"`
		Features    map[string]json.RawMessage `json:"features"`
	}
	if err := json.Unmarshal(infoBytes, &info); err != nil {
		t.Fatalf("%s: %v", HFInfoFile, err)
	}
	if info.Citation == nil || info.Description == nil || info.Homepage == nil || info.License == nil {
		t.Errorf("%s lacks one of citation, description, homepage, license:\n%s", HFInfoFile, infoBytes)
	}
	if keys := jsonKeys(t, infoBytes, "features"); !slices.Equal(keys, columnNames()) {
		t.Errorf("features in order %v, want %v", keys, columnNames())
	}
	for _, w := range wantColumns {
		var f map[string]any
		if err := json.Unmarshal(info.Features[w.name], &f); err != nil {
			t.Fatal(err)
		}
		var wantF map[string]any
		switch w.arrow {
		case "Utf8":
			wantF = map[string]any{"dtype": "string", "_type": "Value"}
		case "Int64":
			wantF = map[string]any{"dtype": "int64", "_type": "Value"}
		case "Float64":
			wantF = map[string]any{"dtype": "float64", "_type": "Value"}
		case "Bool":
			wantF = map[string]any{"dtype": "bool", "_type": "Value"}
		case "List<Utf8>":
			wantF = map[string]any{"feature": map[string]any{"dtype": "string", "_type": "Value"}, "_type": "Sequence"}
		}
		if !reflect.DeepEqual(f, wantF) {
			t.Errorf("feature %s = %v, want %v", w.name, f, wantF)
		}
	}
	var hf struct {
		Info struct {
			Features json.RawMessage `json:"features"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(got.Metadata["huggingface"]), &hf); err != nil {
		t.Fatalf("schema metadata huggingface: %v", err)
	}
	if !jsonEqual(t, hf.Info.Features, mustJSON(t, info.Features)) {
		t.Errorf("schema metadata features differ from %s", HFInfoFile)
	}

	// state.json: what load_from_disk reads.
	stateBytes, err := os.ReadFile(want[2])
	if err != nil {
		t.Fatal(err)
	}
	var state map[string]any
	if err := json.Unmarshal(stateBytes, &state); err != nil {
		t.Fatalf("%s: %v", HFStateFile, err)
	}
	fp, _ := state["_fingerprint"].(string)
	if len(fp) != 16 {
		t.Errorf("_fingerprint = %q, want 16 hex digits", fp)
	}
	delete(state, "_fingerprint")
	wantState := map[string]any{
		"_data_files":         []any{map[string]any{"filename": HFDataFile}},
		"_format_columns":     nil,
		"_format_kwargs":      map[string]any{},
		"_format_type":        nil,
		"_output_all_columns": false,
		"_split":              nil,
	}
	if !reflect.DeepEqual(state, wantState) {
		t.Errorf("%s = %v, want %v", HFStateFile, state, wantState)
	}
	if keys := jsonKeys(t, stateBytes, ""); !slices.IsSorted(keys) {
		t.Errorf("%s keys %v are not sorted as json.dump(sort_keys=True) writes them", HFStateFile, keys)
	}
}

// TestJSONL checks the JSONL export: one object per row with every column
// as a key in schema order, values as in the artifact.
func TestJSONL(t *testing.T) {
	a := fixtureArtifact(t)
	dir, paths := export(t, a, FormatJSONL)
	if want := filepath.Join(dir, TaskRunsJSONLFile); !slices.Equal(paths, []string{want}) {
		t.Fatalf("paths = %v, want [%s]", paths, want)
	}
	data, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	rows := decodeJSONL(t, data)
	if len(rows) != len(a.Results) {
		t.Fatalf("%d lines, want %d", len(rows), len(a.Results))
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if keys := jsonKeys(t, first, ""); !slices.Equal(keys, columnNames()) {
		t.Errorf("keys %v, want %v", keys, columnNames())
	}
	checkAgainstArtifact(t, "jsonl", a, rows)

	// The decoded JSONL rows are the Go rows.
	var back []TaskRunRow
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r TaskRunRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		back = append(back, r)
	}
	if rows := Rows(a); !reflect.DeepEqual(back, rows) {
		t.Errorf("JSONL rows decode to\n%+v\nwant Rows(a)\n%+v", back, rows)
	}
}

// TestExportDeterministic: the same artifact gives the same bytes in every
// format.
func TestExportDeterministic(t *testing.T) {
	a := fixtureArtifact(t)
	for _, f := range TaskRunFormats() {
		_, p1 := export(t, a, f)
		_, p2 := export(t, a, f)
		for i := range p1 {
			b1, _ := os.ReadFile(p1[i])
			b2, _ := os.ReadFile(p2[i])
			if len(b1) == 0 || !bytes.Equal(b1, b2) {
				t.Errorf("%s: %s differs between two exports (%d vs %d bytes)", f, filepath.Base(p1[i]), len(b1), len(b2))
			}
		}
	}
}

func TestExportUnknownFormat(t *testing.T) {
	a := fixtureArtifact(t)
	dir := filepath.Join(t.TempDir(), "out")
	_, err := ExportTaskRuns(a, dir, "csv")
	if err == nil || !strings.Contains(err.Error(), `"csv"`) || !strings.Contains(err.Error(), "jsonl, parquet, hf") {
		t.Fatalf("err = %v, want one naming csv and the allowed formats", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("an unknown format created %s", dir)
	}
}

// A metrics block JSON cannot hold (a NaN built in memory) is an error
// naming the cell, and leaves no file behind.
func TestExportRejectsNaN(t *testing.T) {
	a := artifact.Build(fixtureRun, fixtureResults(), artifact.BuildOptions{})
	a.Results[2].Metrics.SolveSec = f64(math.NaN())
	bad := a.Results[2].CellID
	for _, f := range TaskRunFormats() {
		dir := t.TempDir()
		_, err := ExportTaskRuns(a, dir, f)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "metrics") {
			t.Errorf("%s: err = %v, want one naming cell %s and metrics", f, err, bad)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: left %d entries in the output directory", f, len(entries))
		}
	}
	rows := Rows(a)
	if rows[2].MetricsJSON != "null" || rows[1].MetricsJSON == "null" {
		t.Errorf("Rows: metrics_json = %q for the NaN row, %q for the next", rows[2].MetricsJSON, rows[1].MetricsJSON)
	}
}

func TestRowsEmptyArtifact(t *testing.T) {
	a := artifact.Build(fixtureRun, nil, artifact.BuildOptions{})
	if rows := Rows(a); len(rows) != 0 {
		t.Errorf("Rows = %v", rows)
	}
	_, paths := export(t, a, FormatParquet)
	var got readerOutput
	readWithNode(t, "read_parquet.mjs", paths[0], &got)
	if got.Rows != 0 || len(got.Columns) != len(wantColumns) {
		t.Errorf("empty export: %d rows, %d columns", got.Rows, len(got.Columns))
	}
	_, paths = export(t, a, FormatHF)
	readWithNode(t, "read_arrow.mjs", paths[0], &got)
	if got.Rows != 0 || len(got.Columns) != len(wantColumns) {
		t.Errorf("empty hf export: %d rows, %d columns", got.Rows, len(got.Columns))
	}
}

// checkAgainstArtifact compares rows decoded by a reader (numbers as
// json.Number or float64) with the artifact, column by column, computing
// every expected value from the artifact itself rather than from Rows.
func checkAgainstArtifact(t *testing.T, format string, a *artifact.Artifact, rows []map[string]any) {
	t.Helper()
	byCell := rowByCell(t, rows)
	if len(byCell) != len(a.Results) {
		t.Fatalf("%s: %d distinct cells, want %d", format, len(byCell), len(a.Results))
	}
	for _, r := range a.Results {
		row, ok := byCell[r.CellID]
		if !ok {
			t.Errorf("%s: no row for %s", format, r.CellID)
			continue
		}
		if len(row) != len(wantColumns) {
			t.Errorf("%s %s: %d columns, want %d", format, r.CellID, len(row), len(wantColumns))
		}
		m := r.Metrics
		want := map[string]any{
			"cell_id": r.CellID, "run_id": a.Run.ID, "task": r.Task, "harness": r.Harness, "model": r.Model,
			"repeat": float64(r.Repeat), "attempt": float64(r.Attempt), "outcome": r.Outcome,
			"error_class": strOrNil(r.ErrorClass), "passed": r.Passed, "reward": ptrOrNil(r.Reward),
			"returncode": intOrNil(r.ReturnCode), "verifier_returncode": intOrNil(r.VerifierReturnCode),
			"elapsed_sec": r.ElapsedSec, "task_revision": strOrNil(r.TaskRevision),
			"output_dir": strOrNil(r.OutputDir), "error": strOrNil(r.Error), "stdout_tail": strOrNil(r.StdoutTail),
			"metric_prompt_tokens": ptrOrNil(m.PromptTokens), "metric_completion_tokens": ptrOrNil(m.CompletionTokens),
			"metric_total_tokens": ptrOrNil(m.TotalTokens), "metric_cache_read_tokens": ptrOrNil(m.CacheReadTokens),
			"metric_cache_write_tokens": ptrOrNil(m.CacheWriteTokens), "metric_cost_usd": ptrOrNil(m.CostUSD),
			"metric_latency_sec": r.ElapsedSec, "metric_n_calls": ptrOrNil(m.NCalls),
			"metric_operation_count": float64(m.OperationCount), "metric_solver_timeout": m.SolverTimeout,
			"metric_verifier_timeout": m.VerifierTimeout, "metric_solver_error": m.SolverError, "metric_error": m.Error,
			"metric_solve_sec": ptrOrNil(m.SolveSec), "metric_verify_sec": ptrOrNil(m.VerifySec),
			"metric_build_sec": ptrOrNil(m.BuildSec),
			"difficulty":       nil, "category": nil, "tags": nil, "task_metadata_json": nil,
			"metric_tool_call_count": nil, "metric_egress_allowed": nil, "metric_egress_denied": nil, "metric_egress_errors": nil,
			"metric_observed_requests": nil, "metric_observed_input_tokens": nil, "metric_observed_output_tokens": nil,
			"metric_observed_cache_read_tokens": nil, "metric_observed_cache_write_tokens": nil, "metric_observed_cost_usd": nil,
			"metric_tokens_differ": nil,
		}
		if u := m.UsageObserved; u != nil {
			want["metric_observed_requests"], want["metric_observed_input_tokens"] = float64(u.Requests), float64(u.InputTokens)
			want["metric_observed_output_tokens"], want["metric_observed_cache_read_tokens"] = float64(u.OutputTokens), float64(u.CacheReadTokens)
			want["metric_observed_cache_write_tokens"], want["metric_observed_cost_usd"] = float64(u.CacheWriteTokens), ptrOrNil(u.CostUSD)
			if u.ReportedDiffers != nil {
				want["metric_tokens_differ"] = *u.ReportedDiffers
			}
		}
		if m.ToolCalls != nil {
			n := 0
			for _, c := range m.ToolCalls {
				n += c
			}
			want["metric_tool_call_count"] = float64(n)
		}
		if e := m.Egress; e != nil {
			want["metric_egress_allowed"], want["metric_egress_denied"], want["metric_egress_errors"] = float64(e.Allowed), float64(e.Denied), float64(e.Errors)
		}
		if md := r.TaskMeta; md != nil {
			delete(want, "task_metadata_json") // checked as JSON below
			switch d := md["difficulty"].(type) {
			case string:
				want["difficulty"] = d
			case float64:
				want["difficulty"] = strings.TrimSuffix(strings.TrimSuffix(mustJSONString(t, d), ".0"), "")
			}
			if c, ok := md["category"].(string); ok {
				want["category"] = c
			}
			if tags, ok := md["tags"].([]any); ok {
				want["tags"] = tags
			}
		}
		for col, w := range want {
			if g := normalize(row[col]); !reflect.DeepEqual(g, normalize(w)) {
				t.Errorf("%s %s: %s = %#v, want %#v", format, r.CellID, col, g, normalize(w))
			}
		}
		// The JSON columns hold the artifact's blocks.
		checkJSONCol(t, format, r.CellID, row, "metrics_json", r.Metrics)
		ops := any(r.Operations)
		if r.Operations == nil {
			ops = []any{}
		}
		checkJSONCol(t, format, r.CellID, row, "operations_json", ops)
		if r.Rewards == nil {
			if row["rewards_json"] != nil {
				t.Errorf("%s %s: rewards_json = %v, want null", format, r.CellID, row["rewards_json"])
			}
		} else {
			checkJSONCol(t, format, r.CellID, row, "rewards_json", r.Rewards)
		}
		if len(r.Steps) > 0 {
			checkJSONCol(t, format, r.CellID, row, "steps_json", r.Steps)
		}
		if r.TaskMeta != nil {
			checkJSONCol(t, format, r.CellID, row, "task_metadata_json", r.TaskMeta)
		}
	}

	// Null is not zero, spelled out for the fixture's telling rows.
	for _, c := range []struct {
		cell, col string
		want      any
	}{
		{"broken/agent:demo/m1/0", "reward", nil},
		{"broken/agent:demo/m1/0", "returncode", nil},
		{"broken/agent:demo/m1/0", "metric_prompt_tokens", nil},
		{"broken/agent:demo/m1/0", "metric_cost_usd", nil},
		{"broken/agent:demo/m1/0", "tags", nil},
		{"math/oracle/default/0", "reward", 0.0},
		{"math/oracle/default/0", "tags", []any{}},
		// An empty tool_calls map is omitted from the artifact: null.
		{"math/oracle/default/0", "metric_tool_call_count", nil},
		{"hello/agent:demo/m1/0", "reward", 0.5},
		{"hello/agent:demo/m1/0", "metric_cache_read_tokens", 0.0},
		{"hello/agent:demo/m1/0", "metric_prompt_tokens", 1200.0},
		{"hello/agent:demo/m1/0", "metric_cost_usd", 0.0123},
		{"hello/agent:demo/m1/0", "metric_tool_call_count", 3.0},
		{"hello/oracle/default/0", "metric_cache_read_tokens", nil},
		{"hello/oracle/default/0", "metric_build_sec", 0.0},
		{"hello/oracle/default/0", "tags", []any{"shell", "files"}},
		{"math/agent:demo/m1/0", "metric_cost_usd", 0.0},
		{"math/agent:demo/m1/0", "metric_n_calls", 0.0},
		{"math/agent:demo/m1/0", "difficulty", "3"},
		{"hello/agent:demo/m1/0", "step_count", 2.0},
		{"hello/agent:demo/m1/0", "steps_run", 1.0},
		{"hello/agent:demo/m1/0", "steps_skipped", 1.0},
		{"math/oracle/default/0", "step_count", nil},
		{"math/oracle/default/0", "steps_json", nil},
	} {
		if g := normalize(byCell[c.cell][c.col]); !reflect.DeepEqual(g, c.want) {
			t.Errorf("%s %s: %s = %#v, want %#v", format, c.cell, c.col, g, c.want)
		}
	}
}

func checkJSONCol(t *testing.T, format, cell string, row map[string]any, col string, want any) {
	t.Helper()
	s, ok := row[col].(string)
	if !ok {
		t.Errorf("%s %s: %s = %#v, want a JSON string", format, cell, col, row[col])
		return
	}
	if !jsonEqual(t, []byte(s), mustJSON(t, want)) {
		t.Errorf("%s %s: %s = %s, want %s", format, cell, col, s, mustJSON(t, want))
	}
}

// normalize turns json.Number into float64 and typed slices into []any so
// values from different readers compare.
func normalize(v any) any {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return v.String()
		}
		return f
	case int:
		return float64(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

func strOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func intOrNil(p *int) any {
	if p == nil {
		return nil
	}
	return float64(*p)
}

func ptrOrNil[T int64 | float64](p *T) any {
	if p == nil {
		return nil
	}
	return float64(*p)
}

func columnNames() []string {
	out := make([]string, len(wantColumns))
	for i, c := range wantColumns {
		out[i] = c.name
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustJSONString(t *testing.T, v any) string { return string(mustJSON(t, v)) }

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Errorf("not JSON: %s: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Errorf("not JSON: %s: %v", b, err)
		return false
	}
	return reflect.DeepEqual(x, y)
}

// jsonKeys returns the keys of the object at key (the top level when key
// is "") of data, in document order.
func jsonKeys(t *testing.T, data []byte, key string) []string {
	t.Helper()
	if key != "" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		data = m[key]
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", data)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func decodeJSONL(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var rows []map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, m)
	}
	if n := bytes.Count(data, []byte("\n")); n != len(rows) {
		t.Errorf("%d newlines for %d rows", n, len(rows))
	}
	return rows
}

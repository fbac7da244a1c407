package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// fixtureEvents is a small log: run-level and cell events, Usage with and
// without counts (an explicit 0 among them), Command with exit code 0 and
// without one, text that JSON would HTML-escape, and a long line.
func fixtureEvents(t *testing.T) []events.Envelope {
	t.Helper()
	const run = "01JDATASETEVENTS0000000000"
	cell := events.CellID("hello", "agent:demo", "m1", 0)
	exit0 := 0
	evs := []events.Envelope{
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{
			Spec: events.RunSpec{TasksRoot: "/tasks", Harnesses: []string{"agent:demo"}, Models: []string{"m1"}, Repeats: 1}, ProctorVersion: "0.0.0-test"}),
		events.Must(events.CellPlanned, run, cell, 1, "planner", events.CellPlannedData{Task: "hello", Harness: "agent:demo", Model: "m1",
			TaskMeta: map[string]any{"tags": []any{"a"}}}),
		events.Must(events.Usage, run, cell, 1, "launcher", events.UsageData{Model: "m1", PromptTokens: events.Count(1200), CompletionTokens: events.Count(340), CostUSD: f64(0.0123), Calls: events.Count(1)}),
		events.Must(events.Usage, run, cell, 1, "launcher", events.UsageData{Model: "m1", PromptTokens: events.Count(10)}),
		events.Must(events.Command, run, cell, 1, "launcher", events.CommandData{Command: "ls <dir> && echo 'é'", ExitCode: &exit0}),
		events.Must(events.Command, run, cell, 1, "launcher", events.CommandData{Command: "sleep 1000"}),
		events.Must(events.Message, run, cell, 1, "launcher", events.MessageData{Text: strings.Repeat("long line ", 20000)}),
		events.Must(events.RunFinished, run, "", 0, "aggregator", events.RunFinishedData{Status: "finished"}),
	}
	// A Usage event whose counts are explicitly 0 (UsageData would omit them).
	zero := events.Must(events.Usage, run, cell, 2, "launcher", nil)
	zero.Data = json.RawMessage(`{"prompt_tokens":0,"completion_tokens":0,"cost_usd":0}`)
	// Data from a producer that does not HTML-escape stays unescaped.
	raw := events.Must(events.Message, run, cell, 2, "launcher", nil)
	raw.Data = json.RawMessage(`{"text":"a <b> & 'é' \u2028"}`)
	evs = append(evs, zero, raw)
	// A fixed time with nanoseconds, in a non-UTC zone.
	evs[0].At = time.Date(2026, 1, 2, 4, 4, 5, 123456789, time.FixedZone("CET", 3600))
	return evs
}

// The jsonl export is the envelopes themselves and reads back equal.
func TestEventsJSONLRoundTrip(t *testing.T) {
	evs := fixtureEvents(t)
	var buf bytes.Buffer
	if err := ExportEvents(evs, &buf, FormatJSONL); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != len(evs) {
		t.Fatalf("%d lines, want %d", n, len(evs))
	}
	for i, e := range evs {
		if !bytes.Contains(buf.Bytes(), append([]byte(`"data":`), e.Data...)) {
			t.Errorf("event %d: data bytes %.200s are not in the export as they are", i, e.Data)
		}
	}
	got, err := ReadEventsJSONL(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d events, want %d", len(got), len(evs))
	}
	for i := range evs {
		want := evs[i]
		if !got[i].At.Equal(want.At) {
			t.Errorf("event %d: at = %v, want %v", i, got[i].At, want.At)
		}
		// JSON keeps the instant and the offset, not the zone's name.
		got[i].At, want.At = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	// Events stamped by events.New (UTC) come back identical, time included.
	for i := 1; i < len(evs); i++ {
		g, _ := ReadEventsJSONL(bytes.NewReader(mustLine(t, evs[i])))
		if !reflect.DeepEqual(g, []events.Envelope{evs[i]}) {
			t.Errorf("event %d does not round-trip exactly: %+v", i, g)
		}
	}
}

func mustLine(t *testing.T, e events.Envelope) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := ExportEvents([]events.Envelope{e}, &buf, FormatJSONL); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadEventsJSONLErrors(t *testing.T) {
	good := strings.TrimSpace(string(mustLine(t, fixtureEvents(t)[1])))
	for _, c := range []struct{ name, in, want string }{
		{"not json", good + "\n{oops\n", "line 2"},
		{"unknown type", good + "\n\n" + strings.Replace(good, `"type":"CellPlanned"`, `"type":"Nope"`, 1) + "\n", "line 3"},
		{"wrong version", strings.Replace(good, `"v":1`, `"v":2`, 1), "line 1"},
		{"trailing text", good + " {}\n", "line 1"},
		{"no id", strings.Replace(good, `"id":`, `"xid":`, 1), "line 1"},
	} {
		_, err := ReadEventsJSONL(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %s", c.name, err, c.want)
		}
	}
	// Blank lines, CRLF and a missing final newline are fine.
	got, err := ReadEventsJSONL(strings.NewReader("\n" + good + "\r\n\n" + good))
	if err != nil || len(got) != 2 {
		t.Errorf("got %d events, err %v; want 2, nil", len(got), err)
	}
}

// TestEventsParquetDuckDB reads the events Parquet export with DuckDB.
func TestEventsParquetDuckDB(t *testing.T) {
	evs := fixtureEvents(t)
	path := filepath.Join(t.TempDir(), "events.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ExportEvents(evs, f, FormatParquet); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var got readerOutput
	readWithNode(t, "read_parquet.mjs", path, &got)
	if got.Rows != len(evs) {
		t.Fatalf("DuckDB reads %d rows, want %d", got.Rows, len(evs))
	}
	wantCols := [][2]string{
		{"v", "BIGINT"}, {"id", "VARCHAR"}, {"run_id", "VARCHAR"}, {"cell_id", "VARCHAR"}, {"attempt", "BIGINT"},
		{"type", "VARCHAR"}, {"at", "TIMESTAMP WITH TIME ZONE"}, {"source", "VARCHAR"}, {"data", "VARCHAR"},
		{"usage_model", "VARCHAR"}, {"usage_prompt_tokens", "BIGINT"}, {"usage_completion_tokens", "BIGINT"},
		{"usage_cache_read_tokens", "BIGINT"}, {"usage_cache_write_tokens", "BIGINT"}, {"usage_cost_usd", "DOUBLE"},
		{"usage_calls", "BIGINT"}, {"command_exit_code", "BIGINT"},
	}
	if len(got.Columns) != len(wantCols) {
		t.Fatalf("columns %+v, want %v", got.Columns, wantCols)
	}
	for i, c := range got.Columns {
		if c.Name != wantCols[i][0] || c.Type != wantCols[i][1] {
			t.Errorf("column %d = %s %s, want %s %s", i, c.Name, c.Type, wantCols[i][0], wantCols[i][1])
		}
	}
	if got.KV[MetadataKey] != SchemaVersion || len(got.Compression) != 1 || got.Compression[0] != "ZSTD" {
		t.Errorf("kv %v, codecs %v", got.KV, got.Compression)
	}
	for i, e := range evs {
		row := got.Data[i]
		if row["id"] != e.ID || row["type"] != string(e.Type) || row["source"] != e.Source || row["run_id"] != e.RunID {
			t.Errorf("row %d = %v, want event %+v", i, row, e)
		}
		if row["data"] != string(e.Data) {
			t.Errorf("row %d: data = %v, want %s", i, row["data"], e.Data)
		}
		at, err := time.Parse("2006-01-02 15:04:05.999999999Z07", row["at"].(string))
		if err != nil {
			t.Fatalf("row %d: at %v: %v", i, row["at"], err)
		}
		// DuckDB's TIMESTAMPTZ holds microseconds.
		if want := e.At.Truncate(time.Microsecond); !at.Equal(want) {
			t.Errorf("row %d: at = %v, want %v", i, at, want)
		}
		if e.CellID == "" {
			if row["cell_id"] != nil || row["attempt"] != nil {
				t.Errorf("row %d: run-level event has cell_id %v attempt %v", i, row["cell_id"], row["attempt"])
			}
		} else if row["cell_id"] != e.CellID || normalize(row["attempt"]) != float64(e.Attempt) {
			t.Errorf("row %d: cell_id %v attempt %v, want %s %d", i, row["cell_id"], row["attempt"], e.CellID, e.Attempt)
		}
	}
	// Promoted columns: null where the event lacks the key, 0 where it says 0.
	for _, c := range []struct {
		i    int
		col  string
		want any
	}{
		{2, "usage_prompt_tokens", 1200.0}, {2, "usage_completion_tokens", 340.0}, {2, "usage_cost_usd", 0.0123},
		{2, "usage_calls", 1.0}, {2, "usage_model", "m1"}, {2, "usage_cache_read_tokens", nil},
		{3, "usage_prompt_tokens", 10.0}, {3, "usage_completion_tokens", nil}, {3, "usage_cost_usd", nil},
		{8, "usage_prompt_tokens", 0.0}, {8, "usage_completion_tokens", 0.0}, {8, "usage_cost_usd", 0.0}, {8, "usage_model", nil},
		{4, "command_exit_code", 0.0}, {5, "command_exit_code", nil},
		{4, "usage_prompt_tokens", nil}, {2, "command_exit_code", nil}, {0, "usage_cost_usd", nil},
	} {
		if g := normalize(got.Data[c.i][c.col]); !reflect.DeepEqual(g, c.want) {
			t.Errorf("row %d (%s): %s = %#v, want %#v", c.i, evs[c.i].Type, c.col, g, c.want)
		}
	}
}

func TestEventRowOfBadData(t *testing.T) {
	e := events.Must(events.Usage, "r", "c", 1, "launcher", nil)
	e.Data = json.RawMessage(`{"prompt_tokens":"many"}`)
	if _, err := EventRowOf(e); err == nil || !strings.Contains(err.Error(), e.ID) {
		t.Errorf("err = %v, want one naming event %s", err, e.ID)
	}
	if err := ExportEvents([]events.Envelope{e}, &bytes.Buffer{}, FormatParquet); err == nil {
		t.Error("ExportEvents(parquet) accepted undecodable Usage data")
	}
	e = events.Must(events.Message, "r", "c", 1, "launcher", nil)
	e.At = time.Time{}
	if _, err := EventRowOf(e); err == nil || !strings.Contains(err.Error(), e.ID) {
		t.Errorf("zero time: err = %v, want one naming event %s", err, e.ID)
	}
	if err := ExportEvents(nil, &bytes.Buffer{}, "csv"); err == nil || !strings.Contains(err.Error(), "jsonl, parquet") {
		t.Errorf("unknown format: err = %v", err)
	}
}

func TestEventWriterClose(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewEventWriter(&buf, FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	if err := w.Close(); err != nil || buf.Len() != n {
		t.Errorf("second Close: err %v, wrote %d bytes", err, buf.Len()-n)
	}
	if err := w.Write(fixtureEvents(t)[0]); err == nil {
		t.Error("Write after Close succeeded")
	}
}

func TestScanEventsJSONLStops(t *testing.T) {
	var buf bytes.Buffer
	if err := ExportEvents(fixtureEvents(t), &buf, FormatJSONL); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	n := 0
	err := ScanEventsJSONL(&buf, func(events.Envelope) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Errorf("err %v after %d events, want the callback's error after 3", err, n)
	}
}

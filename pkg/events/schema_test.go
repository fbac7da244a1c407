package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite schemas/events.v1.schema.json from the Go types")

const schemaPath = "../../schemas/events.v1.schema.json"

// schemaFor derives a JSON Schema fragment from a Go type. It is the drift
// check: the committed schema must equal what the types say.
func schemaFor(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaFor(t.Elem())
		if ty, ok := s["type"].(string); ok {
			s["type"] = []any{ty, "null"}
		}
		return s
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaFor(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaFor(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		props := map[string]any{}
		var required []any
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			props[name] = schemaFor(f.Type)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	panic("schemaFor: unsupported kind " + t.Kind().String())
}

func buildSchema() map[string]any {
	defs := map[string]any{}
	var oneOf []any
	for _, ty := range Types() {
		v, _ := DataType(ty)
		defs[string(ty)] = schemaFor(reflect.TypeOf(v).Elem())
		oneOf = append(oneOf, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"const": string(ty)}}},
			"then": map[string]any{"properties": map[string]any{"data": map[string]any{"$ref": "#/$defs/" + string(ty)}}},
		})
	}
	var typeNames []any
	for _, ty := range Types() {
		typeNames = append(typeNames, string(ty))
	}
	return map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"$id":                  "https://proctor-eval.github.io/schemas/events.v1.schema.json",
		"title":                "proctor event envelope, version 1 (DESIGN §7)",
		"type":                 "object",
		"required":             []any{"v", "id", "type", "at", "run_id", "source", "data"},
		"additionalProperties": false,
		"properties": map[string]any{
			"v":       map[string]any{"const": 1},
			"id":      map[string]any{"type": "string", "minLength": 1},
			"type":    map[string]any{"enum": typeNames},
			"at":      map[string]any{"type": "string", "format": "date-time"},
			"run_id":  map[string]any{"type": "string", "minLength": 1},
			"cell_id": map[string]any{"type": "string"},
			"attempt": map[string]any{"type": "integer", "minimum": 0},
			"source":  map[string]any{"type": "string"},
			"data":    map[string]any{"type": "object"},
		},
		"allOf": oneOf,
		"$defs": defs,
	}
}

func TestSchemaMatchesTypes(t *testing.T) {
	want, err := json.MarshalIndent(buildSchema(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *update {
		if err := os.WriteFile(schemaPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatalf("read schema: %v (run go test ./pkg/events -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s drifted from the Go types in pkg/events; review and run go test ./pkg/events -run TestSchemaMatchesTypes -update", filepath.Base(schemaPath))
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	f, err := os.Open(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("events.v1.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("events.v1.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEncodedEventsValidate(t *testing.T) {
	s := compileSchema(t)
	one := 1.0
	rc := 0
	samples := []Envelope{
		Must(RunRequested, "R1", "", 0, "cli", RunRequestedData{Spec: RunSpec{TasksRoot: "/t", Harnesses: []string{"oracle"}, Models: []string{"default"}, Repeats: 1, OutputDir: "/o"}, ProctorVersion: "dev"}),
		Must(CellPlanned, "R1", "a/oracle/default/1", 1, "planner", CellPlannedData{Task: "a", Harness: "oracle", Model: "default", Repeat: 1}),
		Must(Usage, "R1", "a/oracle/default/1", 1, "launcher", UsageData{PromptTokens: Count(10)}),
		Must(Verdict, "R1", "a/oracle/default/1", 1, "verifier", VerdictData{Reward: &one, ReturnCode: &rc, Rewards: map[string]float64{"reward": 1}}),
	}
	for _, e := range samples {
		b, _ := Encode(e)
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); err != nil {
			t.Errorf("%s does not validate: %v", e.Type, err)
		}
	}
	// Drift the other way: an unknown data key must be rejected.
	bad := Must(Verdict, "R1", "c", 1, "verifier", map[string]any{"reward": 1, "duration_sec": 1, "surprise": true})
	b, _ := Encode(bad)
	v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err := s.Validate(v); err == nil {
		t.Fatal("an unknown Verdict field validated")
	}
}

func TestRoundTripAndSubjects(t *testing.T) {
	e := Must(Usage, "01RUN", "fix-total/oracle/default/1", 2, "launcher", UsageData{PromptTokens: Count(5), CompletionTokens: Count(7)})
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != e.ID || got.Attempt != 2 || !got.At.Equal(e.At) {
		t.Fatalf("round trip changed the envelope: %+v", got)
	}
	d, err := DecodeData(got)
	if err != nil {
		t.Fatal(err)
	}
	if u := d.(*UsageData); u.PromptTokens == nil || *u.PromptTokens != 5 || u.CompletionTokens == nil || *u.CompletionTokens != 7 || u.CacheReadTokens != nil {
		t.Fatalf("data = %+v", u)
	}
	subj := Subject(e)
	if !strings.HasPrefix(subj, "proctor.run.01RUN.cell.") || !strings.HasSuffix(subj, ".Usage") || strings.Count(subj, ".") != 5 {
		t.Fatalf("subject %q", subj)
	}
	if Subject(Must(RunFinished, "01RUN", "", 0, "aggregator", nil)) != "proctor.run.01RUN.RunFinished" {
		t.Fatal("run-level subject")
	}
	if _, err := Decode([]byte(`{"v":1,"id":"x","type":"Nope","at":"2026-01-01T00:00:00Z","run_id":"r","source":"s","data":{}}`)); err == nil {
		t.Fatal("unknown type decoded")
	}
	if _, err := Decode([]byte(`{"v":2,"id":"x","type":"Usage","at":"2026-01-01T00:00:00Z","run_id":"r","source":"s","data":{}}`)); err == nil {
		t.Fatal("version 2 decoded")
	}
	// IDs are unique and increasing within a process.
	prev := NewID()
	for i := 0; i < 1000; i++ {
		id := NewID()
		if id <= prev {
			t.Fatalf("ids not increasing: %s then %s", prev, id)
		}
		prev = id
	}
}

func TestEncodeMatchesMarshal(t *testing.T) {
	for _, e := range []Envelope{
		Must(Usage, "R", "t/agent:x/m/1", 2, "launcher", UsageData{PromptTokens: Count(3)}),
		Must(RunFinished, "R", "", 0, "aggregator", RunFinishedData{Status: "finished"}),
		Must(Message, "R", "tâsk \"q\" <b>&\\/1", 1, "s\n", MessageData{Text: "\u2028 é"}),
		{V: 1, ID: "x", Type: Verdict, RunID: "R", Source: "s"},
	} {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Encode differs from json.Marshal:\n got %s\nwant %s", got, want)
		}
	}
}

package harness

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/proctor-eval/proctor/pkg/events"
)

var updateLines = flag.Bool("update-lines", false, "rewrite schemas/agent-lines.v1.schema.json from lineFields")

const linesSchemaPath = "../../schemas/agent-lines.v1.schema.json"

// lineTags are the _tag values ParseLine makes events of.
var lineTags = []events.Type{events.Started, events.Message, events.Command, events.FileChange, events.ToolCall, events.Usage, events.Finished}

// linesSchema derives the JSON Schema of an event line of the agent's
// stdout from lineFields, the decoder's own type: every key it reads
// under every alias, _tag one of lineTags, other keys allowed (ignored).
func linesSchema() map[string]any {
	props := map[string]any{}
	t := reflect.TypeOf(lineFields{})
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		var s map[string]any
		switch {
		case f.Type == reflect.TypeOf(json.Number("")):
			s = map[string]any{"type": "number"}
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.String:
			s = map[string]any{"type": "string"}
		case f.Type.Kind() == reflect.Bool:
			s = map[string]any{"type": "boolean"}
		case f.Type.Kind() == reflect.Slice:
			s = map[string]any{"type": "array"}
		default:
			s = map[string]any{}
		}
		props[name] = s
	}
	var tags []any
	for _, tg := range lineTags {
		tags = append(tags, string(tg))
	}
	props["_tag"] = map[string]any{"enum": tags}
	return map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://proctor-eval.github.io/schemas/agent-lines.v1.schema.json",
		"title":       "proctor agent event line (DESIGN §5.1)",
		"description": "One line of an agent:<dir> agent's stdout that becomes an event: a JSON object with a known _tag. Keys are read under every alias listed; a key of another type is skipped, the rest of the line read; unknown keys are ignored. Generated from pkg/harness lineFields (go test ./pkg/harness -run TestLinesSchema -update-lines).",
		"type":        "object", "required": []any{"_tag"}, "properties": props, "additionalProperties": true,
	}
}

// anpordLines are event lines as the Anpord command harness's agents and
// proctor's example agents print them.
var anpordLines = []string{
	`{"_tag":"Started","sessionId":"sess-1","model":"claude-sonnet-4-5"}`,
	`{"_tag":"Message","role":"assistant","text":"Reading the task"}`,
	`{"_tag":"Command","command":"ls -la","exitCode":0,"output":"total 0"}`,
	`{"_tag":"FileChange","paths":["src/a.py","src/b.py"],"kind":"edit"}`,
	`{"_tag":"ToolCall","callId":"call-1","name":"bash","input":{"command":"ls"},"status":"ok"}`,
	`{"_tag":"Usage","inputTokens":120,"outputTokens":30,"totalTokens":150,"cost_usd":0.0021,"model":"m"}`,
	`{"_tag":"Finished","exitReason":"completed"}`,
	`{"_tag":"Usage","input_tokens":310,"output_tokens":95,"cache_read_input_tokens":150,"cost_usd":0.0017}`,
}

// TestLinesSchema keeps schemas/agent-lines.v1.schema.json equal to what
// the decoder reads, and checks that the protocol's example lines (and
// the scripted example agent's) validate against it and parse as events.
func TestLinesSchema(t *testing.T) {
	want, _ := json.MarshalIndent(linesSchema(), "", "  ")
	want = append(want, '\n')
	if *updateLines {
		if err := os.WriteFile(linesSchemaPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(linesSchemaPath)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not what lineFields says (run go test ./pkg/harness -run TestLinesSchema -update-lines): %v", linesSchemaPath, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("agent-lines.v1.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("agent-lines.v1.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range anpordLines {
		v, _ := jsonschema.UnmarshalJSON(strings.NewReader(l))
		if err := s.Validate(v); err != nil {
			t.Errorf("%s: %v", l, err)
		}
		if p := ParseLine(l, time.Time{}); p.Kind != LineEvent || !slices.Contains(lineTags, p.Type) {
			t.Errorf("%s does not parse as an event: %+v", l, p)
		}
	}
	for _, bad := range []string{`{"_tag":"Unknown"}`, `{"_tag":"Usage","inputTokens":"many"}`, `{"text":"no tag"}`} {
		v, _ := jsonschema.UnmarshalJSON(strings.NewReader(bad))
		if s.Validate(v) == nil {
			t.Errorf("%s validates", bad)
		}
	}
}

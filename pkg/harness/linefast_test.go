package harness

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// inPlaceSeeds are lines fastFields decodes itself; leftSeeds it leaves
// to encoding/json.
var inPlaceSeeds = []string{
	`{"_tag":"Usage","input_tokens":12,"output_tokens":12,"cost_usd":0.0001}`,
	`{"_tag":"ToolCall","name":"bash","input":{"cmd":"ls 3"}}`,
	`{"_tag":"Command","command":"echo 2","exit_code":0}`,
	`{"_tag":"Message","role":"assistant","text":"step 1"}`,
	`{"_tag":"Message","text":"line\nnext \"q\" \u00e9 \ud83d\ude00 \ud800"}`,
	"{\"_tag\":\"Message\",\"text\":\"bad \xff utf8 é\"}",
	` { "_tag" : "Usage" , "inputTokens" : -1.5e+3 , "calls" : 0 } `,
	`{"_tag":"FileChange","paths":["a","b",3,null],"kind":"edit"}`,
	`{"_tag":"FileChange","paths":[],"path":"x"}`,
	`{"_tag":"ToolCall","args":[1,{"a":[true,false,null]}],"error":true,"is_error":false}`,
	`{"_tag":"ToolCall","input":null,"arguments":"s"}`,
	`{"_tag":"Started","sessionId":"s","session_id":"t","model":"m"}`,
	`{"_tag":"Finished","exitCode":3,"exit_reason":"done","at":1767323045123}`,
	`{"_tag":"Usage","total_tokens":1e400}`,
	`{"_tag":"Usage","cost":123456789012345678901234567890}`,
	`{"_tag":"Message","unknown":{"deep":[[[[1]]]]},"other":"\u0041"}`,
	`{}`,
}

var leftSeeds = []string{
	`{"_tag":"Message","Text":"case"}`,
	`{"_tag":"Message","TEXT":"a","text":"b"}`,
	`{"_tag":"Message","text":"a","text":"b"}`,
	`{"_tag":"Message","text":null}`,
	`{"_tag":"Usage","input_tokens":"12"}`,
	`{"_tag":"Usage","input_tokens":"x"}`,
	`{"_tag":"Message","role":7,"error":"yes"}`,
	`{"_tag":"Message","ſtatus":"x","\u0074ext":"esc key"}`,
	`{"_tag":"Message","text":"a",}`,
	`{"_tag":"Message","text":"a"}x`,
	`{"_tag":"Message","n":01}`,
	`{"_tag":"Message","n":1.}`,
	`{"_tag":"Message","n":-}`,
	`{"_tag":"Message","n":tru}`,
	`{"_tag":"Message","s":"\x"}`,
	"{\"_tag\":\"Message\",\"s\":\"tab\there\"}",
	`{"_tag":"Message","s":"\u12"}`,
	`{"_tag":null}`,
	`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"_tag":"Message"}`,
}

// FuzzParseLineFastMatchesJSON holds fastFields to encoding/json: when it
// decodes a line, json.Unmarshal decodes the same line without an error
// into the same fields, and ParseLine's result is the same with and
// without it.
func FuzzParseLineFastMatchesJSON(f *testing.F) {
	for _, s := range append(inPlaceSeeds, leftSeeds...) {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		var fast, ref lineFields
		if fastFields(s, &fast) {
			if err := json.Unmarshal([]byte(s), &ref); err != nil {
				t.Fatalf("%q: fastFields decoded what encoding/json rejects: %v", s, err)
			}
			if !reflect.DeepEqual(fast, ref) {
				t.Fatalf("%q: fastFields\n%+v\nencoding/json\n%+v", s, fast, ref)
			}
		}
		got := ParseLine(s, now)
		fastLines = false
		want := ParseLine(s, now)
		fastLines = true
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: ParseLine with fastFields %+v, with encoding/json %+v", s, got, want)
		}
	})
}

// TestFastFieldsScope: the plain lines agents print are decoded in place;
// whatever encoding/json reads differently (a key in another case, a key
// given twice, null, a quoted number, a wrong type, invalid JSON) is left
// to encoding/json.
func TestFastFieldsScope(t *testing.T) {
	for _, s := range inPlaceSeeds {
		var f lineFields
		if !fastFields(strings.TrimSpace(s), &f) {
			t.Errorf("%q: not decoded in place", s)
		}
	}
	for _, s := range leftSeeds {
		var f lineFields
		if fastFields(s, &f) {
			t.Errorf("%q: decoded in place, want encoding/json", s)
		}
	}
}

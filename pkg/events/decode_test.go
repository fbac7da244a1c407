package events

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The fast path must give exactly what encoding/json gives, or step aside.
func FuzzDecodeMatchesJSON(f *testing.F) {
	for _, e := range []Envelope{
		Must(Usage, "R1", "t/agent:x/m/1", 2, "launcher", UsageData{PromptTokens: Count(3)}),
		Must(RunFinished, "R1", "", 0, "aggregator", RunFinishedData{Status: "finished"}),
		Must(Message, "R1", "tâsk \"q\"/oracle/default/1", 1, "launcher", MessageData{Text: "a\nb"}),
		{V: 1, ID: "x", Type: Verdict, RunID: "R", Source: "s", At: time.Unix(0, 5).UTC()},
	} {
		b, _ := Encode(e)
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"id":"x","type":"Usage","at":"2026-01-01T00:00:00Z","run_id":"r","source":"s","data":{} } `))
	f.Add([]byte(`{"v":1,"id":"x","type":"Usage","at":"2026-01-01T00:00:00Z","run_id":"r","source":"s","data":{"a":1},"x":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeFast(b)
		if !ok {
			return
		}
		var slow Envelope
		if err := json.Unmarshal(b, &slow); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, b)
		}
		if len(slow.Data) > 0 && string(slow.Data) == "null" {
			slow.Data = nil
		}
		if !reflect.DeepEqual(fast, slow) && !(fast.At.Equal(slow.At) && sameButAt(fast, slow)) {
			t.Fatalf("fast %+v\nslow %+v\nfor %q", fast, slow, b)
		}
	})
}

func sameButAt(a, b Envelope) bool {
	a.At, b.At = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestDecodeFastRoundTrip(t *testing.T) {
	e := Must(Command, "01RUN", "task/agent:dir/m/3", 3, "launcher", CommandData{Command: "ls", ExitCode: new(int)})
	b, _ := Encode(e)
	got, ok := decodeFast(b)
	if !ok || got.ID != e.ID || got.CellID != e.CellID || got.Attempt != 3 || !got.At.Equal(e.At) || string(got.Data) != string(e.Data) {
		t.Fatalf("fast decode: %v %+v", ok, got)
	}
	// The data does not alias the input, which callers reuse.
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := string(d.Data)
	for i := range b {
		b[i] = 'x'
	}
	if string(d.Data) != want {
		t.Fatalf("decoded data changed with the input buffer: %s", d.Data)
	}
	// An escaped string goes to encoding/json, and still decodes.
	esc := Must(Message, "R", `a"b/oracle/default/1`, 1, "s", nil)
	b, _ = Encode(esc)
	if _, ok := decodeFast(b); ok {
		t.Fatal("fast path took an escaped string")
	}
	if d, err := Decode(b); err != nil || d.CellID != esc.CellID {
		t.Fatalf("fallback: %v %+v", err, d)
	}
}

package events

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"
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
	shared := &Decoder{Owned: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeFast(b, nil)
		if !ok {
			return
		}
		// A Decoder (shared strings, data aliasing the input) gives the
		// same envelope, also after the strings of earlier inputs.
		if viaDecoder, ok := decodeFast(b, shared); !ok || !reflect.DeepEqual(fast, viaDecoder) {
			t.Fatalf("Decoder: %v %+v\nwant %+v", ok, viaDecoder, fast)
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
	got, ok := decodeFast(b, nil)
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
	if _, ok := decodeFast(b, nil); ok {
		t.Fatal("fast path took an escaped string")
	}
	if d, err := Decode(b); err != nil || d.CellID != esc.CellID {
		t.Fatalf("fallback: %v %+v", err, d)
	}
}

// A Decoder shares the strings that repeat between events, and with Owned
// lets the data alias the caller's buffer; its envelopes equal Decode's.
func TestDecoderSharesRepeatedStrings(t *testing.T) {
	var d Decoder
	var prev Envelope
	for i := range 3 {
		e := Must(Usage, "01RUN", "task/agent:dir/m/3", i, "launcher", UsageData{PromptTokens: Count(int64(i))})
		b, _ := Encode(e)
		got, err := d.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := Decode(b)
		if !reflect.DeepEqual(got, plain) {
			t.Fatalf("Decoder %+v\nDecode %+v", got, plain)
		}
		if i > 0 && unsafe.StringData(got.CellID) != unsafe.StringData(prev.CellID) {
			t.Fatal("the cell id was allocated again")
		}
		if i > 0 && unsafe.StringData(got.ID) == unsafe.StringData(prev.ID) {
			t.Fatal("two events share an id")
		}
		prev = got
		// Not Owned: the data is a copy.
		b[len(b)-3] = 'x'
		if string(got.Data) != string(plain.Data) {
			t.Fatalf("data follows the reused buffer: %s", got.Data)
		}
	}
	owned := Decoder{Owned: true}
	b, _ := Encode(prev)
	got, err := owned.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if &got.Data[0] != &b[bytes.Index(b, []byte(`"data":`))+len(`"data":`)] {
		t.Fatal("an Owned decoder copied the data")
	}
	// The bound: strings beyond decoderStrings are still right, not kept.
	big := Decoder{strs: make(map[string]string, decoderStrings)}
	for i := range decoderStrings {
		big.strs[strconv.Itoa(i)] = strconv.Itoa(i)
	}
	e := Must(Usage, "R-new", "c-new", 1, "s-new", nil)
	b, _ = Encode(e)
	if got, err := big.Decode(b); err != nil || got.RunID != "R-new" || got.CellID != "c-new" || len(big.strs) != decoderStrings {
		t.Fatalf("past the bound: %v %+v, %d kept", err, got, len(big.strs))
	}
}

// The fast path's data validator rejects every form encoding/json
// rejects (the fast path must never be the more lenient one).
func TestDecodeFastRejectsInvalidData(t *testing.T) {
	for _, data := range []string{
		`{"a":1,}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":-}`, `{"a":1e}`, `{"a":1e+}`,
		`{"a":"x` + "\x01" + `"}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12G4"}`, `{"a" 1}`, `{a:1}`,
		`{"a":[1,]}`, `{"a":tru}`, `{"a":nul}`, `{"a":NaN}`, `{"a":1}}`, `{"a":{"b":1}`, `{"a":1 "b":2}`,
		`{"a":'x'}`, `{"a":"x"` + "\t" + `,}`, `{,"a":1}`, `{"a":[1 2]}`, `{"a":-01}`, `{"a":1.5e}`, `{"a":"\/\q"}`,
	} {
		if json.Valid([]byte(data)) {
			t.Fatalf("the case %q is valid JSON", data)
		}
		b := []byte(`{"v":1,"id":"x","type":"Usage","at":"2026-01-01T00:00:00Z","run_id":"r","source":"s","data":` + data + `}`)
		if _, ok := decodeFast(b, nil); ok {
			t.Errorf("the fast path took invalid data %q", data)
		}
		if _, err := Decode(b); err == nil {
			t.Errorf("Decode took invalid data %q", data)
		}
	}
}

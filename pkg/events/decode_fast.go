package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// decodeFast parses an envelope in the exact form Encode writes (fields in
// order, plain strings without escapes), which is every event proctor
// stored; it reports false for anything else, and Decode then falls back to
// encoding/json. The data object is checked with gjson's validator (a
// few times faster than json.Valid, and never more lenient: the fuzz test
// holds it to encoding/json), not decoded.
// d, when not nil, shares repeated strings and may let Data alias b (see
// Decoder).
func decodeFast(b []byte, d *Decoder) (Envelope, bool) {
	var e Envelope
	p := fastParser{b: b, d: d}
	if !p.lit(`{"v":`) {
		return e, false
	}
	v, ok := p.int()
	if !ok {
		return e, false
	}
	e.V = int(v)
	var s string
	if s, ok = p.fieldOnce(`,"id":`); !ok {
		return e, false
	}
	e.ID = s
	if s, ok = p.field(`,"type":`, slotType); !ok {
		return e, false
	}
	e.Type = Type(s)
	if s, ok = p.fieldOnce(`,"at":`); !ok {
		return e, false
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	var buf [64]byte
	if err != nil || string(at.AppendFormat(buf[:0], time.RFC3339Nano)) != s {
		return e, false // only the canonical form Encode writes
	}
	e.At = at
	if s, ok = p.field(`,"run_id":`, slotRun); !ok {
		return e, false
	}
	e.RunID = s
	if p.peek(`,"cell_id":`) {
		if s, ok = p.field(`,"cell_id":`, slotCell); !ok {
			return e, false
		}
		e.CellID = s
	}
	if p.lit(`,"attempt":`) {
		a, ok := p.int()
		if !ok {
			return e, false
		}
		e.Attempt = int(a)
	}
	if s, ok = p.field(`,"source":`, slotSource); !ok {
		return e, false
	}
	e.Source = s
	if !p.lit(`,"data":`) {
		return e, false
	}
	rest := bytes.TrimRight(p.b[p.i:], " \t\r\n")
	if len(rest) < 2 || rest[len(rest)-1] != '}' {
		return e, false
	}
	data := rest[:len(rest)-1]
	if len(data) == 0 || !(data[0] == '{' && data[len(data)-1] == '}' || bytes.Equal(data, []byte("null"))) || !gjson.ValidBytes(data) {
		return e, false
	}
	if bytes.Equal(data, []byte("null")) {
		data = nil
	}
	if d == nil || !d.Owned {
		data = bytes.Clone(data) // b may be a reused buffer
	}
	e.Data = json.RawMessage(data)
	return e, true
}

type fastParser struct {
	b []byte
	i int
	d *Decoder
}

func (p *fastParser) peek(lit string) bool { return bytes.HasPrefix(p.b[p.i:], []byte(lit)) }

func (p *fastParser) lit(lit string) bool {
	if !p.peek(lit) {
		return false
	}
	p.i += len(lit)
	return true
}

func (p *fastParser) int() (int64, bool) {
	j := p.i
	for j < len(p.b) && (p.b[j] == '-' || p.b[j] >= '0' && p.b[j] <= '9') {
		j++
	}
	digits := p.b[p.i:j]
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, false // a leading zero is not JSON ("00"): the slow path rejects it
	}
	n, err := strconv.ParseInt(string(p.b[p.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = j
	return n, true
}

// field reads `<lit>"<string>"` where the string is valid UTF-8 with no
// escape and no control character, shared through the Decoder if any.
func (p *fastParser) field(lit string, slot int) (string, bool) {
	raw, ok := p.rawField(lit)
	if !ok {
		return "", false
	}
	if p.d != nil {
		return p.d.intern(raw, slot), true
	}
	return string(raw), true
}

// fieldOnce is field for a value that does not repeat (an event id).
func (p *fastParser) fieldOnce(lit string) (string, bool) {
	raw, ok := p.rawField(lit)
	return string(raw), ok
}

// rawField is field without the conversion to a string.
func (p *fastParser) rawField(lit string) ([]byte, bool) {
	if !p.lit(lit) || p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	j := p.i + 1
	for j < len(p.b) && p.b[j] != '"' {
		if p.b[j] == '\\' || p.b[j] < 0x20 {
			return nil, false
		}
		j++
	}
	if j >= len(p.b) || !utf8.Valid(p.b[p.i+1:j]) {
		return nil, false // encoding/json would replace invalid bytes
	}
	raw := p.b[p.i+1 : j]
	p.i = j + 1
	return raw, true
}

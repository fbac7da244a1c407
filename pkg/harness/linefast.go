package harness

import (
	"encoding/json"
	"reflect"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// fastFields fills f (cleared) from s, a JSON object, as json.Unmarshal
// would, for the plain lines agents print: it reports false, leaving f
// in any state, for anything it does not decode exactly as
// encoding/json does (invalid JSON, a key matching a field only
// case-insensitively or not plain ASCII, a field given twice, a value of
// another type than its field's or null, a number in quotes, nesting
// deeper than fastMaxDepth), and the caller then decodes the line with
// json.Unmarshal. Strings holding an escape or invalid UTF-8, and the
// values of `any` fields, are decoded by json.Unmarshal one value at a
// time; everything else is read in place. FuzzParseLineFastMatchesJSON
// holds it to encoding/json's result.
func fastFields(s string, f *lineFields) bool {
	p := fastScan{s: s}
	var seen [2]uint64
	p.ws()
	if !p.eat('{') {
		return false
	}
	p.ws()
	if p.eat('}') {
		p.ws()
		return p.i == len(s)
	}
	base := unsafe.Pointer(f)
	for {
		p.ws()
		key, ok := p.plainKey()
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
		fld, known := lineFieldsByKey[key]
		if !known {
			if _, folds := lineFieldsFolded[strings.ToLower(key)]; folds {
				return false // encoding/json would fill a field from it
			}
			if !p.skip(0) {
				return false
			}
		} else {
			if seen[fld.n/64]&(1<<(fld.n%64)) != 0 {
				return false
			}
			seen[fld.n/64] |= 1 << (fld.n % 64)
			start := p.i
			if !p.skip(0) {
				return false
			}
			if !setField(unsafe.Add(base, fld.off), fld.kind, s[start:p.i]) {
				return false
			}
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if !p.eat('}') {
			return false
		}
		p.ws()
		return p.i == len(s)
	}
}

// fastMaxDepth bounds the nesting fastFields reads itself.
const fastMaxDepth = 64

// The kinds of lineFields' fields.
const (
	kindStringPtr = iota // *string
	kindNumber           // json.Number
	kindBool             // bool
	kindAny              // any
	kindSlice            // []any
)

type fastField struct {
	n    int // the field's index, for duplicates
	off  uintptr
	kind int
}

// lineFieldsByKey maps each JSON key of lineFields to its field;
// lineFieldsFolded holds the keys in lower case, the keys encoding/json
// would also match another spelling of.
var lineFieldsByKey, lineFieldsFolded = func() (map[string]fastField, map[string]bool) {
	by, folded := map[string]fastField{}, map[string]bool{}
	t := reflect.TypeFor[lineFields]()
	if t.NumField() > 128 {
		panic("harness: lineFields has more fields than fastFields tracks")
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		var kind int
		switch sf.Type {
		case reflect.TypeFor[*string]():
			kind = kindStringPtr
		case reflect.TypeFor[json.Number]():
			kind = kindNumber
		case reflect.TypeFor[bool]():
			kind = kindBool
		case reflect.TypeFor[any]():
			kind = kindAny
		case reflect.TypeFor[[]any]():
			kind = kindSlice
		default:
			panic("harness: lineFields." + sf.Name + " has a type fastFields does not read")
		}
		by[key] = fastField{n: i, off: sf.Offset, kind: kind}
		folded[strings.ToLower(key)] = true
	}
	return by, folded
}()

// setField stores the JSON value tok into the field at p of the kind.
func setField(p unsafe.Pointer, kind int, tok string) bool {
	switch kind {
	case kindStringPtr:
		if tok[0] != '"' {
			return false
		}
		v, ok := plainString(tok)
		if !ok {
			if json.Unmarshal([]byte(tok), &v) != nil {
				return false
			}
		}
		*(**string)(p) = &v
	case kindNumber:
		if tok[0] != '-' && (tok[0] < '0' || tok[0] > '9') {
			return false
		}
		*(*json.Number)(p) = json.Number(tok)
	case kindBool:
		switch tok {
		case "true":
			*(*bool)(p) = true
		case "false":
			*(*bool)(p) = false
		default:
			return false
		}
	case kindAny:
		var v any
		if json.Unmarshal([]byte(tok), &v) != nil {
			return false
		}
		*(*any)(p) = v
	case kindSlice:
		if tok[0] != '[' {
			return false
		}
		var v []any
		if json.Unmarshal([]byte(tok), &v) != nil {
			return false
		}
		*(*[]any)(p) = v
	}
	return true
}

// plainString returns the contents of the JSON string tok when it holds
// no escape and is valid UTF-8 (then they are its bytes as they are).
func plainString(tok string) (string, bool) {
	v := tok[1 : len(tok)-1]
	if strings.IndexByte(v, '\\') >= 0 || !utf8.ValidString(v) {
		return "", false
	}
	return v, true
}

// fastScan is a position in a JSON text.
type fastScan struct {
	s string
	i int
}

func (p *fastScan) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastScan) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// plainKey reads an object key of printable ASCII with no escape.
func (p *fastScan) plainKey() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return p.s[start : p.i-1], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
		p.i++
	}
	return "", false
}

// skip moves past one JSON value, checking its syntax as encoding/json
// does.
func (p *fastScan) skip(depth int) bool {
	if p.i >= len(p.s) || depth > fastMaxDepth {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		return p.str()
	case c == '{':
		p.i++
		p.ws()
		if p.eat('}') {
			return true
		}
		for {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' || !p.str() {
				return false
			}
			p.ws()
			if !p.eat(':') {
				return false
			}
			p.ws()
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			return p.eat('}')
		}
	case c == '[':
		p.i++
		p.ws()
		if p.eat(']') {
			return true
		}
		for {
			p.ws()
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			return p.eat(']')
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if strings.HasPrefix(p.s[p.i:], lit) {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
}

// str moves past a JSON string: no control character, only JSON's
// escapes (any other byte, invalid UTF-8 included, is allowed as
// encoding/json allows it).
func (p *fastScan) str() bool {
	p.i++ // the opening quote
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			p.i++
			if p.i >= len(p.s) {
				return false
			}
			switch p.s[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if p.i+5 > len(p.s) {
					return false
				}
				for _, h := range []byte(p.s[p.i+1 : p.i+5]) {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				p.i += 5
			default:
				return false
			}
		default:
			p.i++
		}
	}
	return false
}

// number moves past a JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastScan) number() bool {
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.i < len(p.s) && p.s[p.i] >= '1' && p.s[p.i] <= '9':
		digits()
	default:
		return false
	}
	if p.eat('.') && digits() == 0 {
		return false
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

package task

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	// go-toml/v2 rather than BurntSushi/toml: it is already a dependency of
	// the module, it rejects duplicate keys, a table defined twice and an
	// inline table extended by a later header (TOML 1.0 §Inline Table), its
	// *toml.DecodeError carries the line and column of every syntax error,
	// it decodes local dates and times into their own types (so a local date
	// never passes through the machine's time zone), and its unstable parser
	// gives the line of every key for errors found after decoding.
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// parseTOMLMapping decodes task.toml into a JSON-friendly map: integers are
// int64, floats float64 (infinities and NaN become the nonFinite "inf",
// "-inf", "nan"),
// local dates "YYYY-MM-DD", local times "HH:MM:SS[.frac]", local date-times
// "YYYY-MM-DDTHH:MM:SS[.frac]" and offset date-times RFC 3339 with the
// offset as written ("Z" for UTC). Duplicate keys, a table defined twice
// and an inline table extended later by a header are errors naming the line.
//
// The returned function builds the key -> line index on first use (a second
// parse, only needed when an error must name a line).
func parseTOMLMapping(src string) (map[string]any, func() positions, error) {
	var raw map[string]any
	if err := toml.Unmarshal([]byte(src), &raw); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, nil, &fileError{line: line, msg: "invalid TOML: " + strings.TrimPrefix(de.Error(), "toml: "), err: err}
		}
		return nil, nil, &fileError{msg: "invalid TOML: " + err.Error(), err: err}
	}
	v := tomlValue(raw)
	m, _ := v.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m, func() positions { return tomlPositions([]byte(src)) }, nil
}

func tomlValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = tomlValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tomlValue(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tomlValue(e)
		}
		return out
	case toml.LocalDate:
		return x.String()
	case toml.LocalTime:
		return x.String()
	case toml.LocalDateTime:
		return x.String()
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case float64:
		switch {
		case math.IsInf(x, 1):
			return nonFinite("inf")
		case math.IsInf(x, -1):
			return nonFinite("-inf")
		case math.IsNaN(x):
			return nonFinite("nan")
		}
		return x
	case int64, string, bool:
		return x
	default:
		return fmt.Sprint(x)
	}
}

// tomlPositions maps each dotted key path to the line it is defined on.
// The document already decoded, so parse errors cannot happen here; if the
// parser stops early the index is simply shorter.
func tomlPositions(data []byte) positions {
	pos := positions{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = table[:0]
			it := e.Key()
			line := 0
			for it.Next() {
				n := it.Node()
				table = append(table, string(n.Data))
				if line == 0 {
					line = p.Shape(n.Raw).Start.Line
				}
			}
			k := strings.Join(table, ".")
			if _, ok := pos[k]; !ok {
				pos[k] = line
			}
		case unstable.KeyValue:
			parts := append([]string(nil), table...)
			it := e.Key()
			for it.Next() {
				parts = append(parts, string(it.Node().Data))
			}
			pos[strings.Join(parts, ".")] = p.Shape(e.Raw).Start.Line
		}
	}
	return pos
}

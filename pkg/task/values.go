package task

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Scalar readers shared by the table readers (tables.go). Each takes the
// parsed value and its dotted key path, and returns an error naming the key
// and its line.

func (r *configReader) mapping(v any, key string) (map[string]any, error) {
	switch m := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return m, nil
	}
	return nil, r.errf(key, "must be a %s, not %s", r.tableWord(), kindOf(v))
}

func (r *configReader) tableWord() string {
	if r.markdown {
		return "mapping"
	}
	return "table"
}

func (r *configReader) str(v any, key string) (string, error) {
	switch s := v.(type) {
	case nil:
		return "", nil
	case string:
		return s, nil
	}
	return "", r.errf(key, "must be a string, not %s", kindOf(v))
}

// scalarString reads a version-like value written as a string or a number
// (YAML reads schema_version: 1.3 as a float).
func (r *configReader) scalarString(v any, key string) (string, error) {
	switch s := v.(type) {
	case nil:
		return "", nil
	case string:
		return s, nil
	case int64:
		return strconv.FormatInt(s, 10), nil
	case uint64:
		return strconv.FormatUint(s, 10), nil
	case float64:
		return strconv.FormatFloat(s, 'f', -1, 64), nil
	case nonFinite:
		return string(s), nil
	}
	return "", r.errf(key, "must be a string, not %s", kindOf(v))
}

// Bounds of numeric keys. A timeout above MaxTimeoutSec (one year, in
// seconds) is refused so every sum of budgets stays far inside
// time.Duration; a size above MaxSizeMB (2^40 MB) would overflow int64
// bytes; MaxGPUs bounds gpus.
const (
	MaxTimeoutSec = 365 * 24 * 3600.0
	MaxSizeMB     = int64(1) << 40
	MaxGPUs       = int64(1) << 16
)

// number reads a finite number written as an integer or a float. want
// describes the accepted values for the error ("a finite number > 0
// (seconds)"); a non-finite value (TOML nan/inf, YAML .nan/.inf) and any
// other type are refused with it.
func (r *configReader) number(v any, key, want string) (float64, error) {
	switch n := v.(type) {
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	case float64:
		return n, nil
	case nonFinite:
		return 0, r.errf(key, "must be %s, not %s", want, string(n))
	}
	return 0, r.errf(key, "must be %s, not %s", want, kindOf(v))
}

// positive reads a finite number > 0.
func (r *configReader) positive(v any, key, want string) (float64, error) {
	f, err := r.number(v, key, want)
	if err != nil {
		return 0, err
	}
	if !(f > 0) {
		return 0, r.errf(key, "must be %s, not %s", want, formatNumber(f))
	}
	return f, nil
}

// timeout reads a budget in seconds: a finite number > 0 and at most
// MaxTimeoutSec. 0 is refused rather than read as "no limit" (Harbor would
// time the phase out at once; neither is what an author means).
func (r *configReader) timeout(v any, key string) (float64, error) {
	f, err := r.positive(v, key, "a finite number > 0 (seconds)")
	if err != nil {
		return 0, err
	}
	if f > MaxTimeoutSec {
		return 0, r.errf(key, "must be at most %d seconds (one year), not %s", int64(MaxTimeoutSec), formatNumber(f))
	}
	return f, nil
}

// integer reads an integer in [lo, hi] (an integral float such as YAML's
// 2048.0 is accepted); unit names what it counts in the error.
func (r *configReader) integer(v any, key string, lo, hi int64, unit string) (int64, error) {
	want := fmt.Sprintf("an integer >= %d (%s)", lo, unit)
	if lo == 1 {
		want = fmt.Sprintf("an integer > 0 (%s)", unit)
	}
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case uint64:
		if x > uint64(hi) {
			return 0, r.errf(key, "must be at most %d %s, not %d", hi, unit, x)
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) {
			return 0, r.errf(key, "must be %s, not %s", want, formatNumber(x))
		}
		if x > float64(hi) {
			return 0, r.errf(key, "must be at most %d %s, not %s", hi, unit, formatNumber(x))
		}
		if x < float64(lo) {
			return 0, r.errf(key, "must be %s, not %s", want, formatNumber(x))
		}
		n = int64(x)
	case nonFinite:
		return 0, r.errf(key, "must be %s, not %s", want, string(x))
	default:
		return 0, r.errf(key, "must be %s, not %s", want, kindOf(v))
	}
	if n < lo {
		return 0, r.errf(key, "must be %s, not %d", want, n)
	}
	if n > hi {
		return 0, r.errf(key, "must be at most %d %s, not %d", hi, unit, n)
	}
	return n, nil
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (r *configReader) boolean(v any, key string) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		if r.markdown {
			if x, ok := parseBoolWord(b); ok {
				return x, nil
			}
		}
	}
	return false, r.errf(key, "must be a boolean, not %s", kindOf(v))
}

func (r *configReader) user(v any, key string) (string, error) {
	switch u := v.(type) {
	case nil:
		return "", nil
	case string:
		return u, nil
	case int64:
		return strconv.FormatInt(u, 10), nil
	case uint64:
		return strconv.FormatUint(u, 10), nil
	}
	return "", r.errf(key, "must be a user name or uid, not %s", kindOf(v))
}

func (r *configReader) strList(v any, key string) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of strings, not %s", kindOf(v))
	}
	out := make([]string, 0, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, r.errf(key, "entry %d must be a string, not %s", i, kindOf(e))
		}
		out = append(out, s)
	}
	return out, nil
}

func (r *configReader) tableList(v any, key string) ([]map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of %ss, not %s", r.tableWord(), kindOf(v))
	}
	out := make([]map[string]any, 0, len(l))
	for i, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, r.errf(key, "entry %d must be a %s, not %s", i, r.tableWord(), kindOf(e))
		}
		out = append(out, m)
	}
	return out, nil
}

// authors reads [task].authors as an inline array or [[task.authors]]:
// each entry a table with name (required) and email, or a bare name string.
func (r *configReader) authors(v any, key string) ([]Author, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of authors, not %s", kindOf(v))
	}
	out := make([]Author, 0, len(l))
	for i, e := range l {
		switch a := e.(type) {
		case string:
			out = append(out, Author{Name: a})
		case map[string]any:
			name, _ := a["name"].(string)
			if name == "" {
				return nil, r.errf(key, "author %d has no name", i)
			}
			email, _ := a["email"].(string)
			out = append(out, Author{Name: name, Email: email})
			for _, k := range sortedKeys(a) {
				if k != "name" && k != "email" {
					r.skip(fmt.Sprintf("%s[%d].%s", key, i, k))
				}
			}
		default:
			return nil, r.errf(key, "author %d must be a %s or a name, not %s", i, r.tableWord(), kindOf(e))
		}
	}
	return out, nil
}

// size reads a deprecated memory/storage size string ("2G", "512M",
// "1024K"; an optional trailing B or iB is accepted) into megabytes, as
// Harbor converts it: G = 1024 MB, K = 1/1024 MB, fractions truncated.
func (r *configReader) size(v any, key string) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, r.errf(key, "must be a size string like \"2G\", not %s", kindOf(v))
	}
	u := strings.ToUpper(strings.TrimSpace(s))
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	if u == "" {
		return 0, r.errf(key, "invalid size %q (expected a number and G, M or K)", s)
	}
	mult := 0.0
	switch u[len(u)-1] {
	case 'G':
		mult = 1024
	case 'M':
		mult = 1
	case 'K':
		mult = 1.0 / 1024
	default:
		return 0, r.errf(key, "invalid size %q (expected a number and G, M or K)", s)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(u[:len(u)-1]), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, r.errf(key, "invalid size %q (expected a finite number and G, M or K)", s)
	}
	mb := f * mult
	if mb > float64(MaxSizeMB) {
		return 0, r.errf(key, "size %q is more than %d MB", s, MaxSizeMB)
	}
	if int64(mb) < 1 {
		return 0, r.errf(key, "size %q must be at least 1 MB (as Harbor converts it, fractions of a MB are dropped)", s)
	}
	return int64(mb), nil
}

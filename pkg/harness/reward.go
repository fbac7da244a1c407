package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Size caps of the files proctor reads out of a sandbox (bytes). A reward
// file or metrics.json over its cap is not read: a verifier error, or
// metrics ignored with the reason.
const (
	// MaxRewardFileBytes caps reward.txt and reward.json: 64 KiB, far above
	// any number or flat map of rewards.
	MaxRewardFileBytes = 64 << 10
	// MaxMetricsBytes caps the agent's metrics.json: 1 MiB.
	MaxMetricsBytes = 1 << 20
)

// Reward is what a verifier's reward files say.
type Reward struct {
	// Value is the primary reward in [0,1]; nil when there is no verdict.
	Value *float64
	// Rewards holds every key of reward.json, or {"reward": v} for a
	// reward.txt.
	Rewards map[string]float64
	// Raw is the text the files held (trimmed, bounded to 200 bytes) when
	// it did not parse as a reward.
	Raw string
	// Err says why there is no verdict ("" when Value is set).
	Err string
}

// NoRewardFile is Reward.Err when the verifier wrote no reward file.
const NoRewardFile = "the verifier wrote neither /logs/verifier/reward.txt nor reward.json"

// ParseReward reads /logs/verifier/reward.txt and reward.json as DESIGN §4
// says, as Harbor does: reward.txt holds one number (Harbor reads it with
// Python's float()); reward.json holds one JSON value (Harbor reads it with
// json.loads), a number or a flat map of name to number whose primary
// reward is its "reward" key, or its only key. Only a finite number in
// [0,1] is a reward; anything else (empty, nan, 1abc, 1.5) is no verdict
// with the raw text kept, never a pass and never a silent 0.
//
// reward.txt must be a plain decimal number, surrounding whitespace
// allowed: an optional sign, digits with an optional fraction (or a
// fraction alone: .5, 5.), an optional exponent (see IsPlainDecimal). That
// is Python float()'s decimal grammar without its underscores (float("0_1")
// is 1.0), non-ASCII digits, inf and nan, and unlike Go's ParseFloat it
// refuses hex floats (0x1p0). reward.json must hold exactly one JSON value:
// anything but whitespace after it ("1 garbage", {"reward":1}{"reward":0})
// is no verdict, as json.loads rejects it with "Extra data". A zero reward
// is stored as 0, never -0.
//
// When both files exist and disagree, there is no verdict and Err names
// both values. A nil slice means the file does not exist.
func ParseReward(txt, js []byte) Reward {
	var out Reward
	var fromTxt, fromJSON *float64
	if txt != nil {
		v, err := parseNumber(string(txt))
		if err != nil {
			return Reward{Raw: bound(string(txt)), Err: "reward.txt: " + err.Error()}
		}
		fromTxt = &v
		out.Rewards = map[string]float64{"reward": v}
	}
	if js != nil {
		v, all, err := parseRewardJSON(js)
		if err != nil {
			return Reward{Raw: bound(string(js)), Err: "reward.json: " + err.Error()}
		}
		fromJSON = &v
		out.Rewards = all
	}
	switch {
	case fromTxt == nil && fromJSON == nil:
		out.Err = NoRewardFile
		return out
	case fromTxt != nil && fromJSON != nil && *fromTxt != *fromJSON:
		return Reward{Err: fmt.Sprintf("reward.txt says %v but reward.json says %v", *fromTxt, *fromJSON),
			Raw: bound(strings.TrimSpace(string(txt)) + " | " + strings.TrimSpace(string(js)))}
	case fromTxt != nil:
		out.Value = fromTxt
	default:
		out.Value = fromJSON
	}
	return out
}

func parseNumber(s string) (float64, error) {
	t := strings.TrimSpace(strings.TrimPrefix(s, "\ufeff"))
	if t == "" {
		return 0, fmt.Errorf("empty")
	}
	if !IsPlainDecimal(t) {
		if v, err := strconv.ParseFloat(t, 64); err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			return checkRange(v, t)
		}
		return 0, fmt.Errorf("%q is not a plain decimal number", bound(t))
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number: %v", bound(t), err)
	}
	return checkRange(v, t)
}

// IsPlainDecimal reports whether s is a plain decimal number: an optional
// sign, then digits with an optional fraction or a fraction alone, then an
// optional exponent; ASCII only, no surrounding space. It is the decimal
// grammar of Python's float() without underscores, so "1", "0.75", "+.5",
// "5.", "1e-3" are plain and "0x1p0", "1_0", "inf", "nan", "1.2.3", "" are
// not.
func IsPlainDecimal(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	n := digits()
	if i < len(s) && s[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// checkRange returns v when it is a finite number in [0,1], with a
// negative zero made 0.
func checkRange(v float64, raw string) (float64, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1 {
		return 0, fmt.Errorf("%s is not a finite number in [0,1]", bound(raw))
	}
	if v == 0 {
		v = 0 // -0 is stored as 0
	}
	return v, nil
}

func parseRewardJSON(b []byte) (float64, map[string]float64, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, nil, fmt.Errorf("not JSON: %v", err)
	}
	// One value only, as json.loads reads it: whitespace may follow, not
	// another value or anything else.
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return 0, nil, fmt.Errorf("not JSON: extra data after the value ending at byte %d", end)
	}
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, nil, err
		}
		f, err = checkRange(f, x.String())
		return f, map[string]float64{"reward": f}, err
	case map[string]any:
		all := map[string]float64{}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			n, ok := x[k].(json.Number)
			if !ok {
				return 0, nil, fmt.Errorf("key %q is not a number (a flat map of name to number is expected)", k)
			}
			f, err := n.Float64()
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return 0, nil, fmt.Errorf("key %q: %s is not a finite number", k, n)
			}
			if f == 0 {
				f = 0 // -0 is stored as 0
			}
			all[k] = f
		}
		var primary float64
		switch {
		case len(x) == 0:
			return 0, nil, fmt.Errorf("empty map")
		case hasKey(x, "reward"):
			primary = all["reward"]
		case len(x) == 1:
			primary = all[keys[0]]
		default:
			return 0, nil, fmt.Errorf("no \"reward\" key among %d keys (%s)", len(keys), strings.Join(keys, ", "))
		}
		primary, err := checkRange(primary, strconv.FormatFloat(primary, 'g', -1, 64))
		return primary, all, err
	default:
		return 0, nil, fmt.Errorf("a number or a flat map of name to number is expected")
	}
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func bound(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "\uFFFD") + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

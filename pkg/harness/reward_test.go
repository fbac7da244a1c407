package harness

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseReward(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		name     string
		txt, js  []byte
		want     *float64
		wantErr  bool
		wantKeys int
	}{
		{"txt one", []byte("1\n"), nil, f(1), false, 1},
		{"txt zero", []byte("0"), nil, f(0), false, 1},
		{"txt partial", []byte(" 0.75 \n"), nil, f(0.75), false, 1},
		{"txt empty", []byte(""), nil, nil, true, 0},
		{"txt nan", []byte("nan"), nil, nil, true, 0},
		{"txt junk", []byte("1abc"), nil, nil, true, 0},
		{"txt over", []byte("1.5"), nil, nil, true, 0},
		{"txt negative", []byte("-0.1"), nil, nil, true, 0},
		{"txt inf", []byte("inf"), nil, nil, true, 0},
		{"json number", nil, []byte("0.5"), f(0.5), false, 1},
		{"json map reward", nil, []byte(`{"reward": 1, "tests_passed": 7}`), f(1), false, 2},
		{"json only key", nil, []byte(`{"accuracy": 0.25}`), f(0.25), false, 1},
		{"json map no reward", nil, []byte(`{"a": 1, "b": 0}`), nil, true, 0},
		{"json nested", nil, []byte(`{"reward": {"x": 1}}`), nil, true, 0},
		{"json string", nil, []byte(`"1"`), nil, true, 0},
		{"json reward out of range", nil, []byte(`{"reward": 2}`), nil, true, 0},
		{"both agree", []byte("1"), []byte(`{"reward": 1.0}`), f(1), false, 1},
		{"both disagree", []byte("1"), []byte(`{"reward": 0}`), nil, true, 0},
		{"neither", nil, nil, nil, true, 0},
		// Only plain decimals (issue: a hex float passed), per Python
		// float()'s decimal grammar without underscores.
		{"txt hex float", []byte("0x1p0"), nil, nil, true, 0},
		{"txt hex int", []byte("0x1"), nil, nil, true, 0},
		{"txt underscore", []byte("0_1"), nil, nil, true, 0},
		{"txt Inf", []byte("Inf"), nil, nil, true, 0},
		{"txt NaN", []byte("NaN"), nil, nil, true, 0},
		{"txt infinity", []byte("-infinity"), nil, nil, true, 0},
		{"txt fullwidth digit", []byte("\uff11"), nil, nil, true, 0},
		{"txt two numbers", []byte("0 1"), nil, nil, true, 0},
		{"txt exponent only", []byte("e1"), nil, nil, true, 0},
		{"txt dangling exponent", []byte("1e"), nil, nil, true, 0},
		{"txt dot", []byte("."), nil, nil, true, 0},
		{"txt plus half", []byte("+.5"), nil, f(0.5), false, 1},
		{"txt trailing dot", []byte("1."), nil, f(1), false, 1},
		{"txt exponent", []byte("1E-0\n"), nil, f(1), false, 1},
		{"txt small exponent", []byte("5e-1"), nil, f(0.5), false, 1},
		{"txt bom", []byte("\ufeff1"), nil, f(1), false, 1},
		// Exactly one JSON value, as json.loads reads it.
		{"json trailing word", nil, []byte("1 garbage"), nil, true, 0},
		{"json two maps", nil, []byte(`{"reward":1}{"reward":0}`), nil, true, 0},
		{"json map then word", nil, []byte(`{"reward": 1} trailing`), nil, true, 0},
		{"json two numbers", nil, []byte("1 0"), nil, true, 0},
		{"json trailing comma", nil, []byte(`{"reward": 1},`), nil, true, 0},
		{"json trailing whitespace", nil, []byte("{\"reward\": 1}\n\t \r\n"), f(1), false, 1},
		{"json NaN", nil, []byte("NaN"), nil, true, 0},
		{"json hex", nil, []byte("0x1"), nil, true, 0},
		{"json plus", nil, []byte("+1"), nil, true, 0},
		{"json huge", nil, []byte("1e400"), nil, true, 0},
		{"json duplicate key, last wins as in json.loads", nil, []byte(`{"reward": 1, "reward": 0}`), f(0), false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ParseReward(c.txt, c.js)
			if c.wantErr {
				if r.Err == "" || r.Value != nil {
					t.Fatalf("want no verdict, got %+v", r)
				}
				return
			}
			if r.Err != "" || r.Value == nil || *r.Value != *c.want {
				t.Fatalf("got %+v, want %v", r, *c.want)
			}
			if len(r.Rewards) != c.wantKeys {
				t.Fatalf("rewards %v, want %d keys", r.Rewards, c.wantKeys)
			}
		})
	}
	for _, c := range []struct {
		name    string
		txt, js []byte
	}{
		{"txt", []byte("-0"), nil},
		{"txt fraction", []byte("-0.0e5"), nil},
		{"json number", nil, []byte("-0")},
		{"json map", nil, []byte(`{"reward": -0.0, "other": -0}`)},
	} {
		r := ParseReward(c.txt, c.js)
		if r.Value == nil || *r.Value != 0 || math.Signbit(*r.Value) {
			t.Fatalf("%s: -0 gave %+v, want 0", c.name, r)
		}
		for k, v := range r.Rewards {
			if math.Signbit(v) {
				t.Fatalf("%s: rewards[%s] is -0", c.name, k)
			}
		}
		if b, _ := json.Marshal(*r.Value); string(b) != "0" {
			t.Fatalf("%s: stored as %s", c.name, b)
		}
	}
	if r := ParseReward([]byte("0x1p0"), nil); !strings.Contains(r.Err, "plain decimal") || r.Raw != "0x1p0" {
		t.Fatalf("hex float: %+v", r)
	}
	if r := ParseReward(nil, []byte("1 garbage")); !strings.Contains(r.Err, "extra data") || r.Raw != "1 garbage" {
		t.Fatalf("trailing data: %+v", r)
	}
	if r := ParseReward([]byte("1"), []byte(`{"reward": 0}`)); r.Raw == "" {
		t.Fatal("disagreement keeps no raw text")
	}
}

func TestParseHarness(t *testing.T) {
	for _, ok := range []string{"oracle"} {
		if _, err := Parse(ok); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "oracle:x", "nope", "agent:", "command"} {
		if _, err := Parse(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// FuzzParseReward checks, for any reward.txt, that a verdict is given
// exactly when the text is a plain decimal in [0,1], with the value
// strconv gives it and never -0; and for any reward.json, that a verdict
// implies exactly one JSON value that encoding/json accepts.
func FuzzParseReward(f *testing.F) {
	for _, s := range []string{"1", "0", "-0", "0.5", "+.5", "1.", "1e0", "0x1p0", "1_0", "Inf", "nan", " 1\n", "1 garbage",
		`{"reward":1}`, `{"reward":1}{"reward":0}`, `{"reward": 1} trailing`, `{"a": 0.25}`, "\ufeff1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := ParseReward([]byte(s), nil)
		t1 := strings.TrimSpace(strings.TrimPrefix(s, "\ufeff"))
		want, err := strconv.ParseFloat(t1, 64)
		ok := IsPlainDecimal(t1) && err == nil && want >= 0 && want <= 1
		if (r.Value != nil) != ok {
			t.Fatalf("reward.txt %q: got %+v, want a verdict: %v", s, r, ok)
		}
		if r.Value != nil && (*r.Value != want || math.Signbit(*r.Value)) {
			t.Fatalf("reward.txt %q: value %v, want %v (never -0)", s, *r.Value, want)
		}
		if r.Value == nil && r.Err == "" {
			t.Fatalf("reward.txt %q: no verdict and no reason", s)
		}
		j := ParseReward(nil, []byte(s))
		if j.Value != nil {
			var v any
			if err := json.Unmarshal([]byte(s), &v); err != nil {
				t.Fatalf("reward.json %q: verdict %v for what encoding/json refuses: %v", s, *j.Value, err)
			}
			if math.Signbit(*j.Value) || *j.Value < 0 || *j.Value > 1 {
				t.Fatalf("reward.json %q: value %v", s, *j.Value)
			}
		}
	})
}

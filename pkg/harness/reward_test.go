package harness

import "testing"

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

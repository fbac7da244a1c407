package harness

import (
	"reflect"
	"strings"
	"testing"
)

func rw(m map[string]float64) StepScore { return StepScore{Ran: true, Rewards: m} }

// TestRollUpSteps checks Harbor's two strategies, including how skipped
// steps and steps without a verdict are counted: a skipped step is left
// out of the mean, final is the last step that ran, and a step that ran
// without a verdict leaves the cell without a reward under either (a mean
// of the other steps passed a cell with a step never verified).
func TestRollUpSteps(t *testing.T) {
	skipped := StepScore{}
	noVerdict := StepScore{Name: "b", Ran: true, NoVerdict: "no reward file"}
	for _, c := range []struct {
		name     string
		strategy string
		steps    []StepScore
		want     float64
		wantMap  map[string]float64
		why      string
	}{
		{"mean of three", "mean", []StepScore{rw(map[string]float64{"reward": 1}), rw(map[string]float64{"reward": 0}), rw(map[string]float64{"reward": 0.5})}, 0.5, map[string]float64{"reward": 0.5}, ""},
		{"default is mean", "", []StepScore{rw(map[string]float64{"reward": 1}), rw(map[string]float64{"reward": 0})}, 0.5, nil, ""},
		{"thirds round", "mean", []StepScore{rw(map[string]float64{"reward": 1}), rw(map[string]float64{"reward": 1}), rw(map[string]float64{"reward": 1})}, 1, nil, ""},
		{"skipped steps are left out", "mean", []StepScore{rw(map[string]float64{"reward": 0.5}), skipped, skipped}, 0.5, nil, ""},
		{"a step without a verdict is no pass", "mean", []StepScore{rw(map[string]float64{"reward": 1}), noVerdict}, -1, nil, "step 2 (b) has no verdict: no reward file"},
		{"a step without a verdict before a skipped one", "mean", []StepScore{rw(map[string]float64{"reward": 1}), noVerdict, skipped}, -1, nil, "step 2 (b) has no verdict"},
		{"a step without a verdict before the final one", "final", []StepScore{noVerdict, rw(map[string]float64{"reward": 1})}, -1, nil, "step 1 (b) has no verdict"},
		{"missing keys count 0", "mean", []StepScore{rw(map[string]float64{"reward": 1, "style": 1}), rw(map[string]float64{"reward": 1})}, 1, map[string]float64{"reward": 1, "style": 0.5}, ""},
		{"final is the last step", "final", []StepScore{rw(map[string]float64{"reward": 1}), rw(map[string]float64{"reward": 0.25})}, 0.25, nil, ""},
		{"final after an early stop is the stopping step", "final", []StepScore{rw(map[string]float64{"reward": 1}), rw(map[string]float64{"reward": 0}), skipped}, 0, nil, ""},
		{"final without a verdict", "final", []StepScore{rw(map[string]float64{"reward": 1}), noVerdict}, -1, nil, "step 2 (b) has no verdict"},
		{"no verdict at all", "mean", []StepScore{noVerdict, skipped}, -1, nil, "has no verdict"},
		{"no step ran", "mean", []StepScore{skipped}, -1, nil, "no step ran"},
		{"no primary key", "mean", []StepScore{rw(map[string]float64{"a": 1, "b": 0})}, -1, nil, "no \"reward\" key"},
		{"only key is primary", "mean", []StepScore{rw(map[string]float64{"score": 1}), rw(map[string]float64{"score": 0})}, 0.5, nil, ""},
	} {
		got, m, why := RollUpSteps(c.strategy, c.steps)
		if c.want < 0 {
			if got != nil || !strings.Contains(why, c.why) {
				t.Errorf("%s: got %v (%q), want no reward because %q", c.name, got, why, c.why)
			}
			continue
		}
		if got == nil || *got != c.want || why != "" {
			t.Errorf("%s: got %v (%q), want %v", c.name, got, why, c.want)
		}
		if c.wantMap != nil && !reflect.DeepEqual(m, c.wantMap) {
			t.Errorf("%s: map %v, want %v", c.name, m, c.wantMap)
		}
	}
}

// TestMissesMinReward checks the early-stop gate: below a threshold or a
// key not written misses it; no gate is never missed.
func TestMissesMinReward(t *testing.T) {
	for _, c := range []struct {
		min, got map[string]float64
		miss     bool
	}{
		{nil, nil, false},
		{nil, map[string]float64{"reward": 0}, false},
		{map[string]float64{"reward": 1}, map[string]float64{"reward": 1}, false},
		{map[string]float64{"reward": 1}, map[string]float64{"reward": 0.99}, true},
		{map[string]float64{"reward": 0.5, "style": 1}, map[string]float64{"reward": 1}, true},
		{map[string]float64{"reward": 0}, nil, true},
	} {
		why, miss := MissesMinReward(c.min, c.got)
		if miss != c.miss || (miss && why == "") {
			t.Errorf("min %v got %v: miss %v (%q), want %v", c.min, c.got, miss, why, c.miss)
		}
	}
}

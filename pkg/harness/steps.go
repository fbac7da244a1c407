package harness

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/proctor-eval/proctor/pkg/task"
)

// StepScore is one step of a multi-step cell as the roll-up sees it.
type StepScore struct {
	// Name is the step's name, for the reasons RollUpSteps gives.
	Name string
	// Ran is false for a step skipped after an earlier one stopped the
	// trial.
	Ran bool
	// Rewards is the step verifier's reward map (reward.json's keys, or
	// {"reward": r}); nil when the step has no verdict (its verifier
	// failed, or it never ran).
	Rewards map[string]float64
	// NoVerdict says why a step that ran has no verdict ("" when
	// unknown).
	NoVerdict string
}

// MissesMinReward reports whether rewards miss the gate min (a step's
// min_reward, key -> threshold) and says which key: a key below its
// threshold, or a key the verifier did not write, misses it. A nil gate
// is never missed; a step without a verdict (nil rewards) misses any gate.
func MissesMinReward(min, rewards map[string]float64) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(min)) {
		got, ok := rewards[k]
		switch {
		case !ok:
			return fmt.Sprintf("min_reward %s = %g: the step's verifier wrote no %q", k, min[k], k), true
		case got < min[k]:
			return fmt.Sprintf("min_reward %s = %g: the step's %s is %g", k, min[k], k, got), true
		}
	}
	return "", false
}

// RollUpSteps makes a multi-step cell's reward map of its steps' as
// Harbor's multi_step_reward_strategy does:
//
//   - mean (the default): per key, the mean over the steps that ran, a
//     key a step did not write counting 0 for that step; steps skipped
//     after an early stop never ran and are left out, as in Harbor;
//   - final: the last step that ran, its reward map as it is.
//
// A step that ran and has no verdict (its verifier wrote no readable
// reward, its setup.sh or healthcheck failed) leaves the cell without a
// reward under either strategy: missing data, never a pass. Harbor's mean
// leaves such a step out of the denominator (documented: "steps without a
// verifier_result excluded"), which scores a cell by its verified steps
// only — a cell whose last step's verifier never ran would pass on the
// steps before it; proctor does not follow it there.
//
// The primary reward is the map's "reward" key, else its only key (as
// ParseReward picks it), and must be a finite number in [0,1]. It returns
// nil and the reason when there is no primary reward (a step that ran has
// no verdict; no step ran; no primary key).
func RollUpSteps(strategy string, steps []StepScore) (*float64, map[string]float64, string) {
	for i, s := range steps {
		if s.Ran && s.Rewards == nil {
			why := fmt.Sprintf("step %d (%s) has no verdict", i+1, s.Name)
			if s.NoVerdict != "" {
				why += ": " + s.NoVerdict
			}
			return nil, nil, why
		}
	}
	var rewards map[string]float64
	switch strategy {
	case task.StepRewardFinal:
		last := -1
		for i, s := range steps {
			if s.Ran {
				last = i
			}
		}
		if last < 0 {
			return nil, nil, "no step ran"
		}
		rewards = maps.Clone(steps[last].Rewards)
	case task.StepRewardMean, "":
		n := 0
		sum := map[string]float64{}
		for _, s := range steps {
			if !s.Ran {
				continue
			}
			n++
			for k, v := range s.Rewards {
				sum[k] += v
			}
		}
		if n == 0 {
			return nil, nil, "no step ran"
		}
		rewards = map[string]float64{}
		for k, v := range sum {
			rewards[k] = round9(v / float64(n))
		}
	default:
		return nil, nil, fmt.Sprintf("unknown multi_step_reward_strategy %q", strategy)
	}
	var primary float64
	if v, ok := rewards["reward"]; ok {
		primary = v
	} else if len(rewards) == 1 {
		for _, v := range rewards {
			primary = v
		}
	} else {
		keys := slices.Sorted(maps.Keys(rewards))
		return nil, rewards, fmt.Sprintf("no \"reward\" key among the rolled-up keys (%s)", strings.Join(keys, ", "))
	}
	if math.IsNaN(primary) || primary < 0 || primary > 1 {
		return nil, rewards, fmt.Sprintf("rolled-up reward %g is not in [0,1]", primary)
	}
	return &primary, rewards, ""
}

// round9 rounds a mean to 9 decimals so 1/3+1/3+1/3 reads 1, not
// 0.9999999999999999, and the same steps give the same bytes.
func round9(x float64) float64 { return math.Round(x*1e9) / 1e9 }

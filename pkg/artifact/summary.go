package artifact

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/proctor-eval/proctor/pkg/stats"
)

// Decimals is the number of decimal places every float of a summary is
// rounded to (pass rates, interval bounds, mean rewards, seconds, USD,
// deltas, gains), so that the same events give the same bytes on every
// machine whatever the order of floating-point operations. The rounding
// is the correctly rounded decimal of strconv.FormatFloat(x, 'f', 6); -0
// becomes 0. The p-values of a comparison (p_exact, p_adjusted) are
// rounded to PValueDigits significant digits instead, so that a small
// p-value keeps its magnitude. Result rows are written as they come.
const Decimals = 6

// PValueDigits is the number of significant digits p-values are rounded to.
const PValueDigits = 6

// PFloor is the smallest p-value stored as itself: 1e-300. A p-value
// below it (McNemar's exact test on 0 vs 1100 discordant pairs gives
// 2^-1099, which no float64 holds) is stored as PFloor with its
// *_underflow flag and its log10 beside it, and printed "< 1e-300".
const PFloor = 1e-300

// Errored reports whether r has no verdict and is therefore missing data,
// never a fail (DESIGN §1, §8): metrics.error, metrics.solver_error, or
// outcome "errored".
// Planned reports whether r is a dry run's cell that would run
// (OutcomePlanned).
func (r Result) Planned() bool { return r.Outcome == OutcomePlanned }

func (r Result) Errored() bool {
	return r.Metrics.Error || r.Metrics.SolverError || r.Outcome == OutcomeErrored
}

// Summarize computes summary.per_harness (DESIGN §8) from rows, keyed by
// harness: n rows; errored rows (see Result.Errored); scored = n −
// errored; passed = rows with Passed that are not errored; pass_rate =
// passed/scored and pass_rate_ci = the Wilson 95 % score interval
// (stats.Wilson with stats.Z95), both null when scored is 0; elapsed_sec =
// the sum of the rows' elapsed seconds; operations = the sum of
// metrics.operation_count (structured operations only), and
// low_fidelity_operations that of metrics.low_fidelity_operation_count;
// cost = CostOf(the harness's rows); per_task
// holds the same counts per task plus mean_reward, the mean reward over
// the task's scored rows where a scored row without a reward (a
// verifier_error) counts as 0, null when none is scored. Floats are
// rounded as Decimals says. The result is independent of the order of
// results; results is not modified.
func Summarize(results []Result) map[string]*HarnessSummary {
	rows := sortedRows(results)
	byHarness := map[string][]Result{}
	for _, r := range rows {
		byHarness[r.Harness] = append(byHarness[r.Harness], r)
	}
	out := make(map[string]*HarnessSummary, len(byHarness))
	for h, hr := range byHarness {
		out[h] = summarizeHarness(hr)
	}
	return out
}

// skillInvocations is the skill invocation rate of a skill arm's rows
// (HarnessSummary.SkillInvocationRate) and its n; nil, nil when no row
// is a skill arm's. Only the scored rows that report n_skill_invocations
// count: a row without it (an agent that does not say) is left out, never
// taken for 0 invocations.
func skillInvocations(rows []Result) (*float64, *int) {
	skill, n, used := false, 0, 0
	for _, r := range rows {
		ar := r.Metrics.AgentReported
		if t, _ := ar["treatment"].(string); t == "" && ar["skill_mode"] != "with-skill" {
			continue
		}
		skill = true
		if r.Errored() {
			continue
		}
		var k float64
		switch v := ar["n_skill_invocations"].(type) {
		case float64:
			k = v
		case int:
			k = float64(v)
		case int64:
			k = float64(v)
		default:
			continue // not reported
		}
		n++
		if k >= 1 {
			used++
		}
	}
	if !skill {
		return nil, nil
	}
	var rt *float64
	if n > 0 {
		v := round(float64(used) / float64(n))
		rt = &v
	}
	return rt, &n
}

func summarizeHarness(rows []Result) *HarnessSummary {
	s := &HarnessSummary{PerTask: map[string]*TaskStat{}}
	rewardSum := map[string]float64{}
	for _, r := range rows {
		t := s.PerTask[r.Task]
		if t == nil {
			t = &TaskStat{}
			s.PerTask[r.Task] = t
		}
		s.N++
		t.N++
		s.ElapsedSec += r.ElapsedSec
		s.Operations += r.Metrics.OperationCount
		s.LowFidelityOperations += r.Metrics.LowFidelityOperationCount
		if r.Suspect() {
			s.Suspect++
		}
		if r.Overclaimed() {
			s.ClaimedButFailed++
		}
		seen := map[string]bool{}
		for _, f := range r.Metrics.VerifierFindings {
			if !seen[f.Kind] {
				seen[f.Kind] = true
				if s.VerifierFindings == nil {
					s.VerifierFindings = map[string]int{}
				}
				s.VerifierFindings[f.Kind]++
			}
		}
		if r.Planned() {
			s.Planned++
			continue
		}
		if r.Errored() {
			s.Errored++
			t.Errored++
			continue
		}
		s.Scored++
		t.Scored++
		if r.Passed {
			s.Passed++
			t.Passed++
		}
		if r.Reward != nil {
			rewardSum[r.Task] += *r.Reward
		}
	}
	s.ElapsedSec = round(s.ElapsedSec)
	s.PassRate = rate(s.Passed, s.Scored)
	s.SkillInvocationRate, s.SkillInvocationN = skillInvocations(rows)
	if lo, hi, ok := stats.Wilson(s.Passed, s.Scored, stats.Z95); ok {
		s.PassRateCI = &[2]float64{round(lo), round(hi)}
	}
	s.Cost = CostOf(rows)
	s.Cost.TotalCostUSD = roundPtr(s.Cost.TotalCostUSD)
	s.Cost.CostPerPassUSD = roundPtr(s.Cost.CostPerPassUSD)
	for task, t := range s.PerTask {
		t.PassRate = rate(t.Passed, t.Scored)
		if t.Scored > 0 {
			m := round(rewardSum[task] / float64(t.Scored))
			t.MeanReward = &m
		}
	}
	return s
}

// rate is num/den rounded, or nil when den is 0.
func rate(num, den int) *float64 {
	if den == 0 {
		return nil
	}
	v := round(float64(num) / float64(den))
	return &v
}

// sortedRows returns a copy of results in the artifact's row order: task,
// harness, model, repeat, then attempt and cell_id so the order is total.
func sortedRows(results []Result) []Result {
	rows := slices.Clone(results)
	slices.SortStableFunc(rows, func(a, b Result) int {
		return cmp.Or(
			cmp.Compare(a.Task, b.Task),
			cmp.Compare(a.Harness, b.Harness),
			cmp.Compare(a.Model, b.Model),
			cmp.Compare(a.Repeat, b.Repeat),
			cmp.Compare(a.Attempt, b.Attempt),
			cmp.Compare(a.CellID, b.CellID),
		)
	})
	return rows
}

// round rounds x to Decimals places (see Decimals). NaN and ±Inf are
// returned unchanged (encoding them fails later, loudly).
func round(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', Decimals, 64), 64)
	if err != nil || v == 0 {
		return 0
	}
	return v
}

// roundSig rounds x to PValueDigits significant digits.
func roundSig(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', PValueDigits, 64), 64)
	if err != nil || v == 0 {
		return 0
	}
	return v
}

func roundPtr(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := round(*p)
	return &v
}

func roundSigPtr(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := roundSig(*p)
	return &v
}

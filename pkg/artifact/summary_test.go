package artifact

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func f64(x float64) *float64 { return &x }
func intp(i int) *int        { return &i }

func scoredRow(task string, repeat int, reward float64) Result {
	return Result{
		CellID: task + "/h/m/" + string(rune('0'+repeat)), Task: task, Harness: "h", Model: "m",
		Repeat: repeat, Attempt: 1, Outcome: map[bool]string{true: OutcomePassed, false: OutcomeFailed}[reward >= 1],
		Passed: reward >= 1, Reward: f64(reward), ReturnCode: intp(0), ElapsedSec: 1,
	}
}

func erroredRow(task string, repeat int, class string) Result {
	r := Result{
		CellID: task + "/h/m/" + string(rune('0'+repeat)), Task: task, Harness: "h", Model: "m",
		Repeat: repeat, Attempt: 1, Outcome: OutcomeErrored, ErrorClass: class, ElapsedSec: 1,
	}
	r.Metrics.Error = true
	return r
}

// An errored cell is missing data: it neither lowers the pass rate nor
// counts as a fail, whichever flag marks it.
func TestErroredNeverCountsAsFail(t *testing.T) {
	solverErr := scoredRow("c", 0, 0)
	solverErr.Metrics.SolverError = true // made no attempt: errored though the outcome says failed
	passedButErrored := scoredRow("d", 0, 1)
	passedButErrored.Metrics.Error = true // a stray Passed flag must not count either
	rows := []Result{
		scoredRow("a", 0, 1),
		erroredRow("b", 0, ErrorRefused),
		solverErr,
		passedButErrored,
	}
	s := Summarize(rows)["h"]
	if s.N != 4 || s.Errored != 3 || s.Scored != 1 || s.Passed != 1 {
		t.Fatalf("n/errored/scored/passed = %d/%d/%d/%d, want 4/3/1/1", s.N, s.Errored, s.Scored, s.Passed)
	}
	if s.PassRate == nil || *s.PassRate != 1 {
		t.Fatalf("pass_rate = %v, want 1 (errored cells are not fails)", s.PassRate)
	}
	for _, task := range []string{"b", "c", "d"} {
		ts := s.PerTask[task]
		if ts.Errored != 1 || ts.Scored != 0 || ts.PassRate != nil || ts.MeanReward != nil {
			t.Errorf("per_task[%s] = %+v, want errored 1, scored 0, null rate and reward", task, *ts)
		}
	}
}

func TestPassRateNullWhenNothingScored(t *testing.T) {
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Models: []string{"m"}, Repeats: 1,
		StartedAt: "2026-01-01T00:00:00Z"},
		[]Result{erroredRow("a", 0, ErrorBuild), erroredRow("b", 0, ErrorSandbox)}, testBuild)
	s := a.Summary.PerHarness["h"]
	if s.PassRate != nil || s.PassRateCI != nil || s.Scored != 0 || s.Errored != 2 {
		t.Fatalf("summary = %+v, want scored 0 with null pass_rate and CI", *s)
	}
	data, err := Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"pass_rate": null`, `"pass_rate_ci": null`, `"mean_reward": null`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("artifact lacks %s", want)
		}
	}
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "0/0 passed (no scored cells), 2 errored") {
		t.Errorf("report headline does not say nothing was scored:\n%s", md.String())
	}
}

func TestSummarizeCounts(t *testing.T) {
	vErr := scoredRow("b", 1, 0)
	vErr.Outcome, vErr.Reward = OutcomeVerifierError, nil
	rows := []Result{
		scoredRow("a", 0, 1), scoredRow("a", 1, 0.5), scoredRow("a", 2, 1),
		scoredRow("b", 0, 0.25), vErr, erroredRow("b", 2, ErrorInfra),
	}
	rows[0].Metrics.OperationCount = 3
	rows[3].Metrics.OperationCount = 4
	rows[1].ElapsedSec = 0.1
	rows[2].ElapsedSec = 0.2
	s := Summarize(rows)["h"]
	if s.N != 6 || s.Errored != 1 || s.Scored != 5 || s.Passed != 2 || s.Operations != 7 {
		t.Fatalf("got %+v", *s)
	}
	if *s.PassRate != 0.4 {
		t.Errorf("pass_rate = %v, want 0.4", *s.PassRate)
	}
	// 1+0.1+0.2+1+1+1 = 4.3, which float addition gives as 4.300000000000001.
	if s.ElapsedSec != 4.3 {
		t.Errorf("elapsed_sec = %v, want 4.3 after rounding", s.ElapsedSec)
	}
	// Wilson 95 % for 2/5 by the score formula (statsmodels method="wilson" agrees).
	if s.PassRateCI == nil || s.PassRateCI[0] != 0.117621 || s.PassRateCI[1] != 0.769276 {
		t.Errorf("pass_rate_ci = %v, want [0.117621 0.769276]", s.PassRateCI)
	}
	a := s.PerTask["a"]
	if a.Passed != 2 || a.Scored != 3 || *a.PassRate != 0.666667 || *a.MeanReward != 0.833333 {
		t.Errorf("per_task[a] = %+v", *a)
	}
	// b: rewards 0.25 and a verifier error without a reward (counted 0) over 2 scored.
	b := s.PerTask["b"]
	if b.Scored != 2 || b.Errored != 1 || *b.PassRate != 0 || *b.MeanReward != 0.125 {
		t.Errorf("per_task[b] = %+v, mean_reward %v", *b, *b.MeanReward)
	}
}

func TestRound(t *testing.T) {
	cases := []struct{ in, want float64 }{
		{0.1 + 0.2, 0.3},
		{6.0 / 7.0, 0.857143},
		{-1e-9, 0},
		{math.Copysign(0, -1), 0},
		{1234.5678901, 1234.56789},
	}
	for _, c := range cases {
		got := round(c.in)
		if got != c.want || math.Signbit(got) != math.Signbit(c.want) {
			t.Errorf("round(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := roundSig(1.234567891e-9); got != 1.23457e-9 {
		t.Errorf("roundSig = %v, want 1.23457e-9", got)
	}
	if got := roundSig(0.0312500001); got != 0.03125 {
		t.Errorf("roundSig = %v, want 0.03125", got)
	}
}

func TestHeadline(t *testing.T) {
	rows := []Result{erroredRow("z", 0, ErrorUnresolvedEnv)}
	for i, r := range []float64{1, 1, 1, 1, 1, 1, 0} {
		rows = append(rows, scoredRow(string(rune('a'+i)), 0, r))
	}
	got := Headline("oracle", Summarize(rows)["h"])
	want := "oracle: 6/7 passed (85.7 %, 95 % CI 48.7–97.4 %), 1 errored"
	if got != want {
		t.Errorf("Headline = %q, want %q", got, want)
	}
}

// Build sorts a copy; the caller's slice keeps its order.
func TestBuildDoesNotModifyInput(t *testing.T) {
	rows := []Result{scoredRow("b", 0, 1), scoredRow("a", 1, 0), scoredRow("a", 0, 1)}
	a := Build(RunInfo{}, rows, testBuild)
	if rows[0].Task != "b" || rows[1].Repeat != 1 {
		t.Fatalf("Build reordered its input: %+v", rows)
	}
	var order []string
	for _, r := range a.Results {
		order = append(order, r.CellID)
	}
	if strings.Join(order, " ") != "a/h/m/0 a/h/m/1 b/h/m/0" {
		t.Errorf("row order = %v", order)
	}
}

// TestSkillInvocationRate: a skill arm's rate counts the scored rows whose
// agent invoked the skill among the rows that report n_skill_invocations
// (an errored row, and a row that does not report it, are left out of it
// and of n, never counted as 0 invocations); a control arm gets neither
// field, so its JSON has neither key.
func TestSkillInvocationRate(t *testing.T) {
	skillRow := func(task string, n float64, passed bool) Result {
		r := scoredRow(task, 0, map[bool]float64{true: 1}[passed])
		r.Harness = "docker-claude-skill:s"
		r.Metrics.AgentReported = map[string]any{"treatment": "s", "n_skill_invocations": n}
		return r
	}
	errored := erroredRow("d", 0, "solver_error")
	errored.Harness = "docker-claude-skill:s"
	errored.Metrics.AgentReported = map[string]any{"treatment": "s", "n_skill_invocations": 1.0}
	control := scoredRow("a", 0, 1)
	control.Harness = "docker-claude"
	control.Metrics.AgentReported = map[string]any{"terminal_reason": "completed"}
	unreported := skillRow("e", 0, true)
	delete(unreported.Metrics.AgentReported, "n_skill_invocations")
	sum := Summarize([]Result{skillRow("a", 2, true), skillRow("b", 0, false), skillRow("c", 1, false), errored, control, unreported})
	s := sum["docker-claude-skill:s"]
	if s.SkillInvocationN == nil || *s.SkillInvocationN != 3 || s.SkillInvocationRate == nil || *s.SkillInvocationRate != 0.666667 {
		t.Fatalf("skill arm: rate %v n %v; want 0.666667 of 3", deref(s.SkillInvocationRate), deref(s.SkillInvocationN))
	}
	if c := sum["docker-claude"]; c.SkillInvocationN != nil || c.SkillInvocationRate != nil {
		t.Errorf("control arm has a skill invocation rate")
	}
	if none := Summarize([]Result{unreported})["docker-claude-skill:s"]; none.SkillInvocationN == nil || *none.SkillInvocationN != 0 || none.SkillInvocationRate != nil {
		t.Errorf("no row reports invocations: rate %v n %v; want null of 0", deref(none.SkillInvocationRate), deref(none.SkillInvocationN))
	}
	only := Summarize([]Result{errored})["docker-claude-skill:s"]
	if only.SkillInvocationN == nil || *only.SkillInvocationN != 0 || only.SkillInvocationRate != nil {
		t.Errorf("nothing scored: rate %v n %v; want null of 0", deref(only.SkillInvocationRate), deref(only.SkillInvocationN))
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

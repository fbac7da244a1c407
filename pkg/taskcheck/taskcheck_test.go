package taskcheck

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

func f64(x float64) *float64 { return &x }

// row is a result of harness h for task "t".
func row(h string, repeat int, outcome string, reward float64, verifySec float64) artifact.Result {
	r := artifact.Result{CellID: "t/" + h, Task: "t", Harness: h, Repeat: repeat, Outcome: outcome}
	if outcome != artifact.OutcomeErrored {
		r.Reward = f64(reward)
		r.Passed = reward >= 1
		r.Metrics.VerifySec = f64(verifySec)
	} else {
		r.ErrorClass, r.Error = artifact.ErrorRefused, "refused: workdir /root"
	}
	return r
}

// noVerdict is a verifier_error row: the verifier ran and gave no reward
// (DESIGN: metrics.error, no reward).
func noVerdict(h string) artifact.Result {
	r := artifact.Result{CellID: "t/" + h, Task: "t", Harness: h, Repeat: 1, Outcome: artifact.OutcomeVerifierError,
		Error: "reward.txt: nan is not a reward"}
	r.Metrics.Error = true
	r.Metrics.VerifySec = f64(1)
	return r
}

func testPlan() Plan {
	return Plan{Oracle: true, Noop: true, Cheats: []Cheat{{Name: "reward-files", Hack: "writes rewards"}}, IsolationNotRun: "not run: no probe"}
}

// clean is the rows of a sound task: oracle passes fast, no-op and the
// cheat fail.
func clean() []artifact.Result {
	return []artifact.Result{
		row("oracle", 1, artifact.OutcomePassed, 1, 1),
		row(NoopHarness, 1, artifact.OutcomeFailed, 0, 1),
		row("agent:cheat-reward-files", 1, artifact.OutcomeFailed, 0, 1),
	}
}

func evaluate(t *testing.T, rows []artifact.Result) TaskResult {
	t.Helper()
	tk := &task.Task{Name: "t", VerifierTimeoutSec: 10}
	rep := Evaluate(testPlan(), []*task.Task{tk}, map[string][]Finding{"t": {{CheckStatic, Pass, "ok"}}}, rows)
	if len(rep.Tasks) != 1 {
		t.Fatalf("%d results", len(rep.Tasks))
	}
	return rep.Tasks[0]
}

func finding(tr TaskResult, check string) Finding {
	for _, f := range tr.Findings {
		if f.Check == check && f.Verdict != Pass {
			return f
		}
	}
	for _, f := range tr.Findings {
		if f.Check == check {
			return f
		}
	}
	return Finding{}
}

// TestEvaluate decides every path to a verdict from rows: each case
// changes the clean rows one way and names the check that must decide.
func TestEvaluate(t *testing.T) {
	set := func(i int, r artifact.Result) []artifact.Result { rs := clean(); rs[i] = r; return rs }
	cases := []struct {
		name      string
		rows      []artifact.Result
		verdict   Verdict
		decidedBy string
		detail    string
	}{
		{"clean", clean(), Pass, "", ""},
		{"oracle fails", set(0, row("oracle", 1, artifact.OutcomeFailed, 0, 1)), Fail, CheckOracle, "does not pass"},
		{"oracle flaky", append(clean(), row("oracle", 2, artifact.OutcomeFailed, 0, 1)), Warn, CheckOracle, "flaky: the reference solution passes 1 of 2"},
		{"verifier over budget", set(0, row("oracle", 1, artifact.OutcomePassed, 1, 10.5)), Fail, CheckOracle, "verifier over budget: 10.5s"},
		{"verifier timed out", set(0, row("oracle", 1, artifact.OutcomeVerifierTimeout, 0, 10)), Fail, CheckOracle, "verifier over budget: timed out"},
		{"verifier within 20 %", set(0, row("oracle", 1, artifact.OutcomePassed, 1, 8.5)), Warn, CheckOracle, "within 20 %"},
		{"verifier at 79 %", set(0, row("oracle", 1, artifact.OutcomePassed, 1, 7.9)), Pass, "", ""},
		{"oracle cannot run", set(0, row("oracle", 1, artifact.OutcomeErrored, 0, 0)), Warn, CheckOracle, "cannot run: errored (refused)"},
		{"no oracle row", clean()[1:], Fail, CheckOracle, "no oracle row"},
		{"no-op passes", set(1, row(NoopHarness, 1, artifact.OutcomePassed, 1, 1)), Fail, CheckNoop, "no-op passes"},
		{"no-op partial", set(1, row(NoopHarness, 1, artifact.OutcomePartial, 0.5, 1)), Warn, CheckNoop, "reward 0.5"},
		{"no-op refused is skipped", set(1, row(NoopHarness, 1, artifact.OutcomeErrored, 0, 0)), Pass, "", ""},
		{"no-op without a verdict while the oracle is scored fails", set(1, noVerdict(NoopHarness)), Fail, CheckNoop, "the verifier gives no reward to an agent that does nothing"},
		{"no-op and oracle without a verdict: the oracle decides", func() []artifact.Result {
			rs := set(1, noVerdict(NoopHarness))
			rs[0] = noVerdict("oracle")
			return rs
		}(), Fail, CheckOracle, "does not pass: verifier_error"},
		{"cheat without a verdict is skipped", set(2, noVerdict("agent:cheat-reward-files")), Pass, "", ""},
		{"oracle without a verdict fails", set(0, noVerdict("oracle")), Fail, CheckOracle, "does not pass: verifier_error"},
		{"cheat passes", set(2, row("agent:cheat-reward-files", 1, artifact.OutcomePassed, 1, 1)), Fail, "cheat:reward-files", "reward-files passes: writes rewards"},
		{"cheat passes on one repeat", append(clean(), row("agent:cheat-reward-files", 2, artifact.OutcomePassed, 1, 1)), Fail, "cheat:reward-files", "passes"},
		{"cheat raises a partial reward", set(2, row("agent:cheat-reward-files", 1, artifact.OutcomePartial, 0.5, 1)), Warn, "cheat:reward-files", "raises the reward to 0.5"},
		{"no cheat row", clean()[:2], Fail, "cheat:reward-files", "no agent:cheat-reward-files row"},
		{"oracle ran no tests", set(0, withFindings(row("oracle", 1, artifact.OutcomePassed, 1, 1), "no_tests_executed")), Fail, CheckOracle, "the oracle's verifier executed no tests: unittest: Ran 0 tests"},
		{"oracle reward/exit conflict", set(0, withFindings(row("oracle", 1, artifact.OutcomePassed, 1, 1), "reward_exit_conflict")), Warn, CheckOracle, "reward and its test script's exit disagree"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := evaluate(t, c.rows)
			if tr.Verdict != c.verdict || tr.DecidedBy != c.decidedBy {
				t.Fatalf("verdict %s by %q, want %s by %q: %+v", tr.Verdict, tr.DecidedBy, c.verdict, c.decidedBy, tr.Findings)
			}
			if c.detail != "" {
				if f := finding(tr, c.decidedBy); !strings.Contains(f.Detail, c.detail) {
					t.Errorf("%s detail %q lacks %q", c.decidedBy, f.Detail, c.detail)
				}
			}
			if f := finding(tr, CheckIsolation); f.Verdict != Skip || f.Detail != "not run: no probe" {
				t.Errorf("isolation %+v, want SKIP not run", f)
			}
		})
	}
}

// TestEvaluateNoopMasksCheats: where doing nothing passes, a passing
// cheat is inconclusive (SKIP); the no-op's FAIL decides.
func TestEvaluateNoopMasksCheats(t *testing.T) {
	rs := clean()
	rs[1] = row(NoopHarness, 1, artifact.OutcomePassed, 1, 1)
	rs[2] = row("agent:cheat-reward-files", 1, artifact.OutcomePassed, 1, 1)
	tr := evaluate(t, rs)
	if tr.Verdict != Fail || tr.DecidedBy != CheckNoop {
		t.Fatalf("%s by %s", tr.Verdict, tr.DecidedBy)
	}
	if f := finding(tr, "cheat:reward-files"); f.Verdict != Skip || !strings.Contains(f.Detail, "inconclusive") {
		t.Errorf("cheat finding %+v", f)
	}
}

// TestEvaluateCheatLeaks: a cheat that found grader files but did not pass
// is a WARN naming what it found.
func TestEvaluateCheatLeaks(t *testing.T) {
	rs := clean()
	rs[2].StdoutTail = "cheat: trying\nCHEAT-FINDING: tests/expected.txt is readable at /srv/expected.txt\n"
	tr := evaluate(t, rs)
	if tr.Verdict != Warn || !strings.Contains(finding(tr, "cheat:reward-files").Detail, "tests/expected.txt is readable at /srv/expected.txt") {
		t.Fatalf("%+v", tr)
	}
}

// TestIsolationProbe: with a probe in the plan its row decides; a failing
// probe names the classes it found open or left untested, and only those.
func TestIsolationProbe(t *testing.T) {
	p := testPlan()
	p.Isolation = ProbeHarness
	tk := &task.Task{Name: "t", VerifierTimeoutSec: 10}
	open := row(ProbeHarness, 1, artifact.OutcomeFailed, 0, 0)
	open.Metrics.IsolationProbe = map[string]string{}
	for _, c := range isoprobe.Classes {
		open.Metrics.IsolationProbe[c] = isoprobe.Closed
	}
	open.Metrics.IsolationProbe[isoprobe.DockerAPI] = isoprobe.NA
	open.Metrics.IsolationProbe[isoprobe.TaskFiles] = isoprobe.Open
	open.Metrics.IsolationProbe[isoprobe.Network] = isoprobe.Untested
	rep := Evaluate(p, []*task.Task{tk}, nil, append(clean(), open))
	if f := finding(rep.Tasks[0], CheckIsolation); f.Verdict != Fail || rep.Tasks[0].DecidedBy != CheckIsolation ||
		!strings.Contains(f.Detail, "open: task_files=open, network=untested (t/docker-probe)") || strings.Contains(f.Detail, "docker_api") {
		t.Fatalf("%+v", f)
	}
	rep = Evaluate(p, []*task.Task{tk}, nil, append(clean(), row(ProbeHarness, 1, artifact.OutcomePassed, 1, 0)))
	if rep.Tasks[0].Verdict != Pass {
		t.Fatalf("%+v", rep.Tasks[0])
	}
	rep = Evaluate(p, []*task.Task{tk}, nil, clean())
	if f := finding(rep.Tasks[0], CheckIsolation); f.Verdict != Fail {
		t.Fatalf("a probe planned without a row: %+v", f)
	}
}

// TestNewPlanIsolation: this build has the docker-probe harness, so the
// isolation check runs it after the oracle, the no-op agent and every
// cheat.
func TestNewPlanIsolation(t *testing.T) {
	p := NewPlan()
	if p.Isolation != ProbeHarness || p.IsolationNotRun != "" {
		t.Fatalf("%+v", p)
	}
	hs := p.Harnesses()
	if hs[0] != "oracle" || hs[1] != NoopHarness || len(hs) != 3+len(p.Cheats) || hs[len(hs)-1] != ProbeHarness {
		t.Fatalf("harnesses %v", hs)
	}
}

// TestPlanSelect: --checks keeps the named checks; the others are SKIP
// "not selected" findings that never decide; an unknown name is an error.
func TestPlanSelect(t *testing.T) {
	p, err := NewPlan().Select([]string{"oracle", "cheat:reward-files"})
	if err != nil {
		t.Fatal(err)
	}
	if hs := strings.Join(p.Harnesses(), ","); hs != "oracle,agent:cheat-reward-files" {
		t.Fatalf("harnesses %s", hs)
	}
	tk := &task.Task{Name: "t", VerifierTimeoutSec: 10}
	rep := Evaluate(p, []*task.Task{tk}, nil, []artifact.Result{row("oracle", 1, artifact.OutcomePassed, 1, 1),
		row("agent:cheat-reward-files", 1, artifact.OutcomePassed, 1, 1)})
	tr := rep.Tasks[0]
	if tr.Verdict != Fail || tr.DecidedBy != "cheat:reward-files" {
		t.Fatalf("%+v", tr)
	}
	for _, c := range []string{CheckNoop, "cheat:plant-hooks", CheckIsolation} {
		if f := finding(tr, c); f.Verdict != Skip || f.Detail != notSelected {
			t.Errorf("%s: %+v", c, f)
		}
	}
	if p, _ := NewPlan().Select([]string{"cheats"}); len(p.Cheats) != len(Cheats()) || p.Oracle || p.Isolation != "" {
		t.Errorf("cheats: %+v", p)
	}
	if p, _ := NewPlan().Select(nil); !p.Oracle || !p.Noop || p.Isolation != ProbeHarness {
		t.Errorf("no --checks: %+v", p)
	}
	if _, err := NewPlan().Select([]string{"oracle", "bogus"}); err == nil || !strings.Contains(err.Error(), `unknown check "bogus"`) {
		t.Errorf("unknown check: %v", err)
	}
}

// TestCheatsRegistry: every cheat the issue names is registered, each
// with its one-line description, a bash script that announces itself.
func TestCheatsRegistry(t *testing.T) {
	var names []string
	for _, c := range Cheats() {
		names = append(names, c.Name)
		if c.Hack == "" || !bytes.HasPrefix(c.Script, []byte("#!/bin/bash\n")) || !bytes.Contains(c.Script, []byte(`echo "cheat `+c.Name+`: trying"`)) {
			t.Errorf("cheat %s: hack %q, script starts %q", c.Name, c.Hack, c.Script[:min(40, len(c.Script))])
		}
	}
	if got := strings.Join(names, ","); got != "plant-hooks,read-graders,reward-daemon,reward-files,shadow-module,source-literals,stub-invoked" {
		t.Fatalf("cheats %s", got)
	}
}

func writeTask(t *testing.T, files map[string]string) *task.Task {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "t")
	for rel, c := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func harbor(extra map[string]string) map[string]string {
	files := map[string]string{
		"task.toml":              "version = \"1.0\"\n[verifier]\ntimeout_sec = 30\n[agent]\ntimeout_sec = 60\n",
		"instruction.md":         "Write 42.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "#!/bin/bash\necho 42 > /app/answer.txt\n",
		"tests/test.sh":          "#!/bin/bash\ngrep -qx 42 /app/answer.txt && echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range extra {
		if v == "" {
			delete(files, k)
		} else {
			files[k] = v
		}
	}
	return files
}

// TestStatic: each defect of the task's files is a finding naming the
// file and line; a clean task (an answer only under tests/ included) is
// one PASS.
func TestStatic(t *testing.T) {
	cases := []struct {
		name   string
		files  map[string]string
		want   Verdict
		detail string
	}{
		{"clean", harbor(nil), Pass, ""},
		{"answer only under tests", harbor(map[string]string{"tests/expected.txt": "the expected answer\n"}), Pass, ""},
		{"a work-tree file named like a tests file", harbor(map[string]string{"tests/input.txt": "1 2 3\n", "solution/solve.sh": "wc -w /app/input.txt > /app/answer.txt\n"}), Pass, ""},
		{"missing test.sh", harbor(map[string]string{"tests/test.sh": ""}), Fail, "required file missing: tests/test.sh"},
		{"verifier timeout unset", harbor(map[string]string{"task.toml": "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n"}), Warn, "verifier.timeout_sec is not set"},
		{"benchflow agent timeout unset", map[string]string{
			"task.md":                "---\nverifier:\n  timeout_sec: 30\n---\nWrite 42.\n",
			"environment/Dockerfile": "FROM debian:bookworm-slim\n", "oracle/solve.sh": "echo 42\n", "verifier/test.sh": "true\n"}, Warn, "agent.timeout_sec is not set"},
		{"Dockerfile copies tests", harbor(map[string]string{"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY --chown=1:1 ./tests/ /srv/tests/\n"}), Fail, "environment/Dockerfile line 3 copies ./tests/"},
		{"Dockerfile adds the solution", harbor(map[string]string{"environment/Dockerfile": "FROM debian:bookworm-slim\nADD solution /opt/s\n"}), Fail, "line 2 copies solution"},
		{"COPY from a stage is not the context", harbor(map[string]string{"environment/Dockerfile": "FROM debian:bookworm-slim AS b\nFROM debian:bookworm-slim\nCOPY --from=b tests /x\n"}), Pass, ""},
		{"environment holds the solution", harbor(map[string]string{"environment/ref.sh": "#!/bin/bash\necho 42 > /app/answer.txt\n"}), Fail, "environment/ref.sh is a copy of solution/solve.sh"},
		{"solve reads /tests", harbor(map[string]string{"solution/solve.sh": "cp /tests/x.txt /app/answer.txt\n"}), Fail, "solution/solve.sh reads /tests/x.txt"},
		{"solve reads a tests-only file", harbor(map[string]string{"tests/expected.txt": "42 and more\n", "solution/solve.sh": "cp ../tests/expected.txt /app/answer.txt\n"}), Fail, "reads tests/expected.txt"},
		// What a run cannot show (VerifierStatic).
		{"the truth in the image", harbor(map[string]string{"tests/expected.txt": "42\n", "environment/data/expected.txt": "42\n"}), Fail, "tests/expected.txt, the expected answer, is also environment/data/expected.txt"},
		{"an input the tests re-read is not the truth", harbor(map[string]string{"tests/words.txt": "a b c\n", "environment/words.txt": "a b c\n"}), Pass, ""},
		{"pyc of the solution", harbor(map[string]string{"solution/gen.py": "print(42)\n", "environment/__pycache__/gen.cpython-311.pyc": "\x00compiled"}), Fail, "environment/__pycache__/gen.cpython-311.pyc is compiled from solution/gen.py"},
		{"pyc left over", harbor(map[string]string{"environment/util.pyc": "\x00compiled"}), Warn, "compiled Python left in the build context"},
		{"verifier helper in the image", harbor(map[string]string{"environment/grade.py": "print(1)\n",
			"tests/test.sh": "#!/bin/bash\nif python3 /usr/local/lib/grade.py; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"}), Warn, "the tests run /usr/local/lib/grade.py, a verifier helper the environment bakes"},
		{"the program the instruction asks to fix", harbor(map[string]string{"instruction.md": "`/app/sum.sh` prints the wrong sum. Fix the script.\n",
			"environment/sum.sh": "tail -n +2 /app/numbers.txt | paste -sd+ | bc\n",
			"tests/test.sh":      "#!/bin/bash\n[ \"$(bash /app/sum.sh)\" = 189 ] && echo 1 > /logs/verifier/reward.txt\n"}), Pass, ""},
		{"the program named at the end of a sentence", harbor(map[string]string{"instruction.md": "Fix /app/sum.sh.\n",
			"environment/sum.sh": "echo 0\n", "tests/test.sh": "#!/bin/bash\nbash /app/sum.sh\n"}), Pass, ""},
		{"an instruction naming a longer path does not name the helper", harbor(map[string]string{"instruction.md": "Compare with /app/grade.sh.orig and write 42.\n",
			"environment/grade.sh": "echo PASS\n", "tests/test.sh": "#!/bin/bash\nbash /app/grade.sh && echo 1 > /logs/verifier/reward.txt\n"}), Warn, "the tests run /app/grade.sh, a verifier helper"},
		{"a helper named in a comment only", harbor(map[string]string{"environment/grade.sh": "echo PASS\n",
			"tests/test.sh": "#!/bin/bash\n# never runs /app/grade.sh\ngrep -qx 42 /app/answer.txt && echo 1 > /logs/verifier/reward.txt\n"}), Pass, ""},
		{"grader reads a file the agent can write", harbor(map[string]string{"environment/expected.json": "{\"a\": 1}\n",
			"tests/test.sh": "#!/bin/bash\ncmp -s /app/out.json /app/expected.json && echo 1 > /logs/verifier/reward.txt\n"}), Warn, "the tests read /app/expected.json, which the image ships (environment/expected.json) where the agent can write"},
		{"grader writes its own input before reading it", harbor(map[string]string{"environment/nums.txt": "3\n17\n",
			"tests/test.sh": "#!/bin/bash\nprintf '5\\n41\\n' > /app/nums.txt\n[ \"$(bash /app/max.sh)\" = 41 ] && echo 1 > /logs/verifier/reward.txt\n"}), Pass, ""},
		{"grader appends to a file the agent can write", harbor(map[string]string{"environment/nums.txt": "3\n17\n",
			"tests/test.sh": "#!/bin/bash\necho 5 >> /app/nums.txt\n[ \"$(bash /app/max.sh)\" = 17 ] && echo 1 > /logs/verifier/reward.txt\n"}), Warn, "the tests read /app/nums.txt, which the image ships"},
		{"grader reads a file before it overwrites it", harbor(map[string]string{"environment/expected.json": "{\"a\": 1}\n",
			"tests/test.sh": "#!/bin/bash\ncmp -s /app/out.json /app/expected.json && echo 1 > /logs/verifier/reward.txt\necho '{}' > /app/expected.json\n"}), Warn, "the tests read /app/expected.json, which the image ships"},
		{"pytest in the work tree", harbor(map[string]string{"tests/test.sh": "#!/bin/bash\ncp /tests/test_x.py /app/\ncd /app && pytest -q test_x.py > /tmp/log 2>&1\n"}), Warn, "the tests run pytest on /app/test_x.py, in the agent's work tree"},
		{"pytest without a path from the work tree", harbor(map[string]string{"tests/test.sh": "#!/bin/bash\npytest -rA\n"}), Warn, "the tests run pytest on /app,"},
		{"pytest on /tests", harbor(map[string]string{"tests/test.sh": "#!/bin/bash\ncd /app\npytest /tests/test_outputs.py -rA -k 'not slow'\n"}), Pass, ""},
		{"the clock", harbor(map[string]string{"tests/check.py": "import time\nok = time.time() % 2 < 1\n"}), Warn, "the tests read the clock: tests/check.py (time.time("},
		{"a sleep is not the clock", harbor(map[string]string{"tests/check.py": "import time\ntime.sleep(0.1)\n"}), Pass, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := Static(writeTask(t, c.files))
			worst := Pass
			var details []string
			for _, f := range fs {
				if f.Check != CheckStatic {
					t.Errorf("check %q", f.Check)
				}
				if f.Verdict.rank() > worst.rank() {
					worst = f.Verdict
				}
				details = append(details, f.Detail)
			}
			if worst != c.want || !strings.Contains(strings.Join(details, "\n"), c.detail) {
				t.Fatalf("%s %q, want %s with %q", worst, details, c.want, c.detail)
			}
		})
	}
}

// TestHints: what the cheats are told comes from the tests' own text.
func TestHints(t *testing.T) {
	tk := writeTask(t, harbor(map[string]string{
		"tests/test.sh":       "#!/bin/bash\ncd /app && bash run.sh > /tmp/out\n[ -f /tmp/reward.txt ] || python3 /app/check.py\ncat /tests/x.txt\necho 1 > /logs/verifier/reward.txt\n",
		"tests/data.txt":      "input shared with the image\n",
		"environment/data.in": "input shared with the image\n",
		"tests/expected.txt":  "an answer only the verifier has\n",
	}))
	h, err := Hints(tk)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.RewardPaths, ","); got != "/logs/verifier/reward.txt,/tmp/reward.txt" {
		t.Errorf("reward paths %s", got)
	}
	if got := strings.Join(h.Invoked, ","); got != "/app,/app/check.py,run.sh" {
		t.Errorf("invoked %s", got)
	}
	lit, err := Hints(writeTask(t, harbor(map[string]string{"tests/test.sh": "#!/bin/bash\ngrep -q 'def main' /app/solve.py && grep -qE '^import numpy$' /app/solve.py && grep -c numpy /app/x.txt\n" +
		"[ \"$(cat /app/a.py)\" = \"$want\" ]\n"})))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lit.Literals, "|"); got != "/app/solve.py\tdef main|/app/solve.py\timport numpy" {
		t.Errorf("literals %q", got)
	}
	var graders []string
	for _, g := range h.Graders {
		graders = append(graders, strings.Fields(g)[1])
	}
	if got := strings.Join(graders, ","); !strings.Contains(got, "tests/expected.txt") || !strings.Contains(got, "solution/solve.sh") || strings.Contains(got, "data.txt") {
		t.Errorf("graders %s (a tests file the build context also holds is an input, not a grader)", got)
	}
}

// TestReportOutputs: the JSON has the shape and the Markdown one
// line per task, control characters escaped.
func TestReportOutputs(t *testing.T) {
	rep := Report{RunID: "R", Tasks: []TaskResult{
		decide("bad|task", []Finding{{CheckStatic, Pass, "ok"}, {CheckOracle, Fail, "does not pass:\x1b[31m red\nline"}}),
		decide("good", []Finding{{CheckStatic, Pass, "ok"}, {CheckIsolation, Skip, "not run"}}),
	}}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Tasks []struct {
			Task, Verdict string
			Findings      []struct{ Check, Verdict, Detail string }
		}
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Tasks) != 2 || back.Tasks[0].Verdict != "FAIL" || back.Tasks[1].Findings[1].Verdict != "SKIP" {
		t.Fatalf("%v %s", err, js.String())
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| bad\\|task | FAIL | oracle: does not pass:\\x1b[31m red line |", "| good | PASS | every check that ran passed; not run: isolation (not run) |", "- SKIP isolation: not run"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}
	if !rep.Failed() {
		t.Error("a FAIL task: Failed() false")
	}
}

// TestReportHostileText: a task name and a finding's detail holding what a
// task or an agent wrote (an OSC retitle with its bell, a right-to-left
// override, a C1 control, invalid UTF-8) reach check.md escaped by
// textsafe, one line each (a bidirectional override passed through before);
// check.json keeps them as written.
func TestReportHostileText(t *testing.T) {
	name := "task\u202egpj.exe"
	detail := "fails: \x1b]0;pwned\x07 \u202eevil\u0085 \xff\r\n[9/9] fake"
	rep := Report{Tasks: []TaskResult{decide(name, []Finding{{CheckStatic, Pass, "ok"}, {CheckOracle, Fail, detail}})}}
	var md, js bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !textsafe.Safe(md.String()) {
		t.Fatalf("check.md is not textsafe:\n%q", md.String())
	}
	for _, s := range []string{`| task\u202egpj.exe | FAIL | oracle: fails: \x1b]0;pwned\x07 \u202eevil\u0085 \xff  [9/9] fake |`, `### task\u202egpj.exe: FAIL`} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("check.md lacks %q:\n%s", s, md.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct{ Tasks []struct{ Task string } }
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Tasks[0].Task != name {
		t.Fatalf("check.json: %v %q", err, back.Tasks)
	}
}

// TestNoVerdictIsNoPass: a no-op or a cheat whose verifier gave no reward
// (verifier_error) is a SKIP "no verdict", not a PASS "fails" / "does not
// pass": missing data proves nothing either way. The one exception is the
// no-op beside a scored oracle: a verifier that cannot score doing
// nothing errors every failing agent (TestEvaluate).
func TestNoVerdictIsNoPass(t *testing.T) {
	rs := clean()
	rs[0], rs[1], rs[2] = noVerdict("oracle"), noVerdict(NoopHarness), noVerdict("agent:cheat-reward-files")
	tr := evaluate(t, rs)
	for _, check := range []string{CheckNoop, "cheat:reward-files"} {
		if f := finding(tr, check); f.Verdict != Skip || !strings.HasPrefix(f.Detail, "no verdict: verifier_error") {
			t.Errorf("%s: %s %q, want SKIP no verdict", check, f.Verdict, f.Detail)
		}
	}
	rs = clean()
	rs[2] = noVerdict("agent:cheat-reward-files")
	if f := finding(evaluate(t, rs), "cheat:reward-files"); f.Verdict != Skip {
		t.Errorf("cheat without a verdict: %s %q, want SKIP", f.Verdict, f.Detail)
	}
}

// withFindings gives r one verifier finding of each kind.
func withFindings(r artifact.Result, kinds ...string) artifact.Result {
	for _, k := range kinds {
		d := map[string]string{"no_tests_executed": "unittest: Ran 0 tests in 0.000s", "reward_exit_conflict": "reward 1 but the test script exited 1"}[k]
		r.Metrics.VerifierFindings = append(r.Metrics.VerifierFindings, artifact.VerifierFinding{Kind: k, Detail: d})
	}
	return r
}

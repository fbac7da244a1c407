package cli

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
)

// contentTask returns the files of a task named name (task.toml body,
// image base and Dockerfile lines, solve.sh, test.sh and more files
// under the task).
func contentTask(name, toml, base, dockerfile, solve, test string, more map[string]string) map[string]string {
	if !strings.Contains(toml, "[verifier]") {
		toml += "\n[verifier]\ntimeout_sec = 60.0\n"
	}
	files := map[string]string{
		name + "/task.toml":              "version = \"1.0\"\n" + toml + "\n[agent]\ntimeout_sec = 60.0\n",
		name + "/instruction.md":         "Solve " + name + ".\n",
		name + "/environment/Dockerfile": "FROM " + base + "\nWORKDIR /app\n" + dockerfile,
		name + "/solution/solve.sh":      "#!/bin/bash\n" + solve,
		name + "/tests/test.sh":          "#!/bin/bash\nmkdir -p /logs/verifier\n" + test,
	}
	for rel, c := range more {
		files[name+"/"+rel] = c
	}
	return files
}

// shadowAgent plants the issue's /app/unittest.py: it prints what
// unittest prints for a passing run and exits 0.
const shadowAgent = `#!/bin/bash
echo '{"_tag":"Started"}'
case "$PROCTOR_TASK" in
shadow-unittest)
  printf 'import sys\nsys.stderr.write("Ran 1 test in 0.001s\\n\\nOK\\n")\nsys.exit(0)\n' > /app/unittest.py && echo planted ;;
*) echo "nothing to plant" ;;
esac
`

// TestTaskContent runs, against real containers, task content that used
// to run as if it were absent or to hide what happened: a planted
// unittest.py that fakes a pass (the cell is suspect, the file named), a
// runner that executed no tests and a test whose reward and exit disagree
// (findings), [environment.healthcheck] before the solve (an unhealthy
// environment errors the cell), [[verifier.collect]] hooks, a separate
// verifier in a fresh container of its own image with only the work tree
// and /logs carried over, and an unknown schema version and an
// unparseable compose file (refused with the reason).
func TestTaskContent(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()
	const answer = "echo 42 > /app/answer.txt\n"
	for _, files := range []map[string]string{
		contentTask("shadow-unittest", "", "python:3.11-slim", "", answer,
			"cd /app && if python3 -m unittest discover -s /tests -p 'test_*.py'; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
			map[string]string{"tests/test_answer.py": "import unittest\n\n\nclass Answer(unittest.TestCase):\n    def test_answer(self):\n        self.assertEqual(open('/app/answer.txt').read().strip(), '42')\n"}),
		contentTask("no-tests", "", "python:3.11-slim", "", answer,
			"cd /tmp && if python3 -m unittest discover -s /tests -p 'check_*.py'; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n", nil),
		contentTask("exit-conflict", "", "debian:bookworm-slim", "", answer, "echo 1 > /logs/verifier/reward.txt\nexit 1\n", nil),
		contentTask("healthy", "\n[environment.healthcheck]\ncommand = \"test -f /tmp/hc || { touch /tmp/hc; exit 1; }\"\ninterval_sec = 0.1\nstart_interval_sec = 0.1\nretries = 3\n",
			"debian:bookworm-slim", "", answer, "if [ -f /tmp/hc ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n", nil),
		contentTask("unhealthy", "\n[environment.healthcheck]\ncommand = \"exit 1\"\ninterval_sec = 0.1\nretries = 2\n",
			"debian:bookworm-slim", "", answer, "echo 1 > /logs/verifier/reward.txt\n", nil),
		contentTask("collect", "\n[[verifier.collect]]\ncommand = \"cp /app/answer.txt /root/collected.txt\"\n", "debian:bookworm-slim", "", answer,
			"if [ \"$(cat /root/collected.txt)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n", nil),
		contentTask("collect-fails", "\n[[verifier.collect]]\ncommand = \"exit 3\"\ntimeout_sec = 10\n", "debian:bookworm-slim", "", answer,
			"echo 1 > /logs/verifier/reward.txt\n", nil),
		contentTask("separate", "\n[verifier]\ntimeout_sec = 60.0\nenvironment_mode = \"separate\"\n", "debian:bookworm-slim", "",
			answer+"echo x > /tmp/agent-only.txt\nmkdir -p /logs/artifacts && echo art > /logs/artifacts/a.txt\n",
			`ok=1
[ -f /verifier-image ] || { echo "not the verifier's image"; ok=0; }
[ -e /tmp/agent-only.txt ] && { echo "a file of the agent's sandbox outside the work tree leaked"; ok=0; }
[ "$(cat /app/answer.txt)" = 42 ] || { echo "the work tree was not carried over"; ok=0; }
[ -f /logs/artifacts/a.txt ] || { echo "/logs was not carried over"; ok=0; }
echo $ok > /logs/verifier/reward.txt
`, map[string]string{"tests/Dockerfile": "FROM debian:bookworm-slim\nRUN touch /verifier-image\n"}),
		contentTask("schema-9.9", "schema_version = \"9.9\"\n", "debian:bookworm-slim", "", answer, "echo 1 > /logs/verifier/reward.txt\n", nil),
		contentTask("compose-bad", "", "debian:bookworm-slim", "", answer, "echo 1 > /logs/verifier/reward.txt\n",
			map[string]string{"environment/docker-compose.yaml": "services:\n  main: [\n"}),
	} {
		writeTree(t, root, files)
	}
	agentDir := t.TempDir()
	writeTree(t, agentDir, map[string]string{"agent.toml": "run = \"bash /opt/proctor/agent/agent.sh\"\n", "agent.sh": shadowAgent})
	hostile := "agent:" + agentDir

	// The oracle on every task; the hostile agent where what it does
	// decides the row (it plants the runner, its work is collected, its
	// task is refused).
	mdPath, hostileMD := filepath.Join(t.TempDir(), "r.md"), filepath.Join(t.TempDir(), "h.md")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--concurrency", "2",
		"--out-md", mdPath)
	h, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--tasks", "shadow-unittest,collect,schema-9.9,compose-bad", "--harnesses", hostile,
		"--concurrency", "2", "--out-md", hostileMD)
	rows := byCell(a)
	maps.Copy(rows, byCell(h))
	kinds := func(r artifact.Result) []string {
		var k []string
		for _, f := range r.Metrics.VerifierFindings {
			k = append(k, f.Kind)
		}
		return k
	}
	want := func(cell, outcome string, findings ...string) artifact.Result {
		t.Helper()
		r, ok := rows[cell]
		if !ok {
			t.Errorf("%s: no row", cell)
			return r
		}
		if r.Outcome != outcome || strings.Join(kinds(r), ",") != strings.Join(findings, ",") {
			t.Errorf("%s: %s (%s) findings %v, want %s %v", cell, r.Outcome, r.Error, r.Metrics.VerifierFindings, outcome, findings)
		}
		return r
	}
	// The planted runner fooled the test: the cell is scored as the test
	// said, and suspect, naming the file.
	sh := want("shadow-unittest "+hostile, artifact.OutcomePassed)
	if wantT := []artifact.TamperFinding{{Path: "/app/unittest.py", Change: "created", Shadows: "python module unittest"}}; !reflect.DeepEqual(sh.Metrics.TamperFindings, wantT) {
		t.Errorf("shadow-unittest tamper findings %+v, want %+v (stdout %q)", sh.Metrics.TamperFindings, wantT, sh.StdoutTail)
	}
	if s := h.Summary.PerHarness[hostile]; s == nil || s.Suspect != 1 {
		t.Errorf("summary of %s: %+v, want 1 suspect", hostile, s)
	}
	if o := want("shadow-unittest oracle", artifact.OutcomePassed); o.Suspect() {
		t.Errorf("the oracle's cell is suspect: %+v", o.Metrics.TamperFindings)
	}
	want("no-tests oracle", artifact.OutcomePassed, "no_tests_executed")
	want("exit-conflict oracle", artifact.OutcomePassed, "reward_exit_conflict")
	want("healthy oracle", artifact.OutcomePassed)
	if u := want("unhealthy oracle", artifact.OutcomeErrored); u.ErrorClass != artifact.ErrorSandbox || !strings.Contains(u.Error, `[environment.healthcheck] "exit 1" failed 2 times`) {
		t.Errorf("unhealthy: %s %q", u.ErrorClass, u.Error)
	}
	want("collect oracle", artifact.OutcomePassed)
	want("collect "+hostile, artifact.OutcomeFailed, "collect_failed")
	if c := want("collect-fails oracle", artifact.OutcomePassed, "collect_failed"); len(c.Metrics.VerifierFindings) == 1 && !strings.Contains(c.Metrics.VerifierFindings[0].Detail, "exited 3") {
		t.Errorf("collect-fails finding %+v", c.Metrics.VerifierFindings)
	}
	if s := want("separate oracle", artifact.OutcomePassed); s.Outcome != artifact.OutcomePassed {
		b, _ := os.ReadFile(filepath.Join(s.OutputDir, "verifier.log"))
		t.Logf("separate verifier.log: %s", b)
	}
	for _, c := range []struct{ task, says string }{
		{"schema-9.9", `schema_version "9.9"`},
		{"compose-bad", "docker-compose.yaml does not parse"},
	} {
		for _, h := range []string{"oracle", hostile} {
			r := want(c.task+" "+h, artifact.OutcomeErrored)
			if r.ErrorClass != artifact.ErrorRefused || !strings.Contains(r.Error, c.says) {
				t.Errorf("%s %s: %s %q, want refused saying %q", c.task, h, r.ErrorClass, r.Error, c.says)
			}
		}
	}
	for p, says := range map[string][]string{
		hostileMD: {"· suspect", "- `/app/unittest.py` created (python module unittest)"},
		mdPath:    {"`no_tests_executed`"},
	} {
		md, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("report: %v", err)
			continue
		}
		for _, s := range says {
			if !strings.Contains(string(md), s) {
				t.Errorf("the report %s lacks %q", filepath.Base(p), s)
			}
		}
	}
	for _, id := range []string{a.Run.ID, h.Run.ID} {
		if c, n := leftovers(t, cli, id); c+n != 0 {
			t.Errorf("%d containers and %d networks of run %s remain", c, n, id)
		}
	}
}

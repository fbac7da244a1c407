package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
)

// writeTaskFiles writes files (relative path → contents) under dir.
func writeTaskFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// probeKindTask writes a Harbor task whose environment/ holds env (its
// Dockerfile included) and whose tests/ hold tests, with toml as its
// task.toml.
func probeKindTask(t *testing.T, root, name, toml string, env, tests map[string]string) {
	t.Helper()
	files := map[string]string{
		"task.toml":         "version = \"1.0\"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n" + toml,
		"instruction.md":    "Do the task.\n",
		"solution/solve.sh": "#!/bin/bash\necho solved > /tmp/solved\n",
		"tests/test.sh":     "#!/bin/bash\npython3 /tests/test_outputs.py && echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range env {
		files["environment/"+k] = v
	}
	for k, v := range tests {
		files["tests/"+k] = v
	}
	writeTaskFiles(t, filepath.Join(root, name), files)
}

// gitWithLostCommit makes a repository at dir whose HEAD is the damage and
// whose objects and reflog still hold the commit the task asks to recover.
func gitWithLostCommit(t *testing.T, dir string) {
	t.Helper()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := repo.Worktree()
	sig := &object.Signature{Name: "t", Email: "t@example.invalid", When: time.Unix(1700000000, 0)}
	commit := func(body, msg string) {
		if err := os.WriteFile(filepath.Join(dir, "ledger.txt"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add("ledger.txt"); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Commit(msg, &git.CommitOptions{Author: sig}); err != nil {
			t.Fatal(err)
		}
	}
	commit("opening balance 100\n", "open the ledger")
	head, _ := repo.Head()
	commit("opening balance 100\nrefund 40\n", "record the refund")
	if err := wt.Reset(&git.ResetOptions{Commit: head.Hash(), Mode: git.HardReset}); err != nil {
		t.Fatal(err)
	}
}

// TestProbeRealWorldKinds runs the isolation probe on eight tasks of the
// kinds that gave false alarms or a right but intended open on real
// public tasks, and a multi-step task, in real containers:
//
//   - three SkillsBench-style images that COPY the task's skills/ into the
//     agents' skill paths (proctor empties skills/ for the build, so the
//     directories are empty): operator_config closed with an info line,
//     treatment closed (the task's skills are protected and none is
//     visible);
//   - four tasks whose grader re-reads an input the image ships
//     (/var/log/auth.log, /root/subtitles/input.srt, a CSV in the work
//     tree, a JSON config under /opt): task_files closed with an info line
//     naming the input;
//   - a task about a repository's history that declares git_history
//     expected (metadata.probe_expect): the probe passes with it
//     expected and says why;
//   - a two-step task: probed in its first step's sandbox, not refused.
//
// Every row passes: one class expected, no false open.
func TestProbeRealWorldKinds(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	upNet := testutil.TestNetwork(t, cli)
	ip := testutil.HTTPHost(t, cli, upNet, "target.test", "anywhere the task did not ask for")
	staticProbe(t)
	setenv(t, EnvProxyBinary, testutil.ProctorBinary(t)) // the probe gets docker-claude's sidecar
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()

	skills := map[string]string{
		"skills/xlsx/SKILL.md":          "---\nname: xlsx\ndescription: Read and write spreadsheets.\n---\nUse openpyxl.\n",
		"skills/xlsx/scripts/recalc.py": "import sys\nprint('recalculated', sys.argv[1:])\n",
	}
	withSkills := func(dockerfile string) map[string]string {
		m := map[string]string{"Dockerfile": dockerfile}
		for k, v := range skills {
			m[k] = v
		}
		return m
	}
	probeKindTask(t, root, "skills-root-agents", "", withSkills("FROM python:3.11-slim\nWORKDIR /root\n"+
		"COPY skills /root/.claude/skills\nCOPY skills /root/.codex/skills\nCOPY skills /root/.agents/skills\n"), nil)
	probeKindTask(t, root, "skills-many-paths", "", withSkills("FROM python:3.11-slim\nWORKDIR /root\n"+
		"COPY skills /root/.claude/skills\nCOPY skills /root/.opencode/skill\nCOPY skills /root/.goose/skills\nCOPY skills /root/.factory/skills\n"), nil)
	probeKindTask(t, root, "skills-readable-root", "", withSkills("FROM python:3.11-slim\n"+
		"COPY skills /root/.claude/skills\nCOPY skills /etc/claude-code/.claude/skills\nRUN chmod 755 /root\nWORKDIR /app\n"), nil)

	const authLog = "Dec  1 10:00:01 web sshd[812]: Failed password for root from 203.0.113.9 port 52214 ssh2\n" +
		"Dec  1 10:00:04 web sshd[812]: Failed password for root from 203.0.113.9 port 52214 ssh2\n"
	probeKindTask(t, root, "input-auth-log", "",
		map[string]string{"Dockerfile": "FROM python:3.11-slim\nCOPY auth.log /var/log/auth.log\nWORKDIR /app\n", "auth.log": authLog},
		map[string]string{"auth.log": authLog, "test_outputs.py": "print(open('/tests/auth.log').read().count('Failed'))\n"})
	const srt = "1\n00:00:01,000 --> 00:00:02,500\nHello there.\n\n2\n00:00:03,000 --> 00:00:04,000\nGeneral Kenobi.\n"
	probeKindTask(t, root, "input-subtitles", "",
		map[string]string{"Dockerfile": "FROM python:3.11-slim\nRUN mkdir -p /root/subtitles\nCOPY input.srt /root/subtitles/input.srt\nWORKDIR /root\n", "input.srt": srt},
		map[string]string{"input.srt": srt, "test_outputs.py": "print(len(open('/tests/input.srt').read()))\n"})
	const csv = "region,month,sales\nnorth,2026-01,1200\nsouth,2026-01,900\n"
	probeKindTask(t, root, "input-workdir-csv", "",
		map[string]string{"Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\nCOPY data /app/data\n", "data/sales.csv": csv},
		map[string]string{"data/sales.csv": csv, "test_outputs.py": "print(open('/tests/data/sales.csv').read().splitlines()[0])\n"})
	const cfg = "{\"retries\": 3, \"endpoint\": \"http://service.internal:8080/v1\"}\n"
	probeKindTask(t, root, "input-opt-config", "",
		map[string]string{"Dockerfile": "FROM python:3.11-slim\nCOPY fixtures/config.json /opt/app/config.json\nWORKDIR /app\n", "fixtures/config.json": cfg},
		map[string]string{"fixtures/config.json": cfg, "test_outputs.py": "import json; print(json.load(open('/tests/fixtures/config.json')))\n"})

	probeKindTask(t, root, "history-recover", "\n[metadata]\nprobe_expect = { git_history = \"the task is to recover the lost refund commit\" }\n",
		map[string]string{"Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\nCOPY repo /app/ledger\n"}, nil)
	gitWithLostCommit(t, filepath.Join(root, "history-recover", "environment", "repo"))

	writeTaskFiles(t, filepath.Join(root, "two-steps"), map[string]string{
		"task.toml":                   "schema_version = \"1.1\"\n\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n[[steps]]\nname = \"one\"\n\n[[steps]]\nname = \"two\"\n",
		"environment/Dockerfile":      "FROM python:3.11-slim\nWORKDIR /app\n",
		"steps/one/instruction.md":    "Write the parser.\n",
		"steps/one/workdir/README.md": "Start from the parser skeleton here.\n",
		"steps/one/tests/test.sh":     "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
		"steps/two/instruction.md":    "Extend it.\n",
		"steps/two/tests/test.sh":     "#!/bin/bash\ntest -f /app/extended.txt && echo 1 > /logs/verifier/reward.txt\n",
	})

	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-probe",
		"--probe-targets", "url=http://"+ip+"/,tcp="+ip+":80,dns=target.test")
	if len(a.Results) != 9 {
		t.Fatalf("%d rows", len(a.Results))
	}
	expected, falseOpen := 0, 0
	for _, r := range a.Results {
		var res harness.ProbeResult
		b, err := os.ReadFile(filepath.Join(r.OutputDir, harness.ProbeReportFile))
		if err != nil || json.Unmarshal(b, &res) != nil {
			t.Errorf("%s: %s (%s): %v", r.Task, r.Outcome, r.Error, err)
			continue
		}
		var exp []string
		for c, st := range res.Classes {
			if st == isoprobe.Expected {
				exp = append(exp, c)
			}
		}
		expected += len(exp)
		open := isoprobe.OpenClasses(res.Classes)
		falseOpen += len(open)
		t.Logf("%-22s passed=%v open=%v expected=%v", r.Task, r.Passed, open, exp)
		if !r.Passed || len(open) > 0 {
			t.Errorf("%s: %v\n%s", r.Task, open, b)
			continue
		}
		info := func(c string) string { return strings.Join(res.Report.Classes[c].Info, "\n") }
		switch {
		case strings.HasPrefix(r.Task, "skills-"):
			if res.Classes[isoprobe.Treatment] != isoprobe.Closed || !strings.Contains(info(isoprobe.OperatorConfig), "/root/.claude exists and holds no file") {
				t.Errorf("%s: treatment %s, operator_config info %q", r.Task, res.Classes[isoprobe.Treatment], info(isoprobe.OperatorConfig))
			}
		case strings.HasPrefix(r.Task, "input-"):
			if !strings.Contains(info(isoprobe.TaskFiles), "which the task ships as input too (environment/") {
				t.Errorf("%s: task_files info %q", r.Task, info(isoprobe.TaskFiles))
			}
		case r.Task == "history-recover":
			if !slices.Equal(exp, []string{isoprobe.GitHistory}) || res.Expected[isoprobe.GitHistory] != "the task is to recover the lost refund commit" ||
				r.Metrics.IsolationProbe[isoprobe.GitHistory] != isoprobe.Expected {
				t.Errorf("history-recover: expected %v, %v, metrics %v", exp, res.Expected, r.Metrics.IsolationProbe)
			}
		case r.Task == "two-steps":
			if len(res.Steps) != 1 || res.Steps[0].Name != "one" || !slices.Equal(res.Steps[0].Uploaded, []string{"one"}) {
				t.Errorf("two-steps: steps %+v", res.Steps)
			}
		}
	}
	t.Logf("%d rows: %d class expected, %d open", len(a.Results), expected, falseOpen)
	if expected != 1 || falseOpen != 0 {
		t.Errorf("want one expected class and no open one: %d expected, %d open", expected, falseOpen)
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

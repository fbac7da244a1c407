package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// armsScript answers the tasks of testdata/arms-root as the replay agent
// does: the commands of the instruction's RUN lines, by tool use.
const armsScript = `
cases:
  - when: "CASE-SETUP-USER"
    replies:
      - tool_use: [{name: Bash, input: {command: "id -u > /app/solve_uid"}}]
        usage: {input_tokens: 100, output_tokens: 10}
      - text: "Recorded."
        usage: {input_tokens: 110, output_tokens: 5}
replies:
  - text: "I do not know how."
    usage: {input_tokens: 90, output_tokens: 7}
`

// TestStepSetupRunsAsTheSolvingUser: a step's setup.sh runs as the user
// the arm solves as, under every in-container arm: root under the oracle,
// uid 10001 under agent: and docker-claude (docker-claude ran it as root,
// and the agent arm as uid 10001: the launcher tested the harness kind).
// The step's test passes only when setup.sh and the solve ran as one user.
func TestStepSetupRunsAsTheSolvingUser(t *testing.T) {
	t.Parallel()
	cli := claudeSetup(t)
	fakeModel(t, cli, armsScript)
	replay := "agent:" + abs(t, "testdata/agents/replay")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/arms-root"), "--tasks", "setup-user",
		"--harnesses", "oracle,"+replay+",docker-claude", "--concurrency", "3", "--agent-grace", "2")
	rows := byCell(a)
	for _, h := range []string{"oracle", replay, "docker-claude"} {
		r := rows["setup-user "+h]
		if r.Outcome != "passed" {
			tail := ""
			if len(r.Steps) == 1 {
				tail = r.Steps[0].Error
			}
			t.Errorf("%s: %s (%q %q), want passed: setup.sh and the solve as one user", h, r.Outcome, r.Error, tail)
		}
	}
}

// TestNoNetworkVerifierUnderAgentArms: the verifier of a no-network task
// has no network at all under an agent arm, as under the oracle: its test
// looks a name up, which fails at once (reward 1) with no network; on the
// agent's internal network the lookup went unanswered for 20 s, past the
// verifier's 12 s budget (verifier_timeout). The multi-step form moves
// the sandbox for each step's verifier and back: the second step's agent
// sees a network interface again.
func TestNoNetworkVerifierUnderAgentArms(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	replay := "agent:" + abs(t, "testdata/agents/replay")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/arms-root"), "--tasks", "no-net-dns,no-net-steps",
		"--harnesses", "oracle,"+replay, "--concurrency", "4")
	rows := byCell(a)
	for _, cell := range []string{"no-net-dns oracle", "no-net-dns " + replay, "no-net-steps oracle", "no-net-steps " + replay} {
		r := rows[cell]
		// Passed is the proof: on a network the lookup outlasts the
		// verifier's budget. A bound on verify_sec below that budget
		// would only measure how loaded the machine is.
		if r.Outcome != "passed" || r.Metrics.VerifySec == nil {
			t.Errorf("%s: %s after verify_sec %v (%q), want passed", cell, r.Outcome, ptrStr(r.Metrics.VerifySec), r.Error)
		}
	}
	r := rows["no-net-steps "+replay]
	b, err := os.ReadFile(filepath.Join(r.OutputDir, "steps", "two", "artifacts", "app", "nets"))
	if err != nil || strings.TrimSpace(strings.ReplaceAll(string(b), "lo\n", "")) == "" {
		t.Errorf("the second step's agent saw the interfaces %q (%v), want its network's back beside lo", b, err)
	}
}

// gitTask writes a task under root whose image holds a git repository in
// /app (this machine's git binary copied in: the images here have none)
// and whose test runs `git -C /app log`. /app/data and /app/victim are
// uid 4242's in the image. The solve appends to the notes and makes a
// file of its own; the replay agent also puts a link to /etc/passwd in
// place of /app/victim.
func gitTask(t *testing.T, root string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on this machine to copy into the task image")
	}
	dir := filepath.Join(root, "git-log")
	app := filepath.Join(dir, "environment", "app")
	for _, d := range []string{app, filepath.Join(dir, "solution"), filepath.Join(dir, "tests")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(gitBin)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"environment/Dockerfile":    "FROM debian:bookworm-slim\nCOPY git /usr/local/bin/git\nCOPY app /app\nRUN chown 4242:4242 /app/data /app/victim\nWORKDIR /app\n",
		"environment/git":           string(b),
		"environment/app/notes.txt": "first\n",
		"environment/app/data":      "data\n",
		"environment/app/victim":    "victim\n",
		"task.toml":                 "[environment]\nworkdir = \"/app\"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n",
		"instruction.md": "CASE-GIT: add a line to the notes and a file of your own.\n" +
			"RUN: echo more >> /app/notes.txt\nRUN: echo mine > /app/agent-made\nRUN: rm -f /app/victim && ln -s /etc/passwd /app/victim\n",
		"solution/solve.sh": "echo more >> /app/notes.txt\necho mine > /app/agent-made\n",
		"tests/test.sh": `#!/bin/bash
git -C /app log --oneline > /tmp/log 2>&1; rc=$?
cat /tmp/log
stat -c 'owner %u %n' /app /app/.git /app/.git/config /app/notes.txt /app/data /app/agent-made /etc/passwd
[ $rc = 0 ] && grep -q first /tmp/log && [ "$(tail -1 /app/notes.txt)" = more ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
`,
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if name == "environment/git" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "first"}} {
		cmd := exec.Command("git", append([]string{"-C", app}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// TestWorkTreeOwnersForTheVerifier: the verifier finds the working tree
// owned as the image had it under an agent arm, as under the oracle: a
// test that runs `git -C /app log` passes under both (git refused the
// tree chowned to uid 10001: "dubious ownership"). What the agent made
// stays uid 10001's, /app/data is uid 4242's again, and a link the agent
// put in place of a file of uid 4242 has its own owner changed, never its
// target's (/etc/passwd stays root's). The row says isolation.work_tree_owners = image.
func TestWorkTreeOwnersForTheVerifier(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()
	gitTask(t, root)
	replay := "agent:" + abs(t, "testdata/agents/replay")
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--tasks", "git-log", "--harnesses", "oracle,"+replay, "--concurrency", "2")
	rows := byCell(a)
	for _, h := range []string{"oracle", replay} {
		if r := rows["git-log "+h]; r.Outcome != "passed" {
			log, _ := os.ReadFile(filepath.Join(r.OutputDir, "verifier.log"))
			t.Errorf("%s: %s (%q), want passed\n%s", h, r.Outcome, r.Error, log)
		}
	}
	r := rows["git-log "+replay]
	if got := r.Metrics.Isolation["work_tree_owners"]; got != "image" {
		t.Errorf("isolation.work_tree_owners %v, want image", got)
	}
	log, err := os.ReadFile(filepath.Join(r.OutputDir, "verifier.log"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/app": "0", "/app/.git": "0", "/app/.git/config": "0", "/app/notes.txt": "0", "/app/data": "4242", "/app/agent-made": "10001", "/etc/passwd": "0"} {
		if line := "owner " + want + " " + path; !strings.Contains(string(log), line+"\n") {
			t.Errorf("verifier.log lacks %q:\n%s", line, log)
		}
	}
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sessionScript answers the steps of TestClaudeInheritsPriorSession. The
// first step of each task writes its file and ends with a text that holds
// MEMORY-7Q; the second step's agent writes its file only when its request
// carries that text (the first step's conversation, which only a resumed
// session has), else it answers that it remembers nothing.
const sessionScript = `
cases:
  - when: "MEMORY-7Q"
    replies:
      - tool_use: [{name: Bash, input: {command: "echo two > /app/two.txt"}}]
      - tool_use: [{name: Bash, input: {command: "echo two > /app/two.txt"}}]
      - tool_use: [{name: Bash, input: {command: "echo two > /app/two.txt"}}]
      - text: "Done two."
      - text: "Done two."
      - text: "Done two."
  - when: "STEP-TWO"
    replies:
      - text: "I remember nothing of a step before."
  - when: "STEP-ONE"
    replies:
      - tool_use: [{name: Bash, input: {command: "echo one > /app/one.txt"}}]
      - text: "Done one. MEMORY-7Q"
`

// sessionTask writes a two-step task whose second step declares
// inherit_prior_session as inherit says.
func sessionTask(t *testing.T, root, name string, inherit bool) {
	t.Helper()
	toml := "schema_version = \"1.1\"\n[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n" +
		"[[steps]]\nname = \"one\"\n[steps.agent]\ntimeout_sec = 300.0\n" +
		"[[steps]]\nname = \"two\"\ndependencies = [\"one\"]\n"
	if inherit {
		toml += "inherit_prior_session = true\n"
	}
	toml += "[steps.agent]\ntimeout_sec = 300.0\n"
	check := func(f string) string {
		return "#!/bin/bash\nmkdir -p /logs/verifier\nif [ -s /app/" + f + " ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
	}
	writeTree(t, filepath.Join(root, name), map[string]string{
		"task.toml":                   toml,
		"steps/one/instruction.md":    "STEP-ONE: write /app/one.txt.\n",
		"steps/one/tests/test.sh":     check("one.txt"),
		"steps/one/solution/solve.sh": "echo one > /app/one.txt\n",
		"steps/two/instruction.md":    "STEP-TWO: do for two what you did in the step before.\n",
		"steps/two/tests/test.sh":     check("two.txt"),
		"steps/two/solution/solve.sh": "echo two > /app/two.txt\n",
	})
}

// TestClaudeInheritsPriorSession runs the real Claude CLI (docker-claude)
// on two two-step tasks against the scripted model: where the second step
// declares inherit_prior_session the CLI resumes the first step's session
// (--resume), so the model gets the first step's conversation and the
// second step passes; where it does not, the second step starts afresh,
// the model has nothing of the first step, and the step fails. Before,
// every step ran a fresh session (--no-session-persistence) and the key
// was an unknown one.
func TestClaudeInheritsPriorSession(t *testing.T) {
	t.Parallel()
	cli := claudeSetup(t)
	_, requests := fakeModel(t, cli, sessionScript)
	root := t.TempDir()
	sessionTask(t, root, "inherits", true)
	sessionTask(t, root, "fresh", false)
	a, _ := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude", "--concurrency", "2", "--agent-grace", "2")
	rows := byCell(a)
	in, fr := rows["inherits docker-claude"], rows["fresh docker-claude"]
	if in.Reward == nil || *in.Reward != 1 || len(in.Steps) != 2 || in.Steps[1].Reward == nil || *in.Steps[1].Reward != 1 {
		t.Errorf("inherits: outcome %s (%s) reward %v steps %+v; want both steps passed", in.Outcome, in.Error, deref(in.Reward), in.Steps)
	}
	if fr.Reward == nil || *fr.Reward != 0.5 {
		t.Errorf("fresh: outcome %s (%s) reward %v; want 0.5 (the second step without the first's conversation)", fr.Outcome, fr.Error, deref(fr.Reward))
	}
	log, _ := os.ReadFile(filepath.Join(in.OutputDir, "steps", "two", "run.log"))
	if !strings.Contains(string(log), "resumes session") {
		t.Errorf("inherits: step two's run.log does not say it resumed:\n%s", log)
	}
	resumed := 0
	for _, r := range requests() {
		b := string(r.Body)
		if strings.Contains(b, "STEP-TWO") && strings.Contains(b, "STEP-ONE") {
			resumed++
		}
	}
	if resumed == 0 {
		t.Error("no request of a second step carried the first step's conversation")
	}
}

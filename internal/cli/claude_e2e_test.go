package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/llmtest"
)

// The credential the tests give the CLI; it must reach the model and
// never any stored file. The quote and backslash make its JSON-escaped
// form differ from the raw one.
const claudeTestKey = `sk-ant-test-"s3cr3t"\-9f8e7d`

var (
	staticOnce sync.Once
	staticBin  string
	staticErr  error
)

// staticProctor builds a static proctor binary once per test process, for
// the fake-model container.
func staticProctor(t *testing.T) string {
	t.Helper()
	staticOnce.Do(func() {
		dir, err := os.MkdirTemp("", "proctor-static-")
		if err != nil {
			staticErr = err
			return
		}
		staticBin = filepath.Join(dir, "proctor")
		cmd := exec.Command("go", "build", "-o", staticBin, "github.com/proctor-eval/proctor/cmd/proctor")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("build proctor: %v\n%s", err, out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticBin
}

// fakeModel runs `proctor serve fake-model` with script in a container on
// an --internal network the test makes, and points the docker-claude arms
// at it: ANTHROPIC_BASE_URL is the container's address, and the agent's
// sandbox joins that network for its solve (harness.ModelNetworkEnv).
// Temporary: once the proxy-logger sidecar is wired to the Claude arms,
// the agent reaches this container through the proxy instead. It returns
// a function reading the requests the model got.
func fakeModel(t *testing.T, cli *client.Client, script string) func() []llmtest.Request {
	t.Helper()
	if _, err := llmtest.ParseScript([]byte(script)); err != nil {
		t.Fatal(err)
	}
	bin := staticProctor(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	labels := map[string]string{"proctor.test": "claude-e2e"}
	name := fmt.Sprintf("proctor-test-model-%d", time.Now().UnixNano())
	if _, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Internal: true, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), name) })
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: "debian:bookworm-slim", Labels: labels,
		Cmd: []string{"/proctor", "serve", "fake-model", "--script", "/m/script.yaml", "--listen", "0.0.0.0:8080", "--requests", "/m/requests.jsonl"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(name), Binds: []string{bin + ":/proctor:ro", dir + ":/m"}}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ins, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ip := ins.NetworkSettings.Networks[name].IPAddress
	t.Setenv("ANTHROPIC_BASE_URL", "http://"+ip+":8080")
	t.Setenv("ANTHROPIC_API_KEY", claudeTestKey)
	t.Setenv(harness.ModelNetworkEnv, name)
	t.Setenv(harness.ClaudeBinEnv, testutil.Claude(t))
	// Listening: poll the container's log for the line it prints.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rc, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true})
		if err == nil {
			b := new(strings.Builder)
			_, _ = bufio.NewReader(rc).WriteTo(b)
			rc.Close()
			if strings.Contains(b.String(), "listening on") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake model never listened")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func() []llmtest.Request {
		b, _ := os.ReadFile(filepath.Join(dir, "requests.jsonl"))
		var out []llmtest.Request
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r llmtest.Request
			if json.Unmarshal([]byte(l), &r) == nil {
				out = append(out, r)
			}
		}
		return out
	}
}

// claudeTask writes a Harbor task whose verifier passes when /app/out.txt
// holds "hello", on an image made from dockerfile lines after FROM.
func claudeTask(t *testing.T, root, name string, timeoutSec float64, dockerfile ...string) {
	t.Helper()
	dir := filepath.Join(root, name)
	files := map[string]string{
		"task.toml":              fmt.Sprintf("version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = %g\n", timeoutSec),
		"instruction.md":         "Write hello into /app/out.txt.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\n" + strings.Join(dockerfile, "\n") + "\nWORKDIR /app\n",
		"tests/test.sh":          "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"solution/solve.sh":      "#!/bin/bash\necho hello > /app/out.txt\n",
	}
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// writeSkill writes a skill directory with SKILL.md (frontmatter lines
// extra after name and description).
func writeSkill(t *testing.T, dir, name string, extra ...string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(p, "evals"), 0o755); err != nil {
		t.Fatal(err)
	}
	md := "---\nname: " + name + "\ndescription: How to greet files.\n" + strings.Join(extra, "\n") + "\n---\nWrite hello.\n"
	if err := os.WriteFile(filepath.Join(p, "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "evals", "answers.txt"), []byte("the answer key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// noCredentialStored fails when any file under dir holds the test key,
// raw or JSON-escaped.
func noCredentialStored(t *testing.T, dir string) {
	t.Helper()
	esc, _ := json.Marshal(claudeTestKey)
	forms := []string{claudeTestKey, string(esc[1 : len(esc)-1]), "s3cr3t"}
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		n++
		for _, f := range forms {
			if strings.Contains(string(b), f) {
				t.Errorf("%s holds the credential (%q)", p, f)
			}
		}
		return nil
	})
	if n == 0 {
		t.Errorf("no file under %s", dir)
	}
}

func claudeSetup(t *testing.T) *client.Client {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.Claude(t)
	t.Setenv("PROCTOR_HOME", t.TempDir())
	return cli
}

// TestClaudeArmsSolveWithAndWithoutSkill runs the real CLI in both arms
// against a script that solves the task by tool use only when the skill
// was offered: the skill arm calls the Skill tool, then Bash, and passes;
// the control arm answers without a tool and fails. The model got the
// credential; no stored file holds it.
func TestClaudeArmsSolveWithAndWithoutSkill(t *testing.T) {
	cli := claudeSetup(t)
	requests := fakeModel(t, cli, `
replies:
  - when: "abskill:greet"
    text: "Loading the skill."
    tool_use: [{name: Skill, input: {skill: "abskill:greet"}}]
    usage: {input_tokens: 1000, output_tokens: 20}
  - when: "abskill:greet"
    tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
    usage: {input_tokens: 1200, output_tokens: 30, cache_read_input_tokens: 500}
  - when: "abskill:greet"
    text: "Done."
    usage: {input_tokens: 1300, output_tokens: 5}
alt:
  - text: "I do not know how."
    usage: {input_tokens: 900, output_tokens: 7}
`)
	root, skills := t.TempDir(), t.TempDir()
	claudeTask(t, root, "greet", 120)
	skill := writeSkill(t, skills, "greet")
	skillArm := "docker-claude-skill:" + skill
	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude,"+skillArm, "--baseline-harness", "docker-claude")
	rows := byCell(a)
	s, c := rows["greet "+skillArm], rows["greet docker-claude"]
	if s.Outcome != "passed" {
		t.Fatalf("skill arm: %+v", s)
	}
	m := s.Metrics
	if m.CostUSD == nil || *m.CostUSD <= 0 || m.PromptTokens == nil || *m.PromptTokens != 3500 || m.CompletionTokens == nil || *m.CompletionTokens != 55 ||
		m.NCalls == nil || *m.NCalls != 3 || m.ToolCalls["Bash"] != 1 || m.ToolCalls["Skill"] != 1 {
		t.Errorf("skill arm metrics: %+v", m)
	}
	ar := m.AgentReported
	if ar["n_skill_invocations"] != 1.0 || ar["treatment"] != "greet" || ar["terminal_reason"] != "completed" ||
		fmt.Sprint(ar["offered_plugins"]) != "[abskill]" || fmt.Sprint(ar["unexpected_skills"]) != "[]" {
		t.Errorf("skill arm agent_reported: %v", ar)
	}
	if c.Outcome != "failed" || c.Metrics.AgentReported["terminal_reason"] != "completed" || c.Metrics.NCalls == nil || *c.Metrics.NCalls != 1 {
		t.Errorf("control arm: %+v", c)
	}
	if fmt.Sprint(c.Metrics.AgentReported["offered_plugins"]) != "[]" {
		t.Errorf("control arm offered plugins %v (the built-in ones are off)", c.Metrics.AgentReported["offered_plugins"])
	}
	if h := a.Summary.PerHarness[skillArm]; h == nil {
		t.Errorf("no per_harness entry for %s", skillArm)
	}
	reqs := requests()
	if len(reqs) < 4 {
		t.Fatalf("the model got %d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.APIKey != claudeTestKey {
			t.Errorf("request %s carried key %q", r.Path, r.APIKey)
		}
	}
	noCredentialStored(t, out)
	// The evals of the skill never reached the agent.
	for _, r := range reqs {
		if strings.Contains(string(r.Body), "the answer key") {
			t.Error("the skill's evals/ reached the model")
		}
	}
}

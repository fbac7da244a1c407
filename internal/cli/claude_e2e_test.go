package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/llmtest"
)

// The credential the tests give the CLI; it must reach the model and
// never any stored file. The quote and backslash make its JSON-escaped
// form differ from the raw one.
const claudeTestKey = `sk-ant-test-"s3cr3t"\-9f8e7d`

// fakeModel runs `proctor serve fake-model` with script in a container on
// a network the test makes, and points the docker-claude arms at it:
// ANTHROPIC_BASE_URL is the container's address on that network (an IP
// literal, which the egress proxy allows as listed), and the sidecar's
// upstream network (PROCTOR_EGRESS_NETWORK) is that network, so the agent
// reaches the model only through its sandbox's proxy. It returns the base
// URL and a function reading the requests the model got.
func fakeModel(t testing.TB, cli *client.Client, script string) (string, func() []llmtest.Request) {
	t.Helper()
	if _, err := llmtest.ParseScript([]byte(script)); err != nil {
		t.Fatal(err)
	}
	bin := testutil.ProctorBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := testutil.TestNetwork(t, cli)
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: "debian:bookworm-slim", Labels: map[string]string{testutil.LabelTest: t.Name()},
		Cmd: []string{"/proctor", "serve", "fake-model", "--script", "/m/script.yaml", "--listen", "0.0.0.0:8080", "--requests", "/m/requests.jsonl"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(name), Binds: []string{bin + ":/proctor:ro", dir + ":/m"}}, nil, nil, "")
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
	base := "http://" + ins.NetworkSettings.Networks[name].IPAddress + ":8080"
	setenv(t, "ANTHROPIC_BASE_URL", base)
	setenv(t, "ANTHROPIC_API_KEY", claudeTestKey)
	setenv(t, EnvProxyBinary, bin)
	setenv(t, EnvEgressNetwork, name)
	setenv(t, harness.ClaudeBinEnv, testutil.Claude(t))
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
	return base, func() []llmtest.Request {
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
// holds "hello"; instruction is its prompt (the fake model tells tasks
// apart by it), the image is made from dockerfile lines after FROM.
func claudeTask(t testing.TB, root, name, instruction string, timeoutSec float64, dockerfile ...string) {
	t.Helper()
	dir := filepath.Join(root, name)
	// Without Dockerfile lines the task runs debian:bookworm-slim itself,
	// so its cells share one derived image with the CLI (made once).
	toml := fmt.Sprintf("version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = %g\n", timeoutSec)
	if len(dockerfile) == 0 {
		toml += "[environment]\ndocker_image = \"debian:bookworm-slim\"\nworkdir = \"/app\"\n"
	}
	files := map[string]string{
		"task.toml":         toml,
		"instruction.md":    instruction + "\nWrite hello into /app/out.txt.\n",
		"tests/test.sh":     "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"solution/solve.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
	}
	if len(dockerfile) > 0 {
		files["environment/Dockerfile"] = "FROM debian:bookworm-slim\n" + strings.Join(dockerfile, "\n") + "\nWORKDIR /app\n"
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

func claudeSetup(t testing.TB) *client.Client {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.Claude(t)
	setenv(t, "PROCTOR_HOME", t.TempDir())
	return cli
}

// claudeScript answers the tasks of TestClaudeArms by a CASE string of
// their prompts; the greet task is solved by tool use only when the skill
// was offered, its last reply a 200 KB text.
const claudeScript = `
cases:
  - when: "CASE-429"
    replies: [{error: {status: 429}}]
  - when: "CASE-529"
    replies:
      - tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 100, output_tokens: 10}
      - tool_use: [{name: Bash, input: {command: "cat /app/out.txt"}}]
        usage: {input_tokens: 110, output_tokens: 10}
      - tool_use: [{name: Read, input: {file_path: "/app/out.txt"}}]
        usage: {input_tokens: 120, output_tokens: 10}
      - error: {status: 529}
  - when: "CASE-HANG"
    replies: [{hang: true}]
  - when: "abskill:greet"
    replies:
      - text: "Loading the skill."
        tool_use: [{name: Skill, input: {skill: "abskill:greet"}}]
        usage: {input_tokens: 1000, output_tokens: 20}
      - tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 1200, output_tokens: 30, cache_read_input_tokens: 500}
      - {text: "Done: ", large: 200000, usage: {input_tokens: 1300, output_tokens: 5}}
replies:
  - text: "I do not know how."
    usage: {input_tokens: 900, output_tokens: 7}
`

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestClaudeArms runs the real CLI (concurrency 2, four cells) against
// the scripted model, reached only through each cell's egress proxy, over
// tasks that each play one case, under both arms: a solve by tool use
// that only the skill arm finds, ending in a 200 KB result line; an image
// whose /opt is closed to uid 10001 so the skill plugin cannot load (the
// skill arm errored, "treatment not offered"). Each cell's egress.jsonl
// shows the model host allowed and nothing else allowed; the model got
// the credential; no stored file holds it; nothing of the run is left.
// The provider's failures under the control arm are
// TestClaudeProviderFailures (`make e2e`).
func TestClaudeArms(t *testing.T) {
	t.Parallel()
	cli := claudeSetup(t)
	base, requests := fakeModel(t, cli, claudeScript)
	modelHost := strings.TrimPrefix(base, "http://")
	root, skills := t.TempDir(), t.TempDir()
	// Budgets are generous: a cell that works ends when the CLI does; on a
	// loaded machine the 400 MB CLI takes tens of seconds to start.
	claudeTask(t, root, "greet", "CASE-GREET", 300)
	claudeTask(t, root, "closed-opt", "CASE-GREET", 300, "RUN chmod 0700 /opt")
	skill := writeSkill(t, skills, "greet")
	skillArm := "docker-claude-skill:" + skill
	// Both arms where the arms differ.
	start := time.Now()
	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude,"+skillArm,
		"--baseline-harness", "docker-claude", "--concurrency", "2", "--agent-grace", "2")
	t.Logf("4 cells in %s", time.Since(start).Round(time.Millisecond))
	rows := byCell(a)

	s, c := rows["greet "+skillArm], rows["greet docker-claude"]
	m := s.Metrics
	if s.Outcome != "passed" || m.CostUSD == nil || *m.CostUSD <= 0 || deref(m.PromptTokens) != int64(3500) || deref(m.CompletionTokens) != int64(55) ||
		deref(m.CacheReadTokens) != int64(500) || m.ToolCalls["Bash"] != 1 || m.ToolCalls["Skill"] != 1 {
		t.Errorf("greet, skill arm: %s", showClaude(s))
	}
	ar := m.AgentReported
	if ar["n_skill_invocations"] != 1.0 || ar["treatment"] != "greet" || ar["terminal_reason"] != "completed" ||
		fmt.Sprint(ar["offered_plugins"]) != "[abskill]" || fmt.Sprint(ar["unexpected_skills"]) != "[]" || ar["ttft_sec"] == nil || ar["latency_sec"] == nil {
		t.Errorf("greet, skill arm agent_reported: %v", ar)
	}
	// The skill arm's notice, versioned: the seed's meaning, no task named.
	if tr := m.Treatment; tr == nil || tr.Skill != "greet" || tr.NoticeVersion != harness.SkillNoticeVersion || c.Metrics.Treatment != nil {
		t.Errorf("metrics.treatment: skill arm %+v, control arm %+v", m.Treatment, c.Metrics.Treatment)
	}
	if c.Outcome != "failed" || c.Metrics.AgentReported["terminal_reason"] != "completed" || deref(c.Metrics.NCalls) != int64(1) ||
		fmt.Sprint(c.Metrics.AgentReported["offered_plugins"]) != "[]" {
		t.Errorf("greet, control arm (built-in plugins off): %s", showClaude(c))
	}
	// The CLI's result text is the row's agent_claim, judged by the claim rule.
	if cl := c.AgentClaim; cl == nil || cl.Text != "I do not know how." || cl.ClaimedSuccess || c.Overclaimed() {
		t.Errorf("greet, control arm's claim: %+v", cl)
	}
	if r := rows["closed-opt "+skillArm]; r.Outcome != "errored" || r.ErrorClass != "solver_error" || !strings.Contains(r.Error, "treatment not offered") {
		t.Errorf("plugin that cannot load: %s", showClaude(r))
	}
	if r := rows["closed-opt docker-claude"]; r.Outcome != "failed" {
		t.Errorf("closed /opt under the control arm: %s", showClaude(r))
	}
	if h := a.Summary.PerHarness[skillArm]; h == nil {
		t.Errorf("no per_harness entry for %s", skillArm)
	}
	if cmp := a.Summary.Comparisons[skillArm]; cmp == nil {
		t.Errorf("no comparison of %s against docker-claude", skillArm)
	}
	reqs := requests()
	noticed := false
	for _, r := range reqs {
		noticed = noticed || (strings.Contains(string(r.Body), "Load it with the Skill tool before you start") &&
			strings.Contains(string(r.Body), "trust the environment"))
	}
	if !noticed {
		t.Error("no request of the skill arm carried the notice")
	}
	// At least the skill arm's three turns and a turn of each control cell.
	if len(reqs) < 5 {
		t.Fatalf("the model got %d requests", len(reqs))
	}
	claudeRequestsKeyed(t, reqs)
	claudeEgressModelOnly(t, rows, modelHost)
	noCredentialStored(t, out)
	// The 200 KB line is stored whole.
	b, err := os.ReadFile(filepath.Join(s.OutputDir, "claude.stream.jsonl"))
	if err != nil || !strings.Contains(string(b), strings.Repeat("x", 200000)) {
		t.Errorf("claude.stream.jsonl of the greet skill cell lacks the 200 KB text (%v)", err)
	}
	if c, n := leftovers(t, cli, a.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, a.Run.ID)
	}
}

// showClaude is a docker-claude row's outcome and usage, for a message.
func showClaude(r artifact.Result) string {
	m := r.Metrics
	return fmt.Sprintf("outcome=%s class=%s error=%q cost=%v prompt=%v completion=%v calls=%v tools=%v timeout=%v leftover=%v reported=%v",
		r.Outcome, r.ErrorClass, r.Error, deref(m.CostUSD), deref(m.PromptTokens), deref(m.CompletionTokens), deref(m.NCalls), m.ToolCalls,
		m.SolverTimeout, deref(m.VerifierLeftoverProcesses), m.AgentReported)
}

// claudeRequestsKeyed fails when a request reached the model without the
// credential or with a skill's evals/.
func claudeRequestsKeyed(t *testing.T, reqs []llmtest.Request) {
	t.Helper()
	for _, r := range reqs {
		if r.APIKey != claudeTestKey {
			t.Errorf("request %s carried key %q", r.Path, r.APIKey)
		}
		if strings.Contains(string(r.Body), "the answer key") {
			t.Error("the skill's evals/ reached the model")
		}
	}
}

// claudeEgressModelOnly: every cell went through its proxy, the model
// host allowed, nothing else allowed (whatever else the CLI tried is
// denied). An errored cell has no isolation record, but its proxy's
// decisions are kept.
func claudeEgressModelOnly(t *testing.T, rows map[string]artifact.Result, modelHost string) {
	t.Helper()
	for k, r := range rows {
		e := r.Metrics.Egress
		if (r.Outcome != "errored" && r.Metrics.Isolation["egress"] != "proxy") || e == nil || e.Allowed == 0 || !slices.Equal(e.AllowedHosts, []string{modelHost}) {
			t.Errorf("%s: isolation %v, metrics.egress %+v; want the model host %s allowed only", k, r.Metrics.Isolation, e, modelHost)
			continue
		}
		if slices.Contains(e.DeniedHosts, modelHost) {
			t.Errorf("%s: the model host denied: %+v", k, e)
		}
		b, err := os.ReadFile(filepath.Join(r.OutputDir, "egress.jsonl"))
		if err != nil || !strings.Contains(string(b), `"decision":"allowed"`) {
			t.Errorf("%s egress.jsonl (%v):\n%s", k, err, b)
		}
	}
}

// TestClaudeProviderFailures runs the real CLI (concurrency 2, three
// cells, the control arm: the outcome rules are the arms' shared code, and
// TestCodexArms proves them in `make test`) against the provider's
// failures: a 429 before any turn (errored infra, a provider error); a 529
// at turn 3 (scored); a reply that never ends (solver_timeout, nothing
// left running). Every cell went through its proxy to the model alone, no
// stored file holds the credential, nothing of the run is left.
func TestClaudeProviderFailures(t *testing.T) {
	t.Parallel()
	testutil.LongE2E(t)
	cli := claudeSetup(t)
	base, requests := fakeModel(t, cli, claudeScript)
	modelHost := strings.TrimPrefix(base, "http://")
	failing := t.TempDir()
	claudeTask(t, failing, "rate-limited", "CASE-429", 300)
	claudeTask(t, failing, "overloaded", "CASE-529", 300)
	// The hanging reply's budget must still outlast the CLI's start.
	claudeTask(t, failing, "hangs", "CASE-HANG", 40)
	f, fout := runMain(t, "tasks", "run", "--tasks-root", failing, "--all", "--harnesses", "docker-claude",
		"--concurrency", "2", "--agent-grace", "2")
	rows := byCell(f)
	if r := rows["rate-limited docker-claude"]; r.Outcome != "errored" || r.ErrorClass != "infra" || !strings.Contains(r.Error, "provider failed before any attempt") ||
		r.Metrics.AgentReported["api_error_status"] != 429.0 {
		t.Errorf("429 before any turn (a provider error, no --retries): %s", showClaude(r))
	}
	if r := rows["overloaded docker-claude"]; r.Outcome != "passed" || r.Metrics.AgentReported["is_error"] != true || r.Metrics.AgentReported["api_error_status"] != 529.0 {
		t.Errorf("529 at turn 3 (scored): %s", showClaude(r))
	}
	if r := rows["hangs docker-claude"]; r.Outcome != "solver_timeout" || !r.Metrics.SolverTimeout || deref(r.Metrics.VerifierLeftoverProcesses) != 0 ||
		r.Metrics.CostUSD != nil || r.Metrics.PromptTokens != nil {
		t.Errorf("a reply that never ends: %s", showClaude(r))
	}
	reqs := requests()
	hung := false
	for _, r := range reqs {
		hung = hung || strings.Contains(string(r.Body), "CASE-HANG")
	}
	if !hung {
		t.Error("the hanging reply was never asked for (the CLI timed out before its first request)")
	}
	claudeRequestsKeyed(t, reqs)
	claudeEgressModelOnly(t, rows, modelHost)
	noCredentialStored(t, fout)
	if c, n := leftovers(t, cli, f.Run.ID); c+n != 0 {
		t.Errorf("%d containers and %d networks of run %s remain", c, n, f.Run.ID)
	}
}

// TestClaudeSkillFrontmatterRefused: a skill whose frontmatter names a
// model fails the run before anything starts, naming the file and key.
func TestClaudeSkillFrontmatterRefused(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	setenv(t, "ANTHROPIC_API_KEY", claudeTestKey)
	setenv(t, "ANTHROPIC_BASE_URL", "http://192.0.2.1:8080")
	setenv(t, harness.ClaudeBinEnv, "/bin/sh") // only its presence is checked before the run
	root, skills := t.TempDir(), t.TempDir()
	claudeTask(t, root, "greet", "CASE-GREET", 120)
	for _, fm := range []string{"model: claude-opus-4", "context: fork", "hooks: {}", "disable-model-invocation: true"} {
		skill := writeSkill(t, skills, "s"+fmt.Sprint(len(fm)), fm)
		var stdout, stderr strings.Builder
		code := mainT(t, []string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude-skill:" + skill, "--output-dir", t.TempDir()}, &stdout, &stderr)
		key := strings.SplitN(fm, ":", 2)[0]
		if code == 0 || !strings.Contains(stderr.String(), "SKILL.md") || !strings.Contains(stderr.String(), "frontmatter key "+key) {
			t.Errorf("%s: exit %d, stderr %s", fm, code, stderr.String())
		}
	}
}

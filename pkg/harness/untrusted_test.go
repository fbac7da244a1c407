package harness_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/task"
)

// claudeHost sets up what the Claude arms need on the host: a CLI binary
// (never run: the fake answers it) and a provider key.
func claudeHost(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(harness.ClaudeBinEnv, bin)
	t.Setenv("ANTHROPIC_API_KEY", "sk-test")
	t.Setenv(harness.CodexBinEnv, bin)
	t.Setenv("OPENAI_API_KEY", "sk-test")
}

// TestUntrustedConformance: every in-container arm that runs a program
// proctor does not trust passes harnesstest.UntrustedConformance on the
// fake sandbox: agent:, the probe, docker-claude, docker-claude-skill,
// docker-codex and docker-codex-skill.
func TestUntrustedConformance(t *testing.T) {
	staticProctor(t)
	claudeHost(t)
	skill := filepath.Join(t.TempDir(), "s")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: s\ndescription: a skill\n---\nDo it.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	agentDir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	for _, c := range []harnesstest.UntrustedCase{
		{Harness: "agent:" + agentDir, Solver: "agent.sh", Stdout: "done\n"},
		{Harness: "docker-probe", Solver: "probe-inside", Stdout: report(allClosed()), SelfScored: true},
		{Harness: string(harness.DockerClaude), Solver: "--output-format"},
		{Harness: "docker-claude-skill:" + skill, Solver: "--output-format"},
		{Harness: string(harness.DockerCodex), Solver: "--json"},
		{Harness: "docker-codex-skill:" + skill, Solver: "--json", Also: []sandboxfake.Script{{Match: "prompt-input", Stdout: codexPromptInput}}},
	} {
		t.Run(strings.SplitN(c.Harness, ":", 2)[0], func(t *testing.T) { harnesstest.UntrustedConformance(t, c) })
	}
}

// codexPromptInput is `codex debug prompt-input` listing the skill s, as
// 0.171.0 renders it.
const codexPromptInput = `[{"type":"message","role":"developer","content":[{"type":"input_text","text":"<skills_instructions>\n## Skills\n### Skill roots\n- ` + "`r0` = `/etc/codex/skills`" + `\n### Available skills\n- s: a skill (file: r0/s/SKILL.md)\n</skills_instructions>"}]}]`

// bareArm is a throw-away in-container arm: it runs `solve` as the agent
// user in /app, through RunUntrusted unless skip names a step of the
// sequence it then does by hand without that step (as arms did before
// RunUntrusted owned it).
type bareArm struct{ skip string }

func (a bareArm) Ref() harness.Ref                      { return harness.Ref{Name: "bare", Kind: "bare"} }
func (bareArm) SetupCheck() bool                        { return false }
func (bareArm) Check(string, func(string) string) error { return nil }
func (bareArm) IdentityInputs(string, func(string) string) ([]harness.IdentityInput, error) {
	return nil, nil
}
func (bareArm) Refusal(*task.Task) (events.ErrorClass, string) { return "", "" }
func (bareArm) Networks(*task.Task) harness.Networks {
	return harness.Networks{Start: sandbox.NetworkInternal, Solve: "internal", Verify: sandbox.NetworkBridge}
}
func (bareArm) Needs() []sandbox.Ability { return []sandbox.Ability{sandbox.AbilityProcessKiller} }
func (bareArm) Prepare(ctx context.Context, env harness.Env) (harness.Placement, error) {
	return harness.Placement{
		Driver: env.Driver(), Spec: sandbox.Spec{RunID: env.RunID(), CellID: env.CellID(), Image: "bare", Workdir: "/app", Network: sandbox.NetworkInternal},
		Workdir: "/app", User: harness.AgentUser,
	}, nil
}

func (a bareArm) Solve(ctx context.Context, env harness.Env, p harness.Placement, h *sandbox.Handle) (harness.Outcome, error) {
	if err := env.Emit(ctx, events.Started, events.StartedData{Harness: "bare"}, time.Time{}); err != nil {
		return harness.Outcome{}, err
	}
	if a.skip == "" {
		r, err := harness.RunUntrusted(ctx, env, p, h, bareSolve{})
		if err != nil {
			return harness.Outcome{}, err
		}
		return harness.Outcome{Finished: events.FinishedData{TimedOut: r.Exec.TimedOut, Isolation: r.Isolation}}, nil
	}
	// By hand, one step left out.
	d := p.Driver
	killer, _ := d.(sandbox.ProcessKiller)
	user := harness.AgentUser
	if a.skip == "user" {
		user = ""
	}
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"solve"}, User: user, Workdir: p.Workdir})
	if err != nil {
		return harness.Outcome{}, err
	}
	iso := map[string]any{}
	if a.skip != "kill" {
		if killer == nil {
			return harness.Outcome{}, fmt.Errorf("no ProcessKiller")
		}
		if err := killer.KillAll(ctx, h, user); err != nil {
			return harness.Outcome{}, err
		}
	}
	if a.skip != "links" {
		links, err := harness.RemoveGraderLinks(ctx, d, h, p.Workdir)
		if err != nil {
			return harness.Outcome{}, err
		}
		iso["grader_links_removed"] = len(links)
	}
	return harness.Outcome{Finished: events.FinishedData{TimedOut: res.TimedOut, Isolation: iso}}, nil
}

type bareSolve struct{}

func (bareSolve) Stage(context.Context, *harness.UntrustedRun) error { return nil }
func (bareSolve) Command(context.Context, *harness.UntrustedRun) (sandbox.ExecSpec, error) {
	return sandbox.ExecSpec{Cmd: []string{"solve"}, Timeout: time.Minute}, nil
}
func (bareSolve) Ended(sandbox.ExecResult) {}

// TestUntrustedConformanceFindsAMissingStep: a throw-away arm on
// RunUntrusted passes the suite; the same arm doing the sequence by hand
// fails it, naming what is missing, whichever step it leaves out: the
// agent user (root instead), the KillAll, the grader-link removal, the
// HOME reset (which no hand-rolled variant here does).
func TestUntrustedConformanceFindsAMissingStep(t *testing.T) {
	c := harnesstest.UntrustedCase{Harness: "bare", Solver: "solve"}
	c.Arm = bareArm{}
	if vs := harnesstest.UntrustedViolations(t, c); len(vs) > 0 {
		t.Errorf("an arm on RunUntrusted: %q", vs)
	}
	for skip, want := range map[string]string{
		"user":  "cheat: the solver ran as root",
		"kill":  "cheat: no KillAll",
		"links": "cheat: the link /app/answer.txt -> /tests/expected_output.txt is still there",
		"home":  "cheat: the verifier's /app/.bashrc is the agent's",
	} {
		c.Arm = bareArm{skip: skip}
		vs := harnesstest.UntrustedViolations(t, c)
		found := false
		for _, v := range vs {
			found = found || strings.HasPrefix(v, want)
		}
		if !found {
			t.Errorf("without the %s step the suite said %q, not %q", skip, vs, want)
		}
	}
}

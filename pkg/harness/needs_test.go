package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// only returns a fake that declares need alone: every other ability is
// switched off, and a call of one is recorded (Refused).
func only(need []sandbox.Ability, scripts ...sandboxfake.Script) *sandboxfake.Driver {
	var off []sandbox.Ability
	for _, a := range sandbox.AllAbilities() {
		if !slices.Contains(need, a) {
			off = append(off, a)
		}
	}
	return &sandboxfake.Driver{Off: off, Scripts: scripts}
}

// TestArmsUseOnlyWhatTheyNeed: each in-container arm solves an allowlist
// task (its sandbox behind the egress proxy) on a fake that has only the
// abilities the arm declares in Needs, and calls no other: the oracle,
// an agent with an install step, the probe, docker-claude and docker-codex. Needs is
// what the run is checked against before it starts, so an ability an arm
// uses without declaring would error its cells instead.
func TestArmsUseOnlyWhatTheyNeed(t *testing.T) {
	staticProctor(t)
	bin := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(harness.ClaudeBinEnv, bin)
	t.Setenv("ANTHROPIC_API_KEY", "sk-test")
	t.Setenv(harness.CodexBinEnv, bin)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	agentDir := harnesstest.Agent(t, "install = \"true\"\nrun = \"bash /opt/proctor/agent/agent.sh\"\n")
	for name, sc := range map[string]sandboxfake.Script{
		"oracle":                     {Match: "solve.sh"},
		"agent:" + agentDir:          {Match: "agent.sh", Stdout: "done\n"},
		"docker-probe":               {Match: "probe-inside", Stdout: report(allClosed())},
		string(harness.DockerClaude): {Match: "--output-format"},
		string(harness.DockerCodex):  {Match: "--json"},
	} {
		t.Run(strings.SplitN(name, ":", 2)[0], func(t *testing.T) {
			a := arm(t, name)
			d := only(a.Needs(), sc)
			d.EgressJSONL = []byte(`{"time":"2025-01-15T10:00:05.9Z","conn":1,"method":"CONNECT","host":"pypi.org","port":443,"decision":"allowed","reason":"allowlist entry pypi.org:443","bytes_up":0,"bytes_down":0,"duration_sec":0.001}` + "\n")
			env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", harnesstest.Files{"task.toml": allowlistToml}), name, d)
			if _, _, err := harnesstest.Run(context.Background(), a, env); err != nil {
				t.Fatalf("%s on a driver with only its Needs %v: %v", name, a.Needs(), err)
			}
			if got := d.Refused(); len(got) > 0 {
				t.Errorf("%s called %v, which its Needs %v lack", name, got, a.Needs())
			}
			if len(d.Calls()) == 0 || !slices.ContainsFunc(d.Calls(), func(c sandboxfake.Call) bool { return c.Op == "EgressLog" }) {
				t.Errorf("%s: the egress proxy's log was not read: %v", name, d.Calls())
			}
			if (name == string(harness.DockerClaude) || name == string(harness.DockerCodex)) && !slices.ContainsFunc(d.Calls(), func(c sandboxfake.Call) bool { return c.Op == "CallLog" }) {
				t.Errorf("%s: the gateway's model calls were not read", name)
			}
		})
	}
}

// TestCheckAbilities: a driver without ProcessKiller and Freezer refuses
// the agent (both) and the oracle (Freezer, for its verifier), each named
// with the ability; the command, Harbor and BenchFlow arms need nothing
// of it; a driver with every ability passes them all.
func TestCheckAbilities(t *testing.T) {
	lacking := sandbox.AbilitiesOf(&sandboxfake.Driver{Off: []sandbox.Ability{sandbox.AbilityProcessKiller, sandbox.AbilityFreezer}})
	err := harness.CheckAbilities("fake", lacking, []string{"oracle", "agent:x", "command:true", "docker-claude"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`"fake"`, "ProcessKiller (needed by agent:x, docker-claude)", "Freezer (needed by oracle, agent:x, docker-claude)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "command") {
		t.Errorf("%v names the command arm", err)
	}
	if err := harness.CheckAbilities("host", nil, []string{"command:true", "codex", "benchflow:oracle"}); err != nil {
		t.Errorf("host arms on a driver without abilities: %v", err)
	}
	all := sandbox.AbilitiesOf(&sandboxfake.Driver{})
	if err := harness.CheckAbilities("fake", all, []string{"oracle", "agent:x", "docker-probe", "docker-claude-skill:s", "command:true"}); err != nil {
		t.Errorf("a driver with every ability: %v", err)
	}
}

package harness_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
)

// TestArmIdentityInputs: each arm names the host files it brings into its
// cells (agent and skill directories, the pinned CLI binary), relative
// paths resolved against the base directory, and no others; the hash of
// a directory input changes when a file below it changes.
func TestArmIdentityInputs(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	bin := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(bin, []byte("a CLI"), 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{harness.ClaudeBinEnv: bin, harness.CodexBinEnv: bin}
	getenv := func(k string) string { return vars[k] }
	abs := func(p string) string { return filepath.Join(base, p) }
	for name, want := range map[string][]harness.IdentityInput{
		"oracle":                                    nil,
		"command:true":                              nil,
		"docker-probe":                              nil,
		"claude-code":                               nil,
		"benchflow:claude-agent-acp":                nil,
		"agent:agents/a":                            {{Name: "agent dir", Path: abs("agents/a")}},
		"docker-probe:skills/s":                     {{Name: "skill dir", Path: abs("skills/s")}},
		"docker-claude":                             {{Name: "Claude Code CLI", Path: bin}},
		"docker-claude-skill:skills/s/SKILL.md":     {{Name: "Claude Code CLI", Path: bin}, {Name: "skill dir", Path: abs("skills/s")}},
		"docker-codex":                              {{Name: "Codex CLI", Path: bin}},
		"docker-codex-skill:skills/s":               {{Name: "Codex CLI", Path: bin}, {Name: "skill dir", Path: abs("skills/s")}},
		"benchflow-skill:claude-agent-acp:skills/s": {{Name: "skill dir", Path: abs("skills/s")}},
	} {
		got, err := arm(t, name).IdentityInputs(base, getenv)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: identity inputs %+v, want %+v", name, got, want)
		}
	}

	skill := abs("skills/s")
	if err := os.MkdirAll(filepath.Join(skill, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{"SKILL.md": "---\nname: s\ndescription: d\n---\n", "scripts/run.sh": "echo 1\n"} {
		if err := os.WriteFile(filepath.Join(skill, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before, err := harness.HashInput(skill)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "scripts/run.sh"), []byte("echo 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if after, err := harness.HashInput(skill); err != nil || after == before {
		t.Errorf("a changed file under the skill dir left its hash at %s (%v)", after, err)
	}
	if h, err := harness.HashInput(bin); err != nil || len(h) != 64 {
		t.Errorf("hash of the CLI binary %q (%v)", h, err)
	}
	if _, err := harness.HashInput(abs("missing")); err == nil {
		t.Error("a missing input hashed without an error")
	}
}

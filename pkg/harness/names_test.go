package harness_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
)

// TestSeedAliases: the task-runs seed's names run proctor's arms and keep
// the name they were written with; the kind is canonical.
func TestSeedAliases(t *testing.T) {
	for _, c := range []struct{ name, kind, as string }{
		{"docker-oracle", "oracle", "docker-oracle"},
		{"oracle", "oracle", "oracle"},
		{"probe", "docker-probe", "probe"},
		{"docker-probe", "docker-probe", "docker-probe"},
		{"docker-probe:skills/./pdf", "docker-probe", "docker-probe:skills/pdf"},
		{"docker-probe-skill:skills/pdf", "docker-probe-skill", "docker-probe-skill:skills/pdf"},
		{"command:echo {task_name}", "command", "command:echo {task_name}"},
	} {
		r, err := harness.Parse(c.name)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(r.Kind) != c.kind || r.Name != c.as || harness.KindOf(c.name) != c.kind {
			t.Errorf("%s: kind %s name %s KindOf %s, want %s %s", c.name, r.Kind, r.Name, harness.KindOf(c.name), c.kind, c.as)
		}
		if _, err := harness.For(r); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if !harness.IsSetupCheck("docker-oracle") {
		t.Error("docker-oracle is not a setup check")
	}
	if !harness.SameHarness("docker-oracle", "oracle") || !harness.SameHarness("probe", "docker-probe") || harness.SameHarness("docker-probe:a", "docker-probe-skill:a") {
		t.Error("SameHarness does not resolve the aliases")
	}
	_, err := harness.Parse("command")
	if !errors.Is(err, harness.ErrUnknown) || !strings.Contains(err.Error(), "--command-template") {
		t.Errorf("bare command: %v", err)
	}
	// A misspelt harness gets the closest name, its argument kept; a name
	// far from every harness gets only the list.
	for in, want := range map[string]string{
		"docker-claud":                "did you mean docker-claude?",
		"docker-claude-skil:skills/x": "did you mean docker-claude-skill:skills/x?",
		"orcale":                      "did you mean oracle?",
	} {
		if _, err := harness.Parse(in); !errors.Is(err, harness.ErrUnknown) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", in, err, want)
		}
	}
	if _, err := harness.Parse("gpt-agent"); err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "available: oracle") {
		t.Errorf("Parse(gpt-agent) = %v", err)
	}
}

package harness_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
)

// TestEnvironThroughGetenv: Environ lists the process's variables read
// through getenv, which shadows one, unsets another and adds a third
// seen only when named.
func TestEnvironThroughGetenv(t *testing.T) {
	t.Parallel()
	if os.Getenv("PATH") == "" || os.Getenv("HOME") == "" {
		t.Skip("PATH and HOME are not both set in this process")
	}
	getenv := func(k string) string {
		switch k {
		case "PATH":
			return "/shadowed"
		case "HOME":
			return ""
		case "ONLY_IN_GETENV":
			return "yes"
		}
		return os.Getenv(k)
	}
	m := harness.Environ(getenv)
	if m["PATH"] != "/shadowed" {
		t.Errorf("PATH %q, want getenv's", m["PATH"])
	}
	if _, ok := m["HOME"]; ok {
		t.Errorf("HOME %q, want it unset by getenv", m["HOME"])
	}
	if _, ok := m["ONLY_IN_GETENV"]; ok {
		t.Error("a variable only getenv knows was listed without being named")
	}
	if m := harness.Environ(getenv, "ONLY_IN_GETENV", "NOT_SET_ANYWHERE"); m["ONLY_IN_GETENV"] != "yes" || len(m["NOT_SET_ANYWHERE"]) != 0 {
		t.Errorf("named: %q", m["ONLY_IN_GETENV"])
	}
	if m := harness.Environ(nil); m["PATH"] != os.Getenv("PATH") || m["HOME"] != os.Getenv("HOME") {
		t.Error("a nil getenv is not the process's environment")
	}
}

// TestCLIArmsCheckTheGivenEnvironment: the Claude and Codex arms find
// their CLI and provider through the getenv they are given, not the
// process's environment: the same arm passes under one getenv and fails,
// naming the variable, under another.
func TestCLIArmsCheckTheGivenEnvironment(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	bin := filepath.Join(t.TempDir(), "cli")
	if err := os.WriteFile(bin, []byte("a CLI"), 0o755); err != nil {
		t.Fatal(err)
	}
	from := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	home := t.TempDir() // no Claude settings
	for name, c := range map[string]struct {
		good, missing, noKey map[string]string
		wantNoKey            string
	}{
		"docker-claude": {
			good:    map[string]string{harness.ClaudeBinEnv: bin, "ANTHROPIC_API_KEY": "k-given", "HOME": home},
			missing: map[string]string{harness.ClaudeBinEnv: "/nonexistent/claude", "ANTHROPIC_API_KEY": "k-given", "HOME": home},
			noKey:   map[string]string{harness.ClaudeBinEnv: bin, "HOME": home}, wantNoKey: "no provider credential",
		},
		"docker-codex": {
			good:    map[string]string{harness.CodexBinEnv: bin, "OPENAI_API_KEY": "k-given"},
			missing: map[string]string{harness.CodexBinEnv: "/nonexistent/codex", "OPENAI_API_KEY": "k-given"},
			noKey:   map[string]string{harness.CodexBinEnv: bin}, wantNoKey: "OPENAI_API_KEY",
		},
	} {
		a := arm(t, name)
		if err := a.Check(base, from(c.good)); err != nil {
			t.Errorf("%s: %v, want the given CLI and key to pass", name, err)
		}
		if err := a.Check(base, from(c.missing)); err == nil || !strings.Contains(err.Error(), "/nonexistent/") {
			t.Errorf("%s: %v, want an error naming the given CLI path", name, err)
		}
		if err := a.Check(base, from(c.noKey)); err == nil || !strings.Contains(err.Error(), c.wantNoKey) {
			t.Errorf("%s: %v, want %q", name, err, c.wantNoKey)
		}
		in, err := a.IdentityInputs(base, from(c.good))
		if err != nil || len(in) != 1 || in[0].Path != bin {
			t.Errorf("%s: identity inputs %+v (%v), want the given CLI", name, in, err)
		}
	}
}

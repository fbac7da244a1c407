package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// ClaudeVersion is the Claude Code CLI version the docker-claude arms are
// tested against; scripts/setup.sh --claude installs exactly it.
const ClaudeVersion = "2.1.332"

// claudeRel is the CLI's binary under the repository root, as
// scripts/setup.sh --claude installs it: the glibc ELF of the linux-x64
// optional package.
const claudeRel = ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

// Claude returns the absolute path of the pinned Claude Code CLI binary in
// the repository's .cache/claude, after checking that `claude --version`
// prints "2.1.332 (Claude Code)". The repository root is found by walking
// up from the test's working directory to go.mod. When the binary is
// missing or answers with another version, the test is skipped with the
// reason (the fix is `make setup-claude`), or fails when CI is set.
func Claude(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		unavailable(t, "claude: %v", err)
		return ""
	}
	bin := filepath.Join(root, claudeRel)
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		unavailable(t, "claude: the pinned CLI is a linux-x64 binary (this is %s/%s)", runtime.GOOS, runtime.GOARCH)
		return ""
	}
	if _, err := os.Stat(bin); err != nil {
		unavailable(t, "claude: %s is missing (run `make setup-claude`)", claudeRel)
		return ""
	}
	out, err := exec.Command(bin, "--version").Output()
	want := ClaudeVersion + " (Claude Code)"
	if got := strings.TrimSpace(string(out)); err != nil || got != want {
		unavailable(t, "claude: %s --version printed %q (err %v), want %q (run `make setup-claude`)", claudeRel, got, err, want)
		return ""
	}
	return bin
}

// repoRoot is the nearest directory at or above the working directory
// that holds go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// CodexVersion is the Codex CLI version the docker-codex arms are tested
// against; scripts/setup.sh --codex installs exactly it.
const CodexVersion = "0.171.0"

// codexRel is the Codex CLI's binary under the repository root, as
// scripts/setup.sh --codex installs it.
const codexRel = ".cache/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// Codex returns the absolute path of the pinned Codex CLI binary in the
// repository's .cache/codex, after checking that `codex --version` prints
// "codex-cli 0.171.0"; as Claude, a missing or other binary skips the
// test with the reason (the fix is `make setup-codex`), or fails it when
// CI is set.
func Codex(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		unavailable(t, "codex: %v", err)
		return ""
	}
	bin := filepath.Join(root, codexRel)
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		unavailable(t, "codex: the pinned CLI is a linux-x64 binary (this is %s/%s)", runtime.GOOS, runtime.GOARCH)
		return ""
	}
	if _, err := os.Stat(bin); err != nil {
		unavailable(t, "codex: %s is missing (run `make setup-codex`)", codexRel)
		return ""
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.Output()
	want := "codex-cli " + CodexVersion
	if got := strings.TrimSpace(string(out)); err != nil || got != want {
		unavailable(t, "codex: %s --version printed %q (err %v), want %q (run `make setup-codex`)", codexRel, got, err, want)
		return ""
	}
	return bin
}

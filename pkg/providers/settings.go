package providers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
)

// ClaudeSettingsPath is the operator's Claude Code user settings file:
// $CLAUDE_CONFIG_DIR/settings.json, else ~/.claude/settings.json (HOME
// read through getenv); "" when neither can be named.
func ClaudeSettingsPath(getenv func(string) string) string {
	if d := getenv("CLAUDE_CONFIG_DIR"); d != "" {
		return filepath.Join(d, "settings.json")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".claude", "settings.json")
	}
	return ""
}

// maxSettingsFile caps the settings file read (1 MiB).
const maxSettingsFile = 1 << 20

// ClaudeSettingsEnv returns the `env` block of the settings file at p
// (ClaudeSettingsPath): nil and no error when p is "" or the file does
// not exist, or has no env block. A file that cannot be read, is over
// 1 MiB, is not a JSON object, or whose env is not an object of strings
// is an error naming the file and the key; the caller logs it and goes
// on without the block (the CLI itself would refuse such a file).
func ClaudeSettingsEnv(p string) (map[string]string, error) {
	if p == "" {
		return nil, nil
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if fi.Size() > maxSettingsFile {
		return nil, fmt.Errorf("%s: %d bytes, over %d: not read", p, fi.Size(), maxSettingsFile)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %v", p, err)
	}
	raw, ok := doc["env"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s: env is not an object: %v", p, err)
	}
	out := map[string]string{}
	for k, v := range env {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: env.%s is not a string", p, k)
		}
		out[k] = s
	}
	return out, nil
}

// MergeSettingsEnv returns environ with the settings' env over it, as the
// Claude CLI applies its settings' env to its own environment at start
// (a settings value wins over the shell's). Only what passes the
// provider allowlist (Claude) ever reaches a sandbox.
func MergeSettingsEnv(environ, settings map[string]string) map[string]string {
	out := maps.Clone(environ)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, settings)
	return out
}

package task

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestProbeExpect: metadata.probe_expect is read from task.toml and from
// task.md's metadata; a malformed one is a warning naming the file and
// the key, and ProbeExpect's error says the same.
func TestProbeExpect(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "toml", map[string]string{"task.toml": "version = \"1.0\"\n\n[metadata]\ndifficulty = \"hard\"\nprobe_expect = { git_history = \"the task is to recover a lost commit\" }\n"})
	writeFile(t, root, "md/task.md", "---\nmetadata:\n  probe_expect:\n    network: \"  the task downloads its data  \"\n---\nFetch it.\n")
	writeFile(t, root, "md/environment/Dockerfile", "FROM debian:bookworm-slim\n")
	writeTask(t, root, "none", nil)
	writeTask(t, root, "bad", map[string]string{"task.toml": "version = \"1.0\"\n\n[metadata]\nprobe_expect = { git_history = 1 }\n"})
	writeTask(t, root, "flat", map[string]string{"task.toml": "version = \"1.0\"\n\n[metadata]\nprobe_expect = \"git_history\"\n"})
	for name, want := range map[string]map[string]string{
		"toml": {"git_history": "the task is to recover a lost commit"},
		"md":   {"network": "the task downloads its data"},
		"none": nil,
	} {
		tk := mustLoad(t, root, name)
		got, err := tk.ProbeExpect()
		if err != nil || !reflect.DeepEqual(got, want) || len(tk.Warnings) != 0 {
			t.Errorf("%s: %v %v, warnings %v", name, got, err, tk.Warnings)
		}
	}
	for name, want := range map[string]string{
		"bad":  "task.toml: metadata.probe_expect.git_history: the reason must be a non-empty string",
		"flat": "task.toml: metadata.probe_expect: want a table of leak class = \"reason\", got string",
	} {
		tk := mustLoad(t, root, name)
		if _, err := tk.ProbeExpect(); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", name, err, want)
		}
		if !slices.ContainsFunc(tk.Warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
			t.Errorf("%s: warnings %v", name, tk.Warnings)
		}
	}
}

package task

import (
	"reflect"
	"strings"
	"testing"
)

// migrated writes a migrated directory: a task.md that is a BenchFlow
// document beside Harbor's split files, agreeing on everything a run uses
// unless extra overrides a file.
func migrated(t *testing.T, root string, extra map[string]string) *Task {
	t.Helper()
	files := map[string]string{
		"task.md":                "---\nagent:\n  timeout_sec: 300\nverifier:\n  timeout_sec: 120\n  env:\n    MODE: strict\nsandbox:\n  cpus: 2\n  network_mode: no-network\n---\n## prompt\n\nWrite hello.\n",
		"task.toml":              "schema_version = \"1.4\"\n[agent]\ntimeout_sec = 300\n[verifier]\ntimeout_sec = 120\n[verifier.env]\nMODE = \"strict\"\n[environment]\ncpus = 2\nnetwork_mode = \"no-network\"\n",
		"instruction.md":         "Write hello.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"oracle/solve.sh":        "echo hello > /app/out.txt\n",
		"solution/solve.sh":      "echo hello > /app/out.txt\n",
		"verifier/test.sh":       "echo 1 > /logs/verifier/reward.txt\n",
		"tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	for rel, body := range files {
		writeFile(t, root, "m/"+rel, body)
	}
	return mustLoad(t, root, "m")
}

// TestMigratedSplitFiles: a migrated directory loads task.md and warns
// only when the split files would run something else, comparing the
// tables a run uses (budgets, env, resources, network), the prompt and
// the scripts, each difference named with both values.
func TestMigratedSplitFiles(t *testing.T) {
	tk := migrated(t, t.TempDir(), nil)
	if tk.Layout != LayoutBenchFlow || tk.SplitDiffers != nil || len(tk.Warnings) != 0 {
		t.Fatalf("agreeing split files: layout %s, differs %v, warnings %v", tk.Layout, tk.SplitDiffers, tk.Warnings)
	}
	for name, c := range map[string]struct {
		extra map[string]string
		want  []string
	}{
		"budget": {map[string]string{"task.toml": "[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 120\n[verifier.env]\nMODE = \"strict\"\n[environment]\ncpus = 2\nnetwork_mode = \"no-network\"\n"},
			[]string{"agent.timeout_sec: 300 in task.md, 600 in task.toml"}},
		"undeclared budget, env, network": {map[string]string{"task.toml": "[verifier]\ntimeout_sec = 120\n[verifier.env]\nMODE = \"lax\"\n[environment]\ncpus = 2\n"},
			[]string{"agent.timeout_sec: 300 in task.md, unset in task.toml", "agent network: no-network in task.md, public in task.toml",
				"verifier network: no-network in task.md, public in task.toml", `verifier.env: {MODE="strict"} in task.md, {MODE="lax"} in task.toml`,
				"sandbox/environment network: no-network in task.md, public in task.toml"}},
		"prompt": {map[string]string{"instruction.md": "Write goodbye.\n"}, []string{"prompt: the task.md prompt differs from instruction.md"}},
		"script": {map[string]string{"tests/test.sh": "echo 1 > /logs/verifier/reward.txt # always\n"}, []string{"tests/test.sh differs from verifier/test.sh"}},
	} {
		tk := migrated(t, t.TempDir(), c.extra)
		if !reflect.DeepEqual(tk.SplitDiffers, c.want) {
			t.Errorf("%s: differs\n%q\nwant\n%q", name, tk.SplitDiffers, c.want)
		}
		if len(tk.Warnings) != 1 || !strings.Contains(tk.Warnings[0], "task.md and its split files differ") || !strings.Contains(tk.Warnings[0], c.want[0]) {
			t.Errorf("%s: warnings %q", name, tk.Warnings)
		}
	}
}

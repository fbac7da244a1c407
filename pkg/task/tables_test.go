package task

import (
	"reflect"
	"strings"
	"testing"
)

// TestTableReaders: the rules that cross tables hold in both layouts —
// schema_version wins over version, [task].name over task.md's top-level
// name, the agent and verifier inherit the sandbox's network unless they
// set their own, env references are reported under the table name the file
// used, and the deprecated memory string wins over memory_mb with a warning.
func TestTableReaders(t *testing.T) {
	toml := `schema_version = "1.4"
version = "1.0"

[task]
name = "org/from-task"

[environment]
memory = "1G"
memory_mb = 512
allow_internet = true
network_mode = "no-network"

[environment.env]
TOKEN = "${TOKEN}"

[verifier]
network_mode = "public"

[solution.env]
KEY = "${KEY}"
`
	md := `---
version: 1.0
name: from-top
sandbox:
  memory: 1G
  memory_mb: 512
  allow_internet: true
  network_mode: no-network
  env:
    TOKEN: ${TOKEN}
verifier:
  network_mode: public
oracle:
  env:
    KEY: ${KEY}
---
Do it.
`
	for _, tc := range []struct {
		layout, file, body, version, name, sandbox, oracle string
	}{
		{"toml", "task.toml", toml, "1.4", "org/from-task", "environment", "solution"},
		{"markdown", "task.md", md, "1", "from-top", "sandbox", "oracle"},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			root := t.TempDir()
			if tc.file == "task.toml" {
				writeTask(t, root, "t", map[string]string{tc.file: tc.body})
			} else {
				writeFile(t, root, "t/task.md", tc.body)
				writeFile(t, root, "t/environment/Dockerfile", "FROM debian:bookworm-slim\n")
				writeFile(t, root, "t/tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n")
			}
			task := mustLoad(t, root, "t")
			if task.SchemaVersion != tc.version || task.TaskName != tc.name {
				t.Errorf("version %q name %q, want %q %q", task.SchemaVersion, task.TaskName, tc.version, tc.name)
			}
			if task.MemoryMB != 1024 {
				t.Errorf("memory %d MB, want 1024 (the string wins)", task.MemoryMB)
			}
			if task.Network.Mode != NetworkNone || task.AgentNetwork.Mode != NetworkNone || task.VerifierNetwork.Mode != NetworkPublic {
				t.Errorf("networks %v %v %v", task.Network, task.AgentNetwork, task.VerifierNetwork)
			}
			if want := []string{"KEY", "TOKEN"}; !reflect.DeepEqual(task.UnresolvedEnv, want) {
				t.Errorf("unresolved %q, want %q", task.UnresolvedEnv, want)
			}
			warn := strings.Join(task.Warnings, "\n")
			for _, w := range []string{
				tc.oracle + ".env.KEY not forwarded",
				tc.sandbox + ".env.TOKEN not forwarded",
				tc.sandbox + ".memory (1024 MB) and " + tc.sandbox + ".memory_mb disagree",
				tc.sandbox + `.network_mode "no-network" overrides the deprecated allow_internet`,
			} {
				if !strings.Contains(warn, w) {
					t.Errorf("warnings\n%s\nlack %q", warn, w)
				}
			}
		})
	}
}

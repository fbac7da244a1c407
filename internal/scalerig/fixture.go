package scalerig

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeTasks writes n trivial Harbor tasks (s000, s001, ...) under root
// and the simulated agent's directory at agentDir. Nothing in them runs:
// the simulated driver answers the agent's run script and the tests.
func writeTasks(root, agentDir string, n int, sim Sim) error {
	solveBudget := max(600, int(4*sim.Solve.Seconds())+60)
	verifyBudget := max(120, int(4*sim.Verify.Seconds())+60)
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("s%03d", i))
		files := map[string]string{
			"task.toml":              fmt.Sprintf("version = \"1.0\"\n\n[metadata]\ndifficulty = \"easy\"\n\n[agent]\ntimeout_sec = %d\n\n[verifier]\ntimeout_sec = %d\n", solveBudget, verifyBudget),
			"instruction.md":         fmt.Sprintf("Simulated task %d: write hello to /app/out.txt.\n", i),
			"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
			"solution/solve.sh":      "echo hello > /app/out.txt\n",
			"tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
		}
		if err := writeFiles(dir, files); err != nil {
			return err
		}
	}
	return writeFiles(agentDir, map[string]string{
		"agent.toml": "run = \"bash /opt/proctor/agent/" + AgentScript + "\"\n",
		AgentScript:  "# answered by the scale rig's simulated driver\necho '{\"_tag\":\"Finished\"}'\n",
	})
}

func writeFiles(dir string, files map[string]string) error {
	for rel, body := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if filepath.Ext(p) == ".sh" {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			return err
		}
	}
	return nil
}

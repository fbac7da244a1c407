package task

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
)

// splitDiffers compares a migrated directory's split files (task.toml,
// instruction.md, tests/test.sh, solution/solve.sh: what Harbor-layout
// tools run) with the task md loaded from its task.md, on everything a run
// uses: the definition's tables (budgets, image, resources, networks,
// users, env tables, steps), the prompt and the two scripts. It returns one
// entry per difference, in a fixed order, each naming the key and both
// values ("agent.timeout_sec: 30 in task.md, 600 in task.toml"); nil when
// they agree. A task.toml that does not parse is one entry saying so.
func (l *Loader) splitDiffers(md *Task, tree *taskTree) []string {
	r := &configReader{lookup: l.LookupEnv}
	m, pos, err := parseTOMLMapping(normalizeText(tree.contents[TOMLFile]))
	if err != nil {
		return []string{"task.toml does not parse: " + firstLine(err.Error())}
	}
	r.lazyPos = pos
	split := &Task{Name: md.Name, Dir: md.Dir, Layout: LayoutHarbor}
	if err := r.apply(split, m); err != nil {
		return []string{"task.toml is refused: " + firstLine(err.Error())}
	}
	var out []string
	diff := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, fmt.Sprintf("%s: %s in task.md, %s in task.toml", key, show(a), show(b)))
		}
	}
	diff("agent.timeout_sec", declaredBudget(md), declaredBudget(split))
	diff("agent.user", md.AgentUser, split.AgentUser)
	diff("agent network", md.AgentNetwork, split.AgentNetwork)
	diff("verifier.timeout_sec", md.VerifierTimeoutSec, split.VerifierTimeoutSec)
	diff("verifier.user", md.VerifierUser, split.VerifierUser)
	diff("verifier network", md.VerifierNetwork, split.VerifierNetwork)
	diff("verifier.env", envOf(md.VerifierEnv), envOf(split.VerifierEnv))
	diff("verifier.environment_mode", md.VerifierMode, split.VerifierMode)
	diff("oracle/solution env", envOf(md.OracleEnv), envOf(split.OracleEnv))
	diff("sandbox/environment build_timeout_sec", md.BuildTimeoutSec, split.BuildTimeoutSec)
	diff("sandbox/environment docker_image", md.DockerImage, split.DockerImage)
	diff("sandbox/environment workdir", md.Workdir, split.Workdir)
	diff("sandbox/environment os", md.OS, split.OS)
	diff("sandbox/environment cpus", md.CPUs, split.CPUs)
	diff("sandbox/environment memory_mb", md.MemoryMB, split.MemoryMB)
	diff("sandbox/environment storage_mb", md.StorageMB, split.StorageMB)
	diff("sandbox/environment gpus", md.GPUs, split.GPUs)
	diff("sandbox/environment network", md.Network, split.Network)
	diff("sandbox/environment env", envOf(md.SandboxEnv), envOf(split.SandboxEnv))
	diff("unresolved env", md.UnresolvedEnv, split.UnresolvedEnv)
	diff("sandbox/environment skills_dir", md.SkillsDir, split.SkillsDir)
	diff("sandbox/environment mcp_servers", md.MCPServers, split.MCPServers)
	diff("steps", stepNames(md.Steps), stepNames(split.Steps))
	diff("multi_step_reward_strategy", md.MultiStepRewardStrategy, split.MultiStepRewardStrategy)
	if b, ok := tree.contents[InstructionFile]; ok {
		if strings.TrimSpace(normalizeText(b)) != strings.TrimSpace(md.Prompt) {
			out = append(out, "prompt: the task.md prompt differs from instruction.md")
		}
	} else if len(split.Steps) == 0 {
		out = append(out, "prompt: task.md has one, instruction.md is missing")
	}
	for _, p := range [][2]string{{"tests/test.sh", "verifier/test.sh"}, {"solution/solve.sh", "oracle/solve.sh"}} {
		a, ok1 := readTreeFile(tree, p[0])
		b, ok2 := readTreeFile(tree, p[1])
		if ok1 && ok2 && !bytes.Equal(a, b) {
			out = append(out, fmt.Sprintf("%s differs from %s", p[0], p[1]))
		}
	}
	return out
}

// readTreeFile reads the task file rel when the walk found it.
func readTreeFile(tree *taskTree, rel string) ([]byte, bool) {
	p, ok := tree.file(rel)
	if !ok {
		return nil, false
	}
	b, err := os.ReadFile(p)
	return b, err == nil
}

// declaredBudget is the agent budget as a run reads it: the number, or
// nil when the definition declares none.
func declaredBudget(t *Task) any {
	if !t.AgentTimeoutDeclared {
		return nil
	}
	return t.AgentTimeoutSec
}

// envOf is an env table with nil and empty alike.
func envOf(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func stepNames(s []Step) []string {
	var out []string
	for _, st := range s {
		out = append(out, st.Name)
	}
	return out
}

// show prints a compared value briefly: a string quoted, a map with its
// keys sorted, nil, "" and a zero number as "unset", anything else as %v.
func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "unset"
	case int64:
		if x == 0 {
			return "unset"
		}
	case int:
		if x == 0 {
			return "unset"
		}
	case string:
		if x == "" {
			return "unset"
		}
		return fmt.Sprintf("%q", x)
	case map[string]string:
		if x == nil {
			return "none"
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%q", k, x[k])
		}
		b.WriteString("}")
		return b.String()
	case NetworkPolicy:
		if len(x.AllowedHosts) > 0 {
			return x.Mode + " " + strings.Join(x.AllowedHosts, ",")
		}
		return x.Mode
	case []string:
		if x == nil {
			return "none"
		}
		return "[" + strings.Join(x, ", ") + "]"
	case float64:
		if x == 0 {
			return "unset"
		}
		return formatNumber(x)
	}
	return fmt.Sprintf("%v", v)
}

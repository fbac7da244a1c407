package task

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
)

// keySchema is the set of keys a table may hold. A key mapped to nil is a
// value or a free-form table whose keys are not checked ([metadata],
// [verifier.env]); a key mapped to a schema is a table (or, with the "[]"
// entry, a list of tables) whose keys are checked in turn.
type keySchema map[string]keySchema

// listOf is the schema of a list whose entries are tables of entry.
func listOf(entry keySchema) keySchema { return keySchema{"[]": entry} }

// The known keys are the union of what the loader reads, what Harbor's
// TaskConfig defines (schema 1.4: PackageInfo, VerifierConfig, AgentConfig,
// EnvironmentConfig, HealthcheckConfig, TpuSpec, MCPServerConfig,
// VerifierCollectConfig, SolutionConfig, StepConfig, ArtifactConfig), what
// BenchFlow 0.7's TaskConfig and task.md document define (the sandbox and
// oracle names, verifier type/service/judge/memory/hardening/
// pytest_plugins/reward_range/sandbox/sandbox_mode, agent.prompt_prefix,
// sandbox.image/setup_commands/bugswarm_image_tag, the MCP servers' filters,
// oracle timeout_sec, the document and authoring keys), and the authoring
// keys of published multi-turn tasks that Harbor reads past ([task]
// format, workstream, id; [[steps]] dependencies, inherit_prior_session).
// A key Harbor or BenchFlow defines but proctor does not use is known: it
// lands in Task.UncheckedKeys, never in Task.UnknownKeys.
// docs/decisions/2026-12-02-task-keys.md classifies each.
var (
	healthcheckKeys = keySchema{
		"command": nil, "interval_sec": nil, "timeout_sec": nil,
		"start_period_sec": nil, "start_interval_sec": nil, "retries": nil,
	}
	mcpServerKeys = keySchema{"name": nil, "transport": nil, "url": nil, "command": nil, "args": nil,
		// BenchFlow
		"cwd": nil, "env": nil, "headers": nil, "tools": nil, "include_tags": nil, "exclude_tags": nil}
	setupCommandKeys = keySchema{"command": nil, "timeout_sec": nil, "cwd": nil, "env": nil, "user": nil, "service": nil,
		"host_lock": nil, "capture_dir": nil, "capture_dir_b64_env": nil, "capture_dir_b64_env_file_var": nil}
	artifactKeys = keySchema{"source": nil, "destination": nil, "exclude": nil, "service": nil}
	sandboxKeys  = keySchema{
		"build_timeout_sec": nil, "docker_image": nil, "os": nil,
		"cpus": nil, "memory_mb": nil, "storage_mb": nil, "gpus": nil, "gpu_types": nil,
		"tpu":            keySchema{"type": nil, "topology": nil},
		"allow_internet": nil, "network_mode": nil, "allowed_hosts": nil, "egress": nil,
		"mcp_servers": listOf(mcpServerKeys),
		"env":         nil, "skills_dir": nil, "workdir": nil,
		"healthcheck": healthcheckKeys,
		"memory":      nil, "storage": nil, // deprecated size strings
		"docker_flags": nil, // optional in terminal-bench 2's task.toml
		// BenchFlow
		"image": nil, "setup_commands": listOf(setupCommandKeys), "bugswarm_image_tag": nil,
	}
	agentKeys    = keySchema{"timeout_sec": nil, "user": nil, "network_mode": nil, "allowed_hosts": nil, "egress": nil, "prompt_prefix": nil}
	verifierKeys = keySchema{
		"timeout_sec": nil, "env": nil, "user": nil,
		"network_mode": nil, "allowed_hosts": nil, "egress": nil,
		"environment_mode": nil, "environment": sandboxKeys,
		"collect": listOf(keySchema{"command": nil, "service": nil, "timeout_sec": nil, "user": nil}),
		// BenchFlow
		"type": nil, "service": nil, "pytest_plugins": nil, "reward_range": nil,
		"sandbox_mode": nil, "sandbox": sandboxKeys,
		"judge":     keySchema{"model": nil, "rubric_path": nil, "input_dir": nil, "input_type": nil, "context": nil},
		"memory":    keySchema{"expected_skills": nil},
		"hardening": keySchema{"cleanup_conftests": nil},
	}
	taskTableKeys = keySchema{
		"name": nil, "version": nil, "description": nil, "keywords": nil,
		"authors": listOf(keySchema{"name": nil, "email": nil}),
		// published multi-turn tasks' authoring keys (Harbor reads past them)
		"format": nil, "workstream": nil, "id": nil,
	}
	solutionKeys = keySchema{"env": nil, "timeout_sec": nil}

	// tomlKeys is a task.toml: Harbor's TaskConfig, plus BenchFlow's names
	// for the sandbox and oracle tables and its reward key.
	tomlKeys = keySchema{
		"schema_version": nil, "version": nil, "source": nil,
		"task": taskTableKeys, "metadata": nil,
		"verifier": verifierKeys, "agent": agentKeys,
		"environment": sandboxKeys, "sandbox": sandboxKeys,
		"solution": solutionKeys, "oracle": solutionKeys,
		"multi_step_reward_strategy": nil, "artifacts": listOf(artifactKeys), "reward": nil,
		"steps": listOf(keySchema{
			"name": nil, "min_reward": nil, "healthcheck": healthcheckKeys,
			"agent": agentKeys, "verifier": verifierKeys,
			"artifacts": listOf(artifactKeys),
			// published multi-turn tasks
			"dependencies": nil, "inherit_prior_session": nil,
		}),
	}
	// markdownKeys is task.md frontmatter: every top-level key BenchFlow 0.7
	// knows (benchflowKeys) plus Harbor's older version key.
	markdownKeys = func() keySchema {
		m := keySchema{}
		for k := range benchflowKeys {
			m[k] = tomlKeys[k] // nil for the document and authoring keys: free-form
		}
		m["version"] = nil
		return m
	}()
)

// UnknownKey is a definition key that neither proctor, Harbor nor BenchFlow
// defines: most often a misspelling, which would otherwise be ignored
// without a word (an [enviroment] table's network_mode never applies).
type UnknownKey struct {
	// Key is the dotted path ("enviroment", "verifier.timout_sec",
	// "task.authors[1].orcid").
	Key string `json:"key"`
	// Line is the 1-based line in the definition file, or 0 when unknown.
	Line int `json:"line,omitempty"`
	// Table is true when the value is a table (a mapping in task.md).
	Table bool `json:"table,omitempty"`
	// Suggestion is the closest known name, as a dotted path, or "".
	Suggestion string `json:"suggestion,omitempty"`
}

// String renders "unknown table enviroment (line 3; did you mean
// environment?)".
func (u UnknownKey) String() string {
	kind := "key"
	if u.Table {
		kind = "table"
	}
	var notes []string
	if u.Line > 0 {
		notes = append(notes, fmt.Sprintf("line %d", u.Line))
	}
	if u.Suggestion != "" {
		notes = append(notes, "did you mean "+u.Suggestion+"?")
	}
	s := "unknown " + kind + " " + u.Key
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, "; ") + ")"
	}
	return s
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

// findUnknownKeys walks m against schema and returns every key it does not
// know, sorted by path. A value whose shape does not match the schema (a
// string where a table is expected) is the typed readers' business and is
// not descended into.
//
// markdown picks the names a suggestion uses for tables known by two
// names: sandbox and oracle in task.md, environment and solution in
// task.toml.
func findUnknownKeys(m map[string]any, schema keySchema, markdown bool, line func(string) int) []UnknownKey {
	homes := []string{"environment", "agent", "verifier", "task", "solution"}
	if markdown {
		homes = []string{"sandbox", "agent", "verifier", "task", "oracle"}
	}
	var out []UnknownKey
	var walk func(m map[string]any, s keySchema, path string)
	walk = func(m map[string]any, s keySchema, path string) {
		for _, k := range sortedKeys(m) {
			v := m[k]
			p := joinKey(path, k)
			sub, known := s[k]
			if !known {
				_, isTable := v.(map[string]any)
				out = append(out, UnknownKey{Key: p, Line: line(p), Table: isTable, Suggestion: suggestKey(k, path, s, schema, homes)})
				continue
			}
			if sub == nil {
				continue
			}
			switch x := v.(type) {
			case map[string]any:
				walk(x, sub, p)
			case []any:
				if entry, ok := sub["[]"]; ok {
					for i, e := range x {
						if em, ok := e.(map[string]any); ok {
							walk(em, entry, fmt.Sprintf("%s[%d]", p, i))
						}
					}
				}
			}
		}
	}
	walk(m, schema, "")
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// suggestKey returns the known name closest to key: a name of the same
// table within an edit distance of about a third of its length, or a name
// that starts with key or that key starts with (timeout for timeout_sec);
// case is ignored and "-" read as "_". Else, for a top-level key, the first table of
// homes that holds key exactly, as when network_mode is written above the
// [environment] header.
func suggestKey(key, table string, s, root keySchema, homes []string) string {
	norm := strings.ReplaceAll(strings.ToLower(key), "-", "_")
	best, bestD := "", 0
	for _, cand := range sortedKeys(toAny(s)) {
		if cand == "[]" {
			continue
		}
		d := levenshtein.ComputeDistance(norm, cand)
		limit := max(1, len(cand)/3)
		if len(cand) >= 5 {
			limit = max(2, limit) // a swap of two letters (emial) is 2 edits
		}
		close := d <= limit ||
			(len(norm) >= 4 && (strings.HasPrefix(cand, norm) || strings.HasPrefix(norm, cand)))
		if close && (best == "" || d < bestD) {
			best, bestD = cand, d
		}
	}
	if best != "" {
		return joinKey(table, best)
	}
	if table != "" {
		return ""
	}
	for _, t := range homes {
		if sub := root[t]; sub != nil {
			if _, ok := sub[key]; ok {
				return t + "." + key
			}
		}
	}
	return ""
}

func toAny(s keySchema) map[string]any {
	m := make(map[string]any, len(s))
	for k := range s {
		m[k] = nil
	}
	return m
}

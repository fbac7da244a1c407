package task

import (
	"fmt"
	"sort"
	"strings"
)

// Default budgets in seconds, as Harbor's TaskConfig defaults them.
const (
	DefaultAgentTimeoutSec    = 600.0
	DefaultVerifierTimeoutSec = 600.0
	DefaultBuildTimeoutSec    = 600.0
)

// benchflowKeys are the top-level frontmatter keys BenchFlow 0.7 knows: its
// task config fields, the document keys, the authoring keys and the legacy
// environment table. A task.md beside a task.toml loads as a task only when
// every top-level key is one of these (see isBenchFlowDocument).
var benchflowKeys = map[string]bool{
	// task config fields
	"schema_version": true, "task": true, "metadata": true, "verifier": true,
	"agent": true, "sandbox": true, "solution": true, "oracle": true,
	"source": true, "reward": true, "multi_step_reward_strategy": true,
	"steps": true, "artifacts": true,
	// document keys
	"agents": true, "benchflow": true, "scenes": true, "user": true,
	// authoring keys
	"image": true, "name": true, "profile": true, "profiles": true,
	// legacy sandbox table
	"environment": true,
}

// configReader interprets a parsed task.toml or task.md frontmatter. pos
// gives lines for errors; unchecked collects the keys read past.
type configReader struct {
	pos       positions
	lazyPos   func() positions // builds pos on first use when set
	markdown  bool
	strict    bool // unknown keys are an error, not a warning
	lookup    LookupEnv
	unchecked []string
	warnings  []string
}

func (r *configReader) errf(key, format string, args ...any) *fileError {
	if r.pos == nil && r.lazyPos != nil {
		r.pos = r.lazyPos()
	}
	return errAt(r.pos.line(key), key, format, args...)
}

func (r *configReader) skip(key string) { r.unchecked = append(r.unchecked, key) }

// apply fills t from the definition m. Errors name the key and its line.
// m is read table by table into a taskConfig (tables.go) in key order, so
// the first error is the same on every run; the config then fills t and
// the table-crossing rules (network inheritance, env resolution, unknown
// keys) run on it.
func (r *configReader) apply(t *Task, m map[string]any) error {
	if err := r.refuseShorthands(m); err != nil {
		return err
	}
	c := newTaskConfig()
	if err := readTable(r, c, "", m, topFields); err != nil {
		return err
	}
	if err := r.fill(t, c); err != nil {
		return err
	}
	if t.MultiRole {
		r.warnings = append(r.warnings, "multi-role document (agents/scenes/user): runs as one agent with the base prompt")
	}
	if err := r.checkKeys(t, m); err != nil {
		return err
	}
	sort.Strings(r.unchecked)
	return nil
}

// refuseShorthands refuses what no table reader can express: BenchFlow's
// authoring shorthands in task.md (they expand into defaults proctor does
// not reproduce; refuse them rather than run something else) and a table
// declared under both its names.
func (r *configReader) refuseShorthands(m map[string]any) error {
	if r.markdown {
		if _, ok := m["image"]; ok {
			return r.errf("image", "the BenchFlow shorthand image: is not supported; set sandbox.docker_image instead")
		}
		for _, k := range []string{"profile", "profiles"} {
			if _, ok := m[k]; ok {
				return r.errf(k, "BenchFlow authoring profiles (%s:) are not supported; write out the tables the profile would fill", k)
			}
		}
		for _, k := range []string{"verifier", "oracle"} {
			if v, ok := m[k]; ok {
				if _, isStr := v.(string); isStr {
					return r.errf(k, "the BenchFlow path shorthand %s: <path> is not supported; put the files in %s/ and write %s as a mapping", k, k, k)
				}
			}
		}
	}
	if _, ok := m["environment"]; ok {
		if _, ok := m["sandbox"]; ok {
			return r.errf("sandbox", "both a sandbox table and the legacy environment table are declared; keep only sandbox")
		}
	}
	if _, ok := m["solution"]; ok {
		if _, ok := m["oracle"]; ok {
			return r.errf("oracle", "both an oracle table and the legacy solution table are declared; keep only oracle")
		}
	}
	return nil
}

// checkKeys fills t.UnknownKeys with the keys of m that neither proctor,
// Harbor nor BenchFlow defines, warns about each, and drops them from the
// unchecked keys. In strict mode any unknown key is an error naming the
// first one's key and line and listing them all.
func (r *configReader) checkKeys(t *Task, m map[string]any) error {
	schema := tomlKeys
	if r.markdown {
		schema = markdownKeys
	}
	unknown := findUnknownKeys(m, schema, r.markdown, func(p string) int {
		if r.pos == nil && r.lazyPos != nil {
			r.pos = r.lazyPos()
		}
		if l, ok := r.pos[p]; ok {
			return l
		}
		return r.pos.line(indexRE.ReplaceAllString(p, "")) // [[task.authors]] keys are indexed without [i]
	})
	if len(unknown) == 0 {
		return nil
	}
	if r.strict {
		parts := make([]string, len(unknown))
		for i, u := range unknown {
			parts[i] = u.String()
		}
		e := errAt(unknown[0].Line, unknown[0].Key, "%s (unknown keys are refused in strict mode)", strings.Join(parts, "; "))
		e.err = ErrUnknownKeys
		return e
	}
	drop := map[string]bool{}
	for _, u := range unknown {
		drop[u.Key] = true
		r.warnings = append(r.warnings, u.String()+": ignored")
	}
	kept := r.unchecked[:0]
	for _, k := range r.unchecked {
		if !drop[k] {
			kept = append(kept, k)
		}
	}
	r.unchecked = kept
	t.UnknownKeys = unknown
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isBenchFlowDocument reports whether frontmatter fm makes a task.md a
// BenchFlow document: every top-level key is one BenchFlow 0.7 knows
// (benchflowKeys) and task, metadata, agent and the sandbox table
// (sandbox or environment) are mappings (an empty value counts as an empty
// mapping, as BenchFlow reads it). why says which rule failed.
func isBenchFlowDocument(fm map[string]any) (ok bool, why string) {
	for _, k := range sortedKeys(fm) {
		if !benchflowKeys[k] {
			return false, fmt.Sprintf("top-level key %q is not one BenchFlow knows", k)
		}
	}
	for _, k := range []string{"task", "metadata", "agent", "sandbox", "environment"} {
		v, present := fm[k]
		if !present || v == nil {
			continue
		}
		if _, isMap := v.(map[string]any); !isMap {
			return false, fmt.Sprintf("%s is %s, not a mapping", k, kindOf(v))
		}
	}
	return true, ""
}

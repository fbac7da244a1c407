package task

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
)

// LookupEnv reads a variable of proctor's own environment; os.LookupEnv by
// default. Tests inject their own so they stay hermetic.
type LookupEnv func(name string) (value string, ok bool)

// envRefRE matches ${NAME} and ${NAME:-default}, the template syntax Harbor
// documents for env tables (the default runs up to the first "}").
var envRefRE = regexp.MustCompile(`\$\{([^}:]*)(:-([^}]*))?\}`)

// envResult is one env table after resolution.
type envResult struct {
	values     map[string]string
	unresolved []string
	warnings   []string
}

// resolveEnv resolves one env table ([verifier.env], [solution.env] /
// [oracle.env], or the sandbox table's env). The rules:
//
//   - a string without ${...} is forwarded as written;
//   - an integer, float or boolean is forwarded as its TOML/YAML text
//     (3, 1.5, true);
//   - ${NAME:-default} is replaced by default when NAME is unset or empty in
//     proctor's environment (shell `:-` semantics); when NAME is set to a
//     non-empty value the key is unresolved, because proctor never forwards
//     its own environment into a task (a run's inputs are the task files) and
//     using the default would silently ignore what the operator set;
//   - ${NAME} (no default) is never resolved, set or not;
//   - null, lists and tables are unresolved.
//
// Unresolved keys are left out of values and listed in unresolved; a cell
// of such a task is errored before any image is built (DESIGN §3).
func resolveEnv(table map[string]any, path string, lookup LookupEnv) envResult {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	res := envResult{values: map[string]string{}}
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := table[k].(type) {
		case string:
			s, why := expandEnvRefs(v, lookup)
			if why != "" {
				res.unresolved = append(res.unresolved, k)
				res.warnings = append(res.warnings, fmt.Sprintf("%s.%s not forwarded: %s", path, k, why))
				continue
			}
			res.values[k] = s
		case bool:
			res.values[k] = strconv.FormatBool(v)
		case int64:
			res.values[k] = strconv.FormatInt(v, 10)
		case uint64:
			res.values[k] = strconv.FormatUint(v, 10)
		case float64:
			res.values[k] = strconv.FormatFloat(v, 'f', -1, 64)
		case nonFinite:
			res.values[k] = string(v)
		default:
			res.unresolved = append(res.unresolved, k)
			res.warnings = append(res.warnings, fmt.Sprintf("%s.%s not forwarded: the value is %s, not a scalar", path, k, kindOf(v)))
		}
	}
	if len(res.values) == 0 {
		res.values = nil
	}
	return res
}

// expandEnvRefs applies the ${...} rules to one string; why is non-empty
// when the value cannot be forwarded.
func expandEnvRefs(s string, lookup LookupEnv) (out, why string) {
	matches := envRefRE.FindAllStringSubmatchIndex(s, -1)
	if matches == nil {
		return s, ""
	}
	var b []byte
	last := 0
	for _, m := range matches {
		name := s[m[2]:m[3]]
		hasDefault := m[4] >= 0
		if !hasDefault {
			return "", fmt.Sprintf("${%s} refers to proctor's environment, which is never forwarded: write the value itself, or ${%s:-value} for a default; a cell given this table is errored (unresolved_env)", name, name)
		}
		if v, ok := lookup(name); ok && v != "" {
			return "", fmt.Sprintf("%s is set in proctor's environment, which is never forwarded; unset it to use the default of ${%s:-...}", name, name)
		}
		b = append(b, s[last:m[0]]...)
		b = append(b, s[m[6]:m[7]]...)
		last = m[1]
	}
	b = append(b, s[last:]...)
	return string(b), ""
}

// mergeUnresolved returns the sorted union of key lists.
func mergeUnresolved(lists ...[]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lists {
		for _, k := range l {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

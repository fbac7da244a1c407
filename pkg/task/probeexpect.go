package task

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// ProbeExpectKey is the [metadata] key (task.md: the metadata mapping)
// where a task declares the isolation probe's leak classes it expects
// open, each with its reason:
//
//	[metadata]
//	probe_expect = { git_history = "the task is to recover a lost commit" }
//
// Harbor and BenchFlow read [metadata] as free-form, so the task stays
// theirs as it is.
const ProbeExpectKey = "probe_expect"

// ProbeExpect returns metadata.probe_expect as class → reason; nil when
// the task declares none. The error names the definition file and the
// key: probe_expect that is not a table, or a reason that is not a
// non-empty string. Whether each key is a leak class is the probe's to
// say (isoprobe.CheckExpect).
func (t *Task) ProbeExpect() (map[string]string, error) {
	raw, ok := t.Metadata[ProbeExpectKey]
	if !ok {
		return nil, nil
	}
	where := path.Base(t.DefinitionFile) + ": metadata." + ProbeExpectKey
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a table of leak class = \"reason\", got %T", where, raw)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(m))
	for _, k := range keys {
		s, ok := m[k].(string)
		if !ok || strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("%s.%s: the reason must be a non-empty string", where, k)
		}
		out[k] = strings.TrimSpace(s)
	}
	return out, nil
}

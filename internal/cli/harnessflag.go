package cli

import (
	"fmt"
	"strings"

	"github.com/proctor-eval/proctor/pkg/harness"
)

// harnessList is the value of --harnesses. The flag may be repeated; each
// value is a comma-separated list of harness references, except that a
// command:<template> entry runs to the end of its value, commas and quotes
// included, so a template is never split or CSV-parsed. A value whose
// command entry is followed by a comma and something that reads as another
// harness (",oracle", ",agent:x") is refused as ambiguous, with a pointer
// to --command-template and to repeating --harnesses.
type harnessList struct {
	vals []string
	set  bool // the default gives way to the first value given
}

func (h *harnessList) String() string { return strings.Join(h.vals, ",") }

func (h *harnessList) Type() string { return "harnesses" }

func (h *harnessList) Set(v string) error {
	refs, err := splitHarnesses(v)
	if err != nil {
		return err
	}
	if !h.set {
		h.vals, h.set = nil, true
	}
	h.vals = append(h.vals, refs...)
	return nil
}

// splitHarnesses splits one --harnesses value (see harnessList).
func splitHarnesses(v string) ([]string, error) {
	var out []string
	rest := v
	for rest != "" {
		item, tail, more := strings.Cut(rest, ",")
		if harness.ArgRunsToEnd(item) {
			cmd := strings.TrimSpace(rest)
			if more {
				for _, seg := range strings.Split(tail, ",") {
					if looksLikeHarness(seg) {
						return nil, fmt.Errorf("%q: a command: entry runs to the end of its --harnesses value, so %q would be part of the command; "+
							"give each harness its own --harnesses (--harnesses %s --harnesses 'command:...'), or the command with --command-template",
							v, strings.TrimSpace(seg), strings.TrimSpace(seg))
					}
				}
			}
			return append(out, cmd), nil
		}
		if trimmed := strings.TrimSpace(item); trimmed != "" {
			out = append(out, trimmed)
		}
		if !more {
			break
		}
		rest = tail
	}
	return out, nil
}

// looksLikeHarness reports whether s reads as a harness reference: a
// registered kind alone (oracle) or followed by ":" (agent:x, command:y).
func looksLikeHarness(s string) bool {
	s = strings.TrimSpace(s)
	kind, _, _ := strings.Cut(s, ":")
	for _, in := range harness.Registry() {
		if string(in.Kind) == kind {
			return true
		}
	}
	return false
}

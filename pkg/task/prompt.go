package task

import (
	"regexp"
	"strings"
)

// sectionRE is BenchFlow's reserved-heading pattern for task.md bodies.
var sectionRE = regexp.MustCompile(`(?im)^##\s+(prompt|role:[A-Za-z0-9_.-]+|scene:[A-Za-z0-9_.-]+|user-persona)\s*$`)

// escapedSectionRE matches a reserved heading escaped with a backslash,
// which BenchFlow writes to keep a heading inside prompt text.
var escapedSectionRE = regexp.MustCompile(`(?im)^\\(##\s+(?:prompt|role:[A-Za-z0-9_.-]+|scene:[A-Za-z0-9_.-]+|user-persona)\s*)$`)

// promptSections is a task.md body split as BenchFlow splits it.
type promptSections struct {
	prompt  string
	omitted []string // keys of the sections left out ("role:reviewer", "user-persona")
}

// extractPrompt returns the agent's prompt from a task.md body, as BenchFlow
// does: with no reserved heading the prompt is the whole body; otherwise it
// is the `## prompt` section, or, without one, the text before the first
// reserved heading. `## role:<name>`, `## scene:<name>` and `## user-persona`
// sections never reach the agent. Headings are matched case-insensitively;
// in a body with sections, `\## prompt` is an escaped heading that stays in
// the text (unescaped), as BenchFlow renders prompts holding headings. The
// result is trimmed of surrounding whitespace. A section heading repeated is
// an error naming its line (bodyLine is the file line the body starts on).
func extractPrompt(body string, bodyLine int) (promptSections, error) {
	matches := sectionRE.FindAllStringSubmatchIndex(body, -1)
	if matches == nil {
		return promptSections{prompt: strings.TrimSpace(body)}, nil
	}
	var ps promptSections
	preamble := strings.TrimSpace(body[:matches[0][0]])
	sections := map[string]string{}
	for i, m := range matches {
		key := normalizeSectionKey(strings.TrimSpace(body[m[2]:m[3]]))
		if _, dup := sections[key]; dup {
			line := bodyLine + strings.Count(body[:m[0]], "\n")
			return promptSections{}, errAt(line, "", "duplicate section ## %s", key)
		}
		end := len(body)
		if i+1 < len(matches) {
			end = matches[i+1][0]
		}
		sections[key] = strings.TrimSpace(body[m[1]:end])
		if key != "prompt" {
			ps.omitted = append(ps.omitted, key)
		}
	}
	p, ok := sections["prompt"]
	if !ok {
		p = preamble
	}
	ps.prompt = unescapeSections(strings.TrimSpace(p))
	return ps, nil
}

func normalizeSectionKey(k string) string {
	prefix, suffix, found := strings.Cut(k, ":")
	if found {
		return strings.ToLower(prefix) + ":" + suffix
	}
	return strings.ToLower(prefix)
}

func unescapeSections(s string) string {
	if !strings.Contains(s, `\##`) {
		return s
	}
	return escapedSectionRE.ReplaceAllString(s, "$1")
}

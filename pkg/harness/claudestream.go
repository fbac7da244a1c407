package harness

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/proctor-eval/proctor/pkg/events"
)

// claudeEvent is one event a stream-json line makes.
type claudeEvent struct {
	Type events.Type
	Data any
}

// claudeStream folds Claude Code's `--output-format stream-json --verbose`
// lines (one JSON object a line: system/init, assistant, user, result,
// system/api_retry...) into events and the row's metrics. It is fed the
// same lines twice over a solve, live and from the collected file, with a
// fresh state each time, so the events of a line are the same either
// way. Not safe for concurrent use.
type claudeStream struct {
	// treatment is the skill name of the skill arm ("" none).
	treatment string

	init     map[string]any
	result   map[string]any
	msgs     map[string]bool // assistant message ids seen
	skillIDs map[string]string
	rejected map[string]bool
	tools    map[string]int
	lines    int
	badLines int
}

func newClaudeStream(treatment string) *claudeStream {
	return &claudeStream{treatment: treatment, msgs: map[string]bool{}, skillIDs: map[string]string{}, rejected: map[string]bool{}, tools: map[string]int{}}
}

// line folds one (already redacted) line and returns its events: Started
// at the init event (with its model), per assistant message a Usage with
// its model the first time its id appears (token counts come with the
// result: the streamed assistant events carry message_start's, which
// undercount output), a Message per text block and a ToolCall per
// tool_use block; the result event gives the totals as one Usage (tokens,
// total_cost_usd, num_turns as calls) and its text as the response
// Message. A line that is not a JSON object is counted and skipped.
func (s *claudeStream) line(text string) []claudeEvent {
	s.lines++
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		s.badLines++
		return nil
	}
	var out []claudeEvent
	switch m["type"] {
	case "system":
		if m["subtype"] == "init" && s.init == nil {
			s.init = m
			out = append(out, claudeEvent{events.Started, events.StartedData{Model: sval(m["model"])}})
		}
	case "assistant":
		msg, _ := m["message"].(map[string]any)
		id, model := sval(msg["id"]), sval(msg["model"])
		if id != "" && !s.msgs[id] && model != "<synthetic>" {
			s.msgs[id] = true
			out = append(out, claudeEvent{events.Usage, events.UsageData{Model: model}})
		}
		content, _ := msg["content"].([]any)
		for _, c := range content {
			b, _ := c.(map[string]any)
			switch b["type"] {
			case "text":
				if t := sval(b["text"]); t != "" {
					out = append(out, claudeEvent{events.Message, events.MessageData{Role: "assistant", Text: t}})
				}
			case "tool_use":
				name := sval(b["name"])
				s.tools[name]++
				if name == "Skill" {
					in, _ := b["input"].(map[string]any)
					s.skillIDs[sval(b["id"])] = sval(in["skill"])
				}
				out = append(out, claudeEvent{events.ToolCall, events.ToolCallData{Name: name, Input: b["input"]}})
			}
		}
	case "user":
		msg, _ := m["message"].(map[string]any)
		content, _ := msg["content"].([]any)
		for _, c := range content {
			b, _ := c.(map[string]any)
			if b["type"] == "tool_result" && b["is_error"] == true {
				if id := sval(b["tool_use_id"]); id != "" {
					s.rejected[id] = true
				}
			}
		}
	case "result":
		if s.result != nil {
			return nil
		}
		s.result = m
		u := events.UsageData{Model: s.model()}
		if us, ok := m["usage"].(map[string]any); ok {
			u.PromptTokens = count(us["input_tokens"])
			u.CompletionTokens = count(us["output_tokens"])
			u.CacheReadTokens = count(us["cache_read_input_tokens"])
			u.CacheWriteTokens = count(us["cache_creation_input_tokens"])
		}
		if c, ok := m["total_cost_usd"].(float64); ok {
			u.CostUSD = &c
		}
		// Each assistant message's Usage counted one call already (the
		// projection counts a Usage without calls as one): the result adds
		// the rest of num_turns, so n_calls is num_turns, and a stream cut
		// before its result still counts the replies it got.
		if n := count(m["num_turns"]); n != nil {
			rest := max(*n-int64(len(s.msgs)), 0)
			u.Calls = &rest
		}
		out = append(out, claudeEvent{events.Usage, u})
		if r := responseTail(sval(m["result"])); r != "" {
			out = append(out, claudeEvent{events.Message, events.MessageData{Role: "response", Text: r}})
		}
	}
	return out
}

// failed reports whether the result says the run failed: is_error true
// or a subtype starting error_ (error_max_turns, error_during_execution),
// whatever the exit code.
func (s *claudeStream) failed() bool {
	return s.result != nil && (s.result["is_error"] == true || strings.HasPrefix(sval(s.result["subtype"]), "error_"))
}

// attempted reports whether the run made an attempt: some output tokens
// and more than one turn (DESIGN §5: an error before any attempt, such as
// rejected credentials or an unknown model, is a solver_error).
func (s *claudeStream) attempted() bool {
	if s.result == nil {
		return len(s.msgs) > 0
	}
	out := int64(0)
	if us, ok := s.result["usage"].(map[string]any); ok {
		if n := count(us["output_tokens"]); n != nil {
			out = *n
		}
	}
	turns := count(s.result["num_turns"])
	return out > 0 && (turns == nil || *turns > 1)
}

// model is the run's model: the init event's, else the modelUsage entry
// that cost most (ties: the name first in order).
func (s *claudeStream) model() string {
	if s.result != nil {
		mu, _ := s.result["modelUsage"].(map[string]any)
		best, bestCost := "", -1.0
		for _, name := range slices.Sorted(maps.Keys(mu)) {
			e, _ := mu[name].(map[string]any)
			c, _ := e["costUSD"].(float64)
			if c > bestCost {
				best, bestCost = name, c
			}
		}
		if best != "" {
			return best
		}
	}
	if s.init != nil {
		return sval(s.init["model"])
	}
	return ""
}

// offered is the init event's list under key (plugins: their names).
func (s *claudeStream) offered(key string) []string {
	if s.init == nil {
		return nil
	}
	l, _ := s.init[key].([]any)
	out := []string{}
	for _, v := range l {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case map[string]any:
			out = append(out, sval(v["name"]))
		}
	}
	return out
}

// pluginOffered reports whether the init event lists the skill plugin.
func (s *claudeStream) pluginOffered() bool {
	return slices.Contains(s.offered("plugins"), skillPluginName)
}

// isTreatment reports whether a Skill call's skill names the treatment
// ("<name>" or "abskill:<name>").
func (s *claudeStream) isTreatment(skill string) bool {
	return s.treatment != "" && (skill == s.treatment || skill == skillPluginName+":"+s.treatment)
}

// metrics are the row's agent_reported values of a Claude Code run.
func (s *claudeStream) metrics(truncated bool) map[string]any {
	m := map[string]any{
		"offered_skills":  s.offered("skills"),
		"offered_plugins": s.offered("plugins"),
		"tool_calls":      s.tools,
	}
	if truncated {
		m["stream_truncated"] = true
	}
	if s.init != nil {
		if v, ok := s.init["claude_code_version"]; ok {
			m["claude_code_version"] = v
		}
		if v, ok := s.init["plugin_errors"]; ok {
			m["plugin_errors"] = v
		}
	}
	if _, ok := m["plugin_errors"]; !ok {
		m["plugin_errors"] = []any{}
	}
	unexpected := []string{}
	invocations := 0
	for id, skill := range s.skillIDs {
		switch {
		case s.isTreatment(skill):
			if !s.rejected[id] {
				invocations++
			}
		case !slices.Contains(unexpected, skill):
			unexpected = append(unexpected, skill)
		}
	}
	slices.Sort(unexpected)
	m["unexpected_skills"] = unexpected
	if s.treatment != "" {
		m["treatment"] = s.treatment
		m["n_skill_invocations"] = invocations
	}
	if r := s.result; r != nil {
		m["terminal_reason"] = r["terminal_reason"]
		m["subtype"] = r["subtype"]
		m["is_error"] = r["is_error"]
		m["n_calls"] = r["num_turns"]
		m["cost_usd"] = r["total_cost_usd"]
		if v, ok := r["duration_ms"].(float64); ok {
			m["latency_sec"] = math.Round(v) / 1000
		}
		if v, ok := r["ttft_ms"].(float64); ok {
			m["ttft_sec"] = math.Round(v) / 1000
		}
		if v := r["api_error_status"]; v != nil {
			m["api_error_status"] = v
		}
		mu, _ := r["modelUsage"].(map[string]any)
		m["models_used"] = slices.Sorted(maps.Keys(mu))
		m["model"] = s.model()
	}
	return m
}

func count(v any) *int64 {
	f, ok := v.(float64)
	if !ok || f < 0 {
		return nil
	}
	return events.Count(int64(f))
}

// sval is v when it is a string, else "".
func sval(v any) string {
	s, _ := v.(string)
	return s
}

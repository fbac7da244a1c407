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
	// treatment is the skill name of the skill arm ("" none); offeredAs
	// the name the CLI offers it under (SkillOfferedName).
	treatment, offeredAs string

	init   map[string]any
	result map[string]any // the last result event
	// results counts the result events: the CLI writes one more after
	// each turn a background task's notification starts. turns, cost and
	// latencyMs add up over them (cost is cumulative: the last result's).
	results   int
	turns     int64
	cost      *float64
	latencyMs float64
	ttftMs    *float64
	msgs      map[string]bool // assistant message ids seen
	skillIDs  map[string]string
	rejected  map[string]bool
	tools     map[string]int
	lines     int
	badLines  int
	// attempt is set by the first assistant message of the model with
	// output: a non-blank text or thinking block, or a tool_use.
	attempt bool
	// apiError is the error kind of the last message the CLI made up
	// for a failed API call (model "<synthetic>", top-level "error":
	// rate_limit, overloaded, server_error, authentication_failed...).
	apiError string
	// muSum is the sum over the models of the last result's modelUsage
	// that had token counts (cumulative over the session: helper models
	// included); session sums the results' own usage, the parent
	// session's alone.
	muSum, session tokenSums
	// pending is the usage of the model's messages since the last result
	// (none counted them yet), one entry per message id in order.
	pending []pendingUsage
}

// tokenSums are token counts by kind.
type tokenSums struct{ input, output, cacheRead, cacheWrite int64 }

// modelUsageSums sums a result's modelUsage over its models (inputTokens,
// outputTokens, cacheReadInputTokens, cacheCreationInputTokens); ok false
// when no model carries a token count.
func modelUsageSums(mu map[string]any) (sum tokenSums, ok bool) {
	for _, v := range mu {
		e, _ := v.(map[string]any)
		for key, dst := range map[string]*int64{
			"inputTokens": &sum.input, "outputTokens": &sum.output,
			"cacheReadInputTokens": &sum.cacheRead, "cacheCreationInputTokens": &sum.cacheWrite,
		} {
			if n := count(e[key]); n != nil {
				*dst += *n
				ok = true
			}
		}
	}
	return sum, ok
}

// pendingUsage is one assistant message's own usage (message_start's, as
// the CLI repeats it on each of the message's content blocks).
type pendingUsage struct {
	id                                   string
	model                                string
	input, output, cacheRead, cacheWrite int64
}

func newClaudeStream(treatment string) *claudeStream {
	s := &claudeStream{treatment: treatment, msgs: map[string]bool{}, skillIDs: map[string]string{}, rejected: map[string]bool{}, tools: map[string]int{}}
	if treatment != "" {
		s.offeredAs = SkillOfferedName(treatment)
	}
	return s
}

// line folds one (already redacted) line and returns its events: Started
// at the init event (with its model), per assistant message a Usage with
// its model the first time its id appears (token counts come with the
// result: the streamed assistant events carry message_start's, which
// undercount output), a Message per text block and a ToolCall per
// tool_use block; each result event gives its own totals as one Usage
// (tokens and num_turns as calls are the result's own, cost the increase
// of the cumulative total_cost_usd) and its text as the response Message,
// or as an "error" Message when the result is an error (the text of an
// API error is the CLI's error message, never the agent's answer); the
// text of a message the CLI made up for a failed API call is an "error"
// Message too. A line that is not a JSON object is counted and skipped.
func (s *claudeStream) line(text string) []claudeEvent {
	s.lines++
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		s.badLines++
		return nil
	}
	switch m["type"] {
	case "system":
		if m["subtype"] == "init" && s.init == nil {
			s.init = m
			return []claudeEvent{{events.Started, events.StartedData{Model: sval(m["model"])}}}
		}
	case "assistant":
		return s.assistant(m)
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
		return s.resultEvent(m)
	}
	return nil
}

// assistant folds one assistant line (one content block of a message).
func (s *claudeStream) assistant(m map[string]any) []claudeEvent {
	var out []claudeEvent
	msg, _ := m["message"].(map[string]any)
	id, model := sval(msg["id"]), sval(msg["model"])
	synthetic := model == "<synthetic>"
	if synthetic {
		s.apiError = sval(m["error"])
	}
	if id != "" && !synthetic {
		if !s.msgs[id] {
			s.msgs[id] = true
			out = append(out, claudeEvent{events.Usage, events.UsageData{Model: model}})
		}
		s.notePending(id, model, msg["usage"])
	}
	role := "assistant"
	if synthetic {
		role = "error"
	}
	content, _ := msg["content"].([]any)
	for _, c := range content {
		b, _ := c.(map[string]any)
		switch b["type"] {
		case "text":
			t := sval(b["text"])
			if t != "" {
				out = append(out, claudeEvent{events.Message, events.MessageData{Role: role, Text: t}})
			}
			s.attempt = s.attempt || (!synthetic && strings.TrimSpace(t) != "")
		case "thinking":
			s.attempt = s.attempt || (!synthetic && strings.TrimSpace(sval(b["thinking"])) != "")
		case "tool_use":
			s.attempt = s.attempt || !synthetic
			name := sval(b["name"])
			s.tools[name]++
			if name == "Skill" {
				in, _ := b["input"].(map[string]any)
				s.skillIDs[sval(b["id"])] = sval(in["skill"])
			}
			out = append(out, claudeEvent{events.ToolCall, events.ToolCallData{Name: name, Input: b["input"]}})
		}
	}
	return out
}

// notePending keeps message id's usage (the largest of each count over
// its repeated blocks) until a result counts it.
func (s *claudeStream) notePending(id, model string, usage any) {
	us, _ := usage.(map[string]any)
	get := func(k string) int64 {
		if n := count(us[k]); n != nil {
			return *n
		}
		return 0
	}
	i := slices.IndexFunc(s.pending, func(p pendingUsage) bool { return p.id == id })
	if i < 0 {
		s.pending = append(s.pending, pendingUsage{id: id, model: model})
		i = len(s.pending) - 1
	}
	p := &s.pending[i]
	p.input = max(p.input, get("input_tokens"))
	p.output = max(p.output, get("output_tokens"))
	p.cacheRead = max(p.cacheRead, get("cache_read_input_tokens"))
	p.cacheWrite = max(p.cacheWrite, get("cache_creation_input_tokens"))
}

// resultEvent folds one result line (DESIGN §5.3): 2.1.332 writes one per
// turn it ends, a turn a background task's notification starts included;
// usage, num_turns and duration_ms are the result's own, total_cost_usd
// and modelUsage the session's so far.
func (s *claudeStream) resultEvent(m map[string]any) []claudeEvent {
	s.results++
	s.result = m
	u := events.UsageData{Model: s.model()}
	if us, ok := m["usage"].(map[string]any); ok {
		u.PromptTokens = count(us["input_tokens"])
		u.CompletionTokens = count(us["output_tokens"])
		u.CacheReadTokens = count(us["cache_read_input_tokens"])
		u.CacheWriteTokens = count(us["cache_creation_input_tokens"])
		for src, dst := range map[*int64]*int64{
			u.PromptTokens: &s.session.input, u.CompletionTokens: &s.session.output,
			u.CacheReadTokens: &s.session.cacheRead, u.CacheWriteTokens: &s.session.cacheWrite,
		} {
			if src != nil {
				*dst += *src
			}
		}
	}
	// As the task-runs seed counts a Claude cell's tokens: summed over
	// the result's modelUsage, the helper models' (a smaller model's
	// calls for titles, summaries, subagents) with the main one's. It is
	// cumulative, so each result's Usage carries its increase; the
	// parent session's own usage stays in agent_reported.session_usage.
	if mu, ok := m["modelUsage"].(map[string]any); ok {
		if cur, ok := modelUsageSums(mu); ok {
			d := func(c, p int64) *int64 { return events.Count(max(c-p, 0)) }
			u.PromptTokens, u.CompletionTokens = d(cur.input, s.muSum.input), d(cur.output, s.muSum.output)
			u.CacheReadTokens, u.CacheWriteTokens = d(cur.cacheRead, s.muSum.cacheRead), d(cur.cacheWrite, s.muSum.cacheWrite)
			s.muSum = cur
		}
	}
	if c, ok := m["total_cost_usd"].(float64); ok && c >= 0 && !math.IsInf(c, 0) {
		d := c
		if s.cost != nil {
			d = max(c-*s.cost, 0)
		}
		u.CostUSD, s.cost = &d, &c
	}
	// Each assistant message's Usage counted one call already (the
	// projection counts a Usage without calls as one): the result adds
	// the rest of its num_turns, so n_calls is the sum of num_turns, and
	// a stream cut before its result still counts the replies it got.
	if n := count(m["num_turns"]); n != nil {
		rest := max(*n-int64(len(s.pending)), 0)
		u.Calls = &rest
		s.turns += *n
	}
	if v, ok := m["duration_ms"].(float64); ok && v >= 0 {
		s.latencyMs += v
	}
	if v, ok := m["ttft_ms"].(float64); ok && s.ttftMs == nil {
		s.ttftMs = &v
	}
	s.pending = nil
	out := []claudeEvent{{events.Usage, u}}
	role := "response"
	if s.resultFailed(m) {
		role = "error"
	}
	if r := responseTail(sval(m["result"])); r != "" {
		out = append(out, claudeEvent{events.Message, events.MessageData{Role: role, Text: r}})
	}
	return out
}

// unreported is the usage of the model's messages no result counted (a
// stream without a result, or messages after the last one), summed once
// per message id, with no calls (each message's own Usage counted one)
// and no cost, and the number of such messages (0: nothing unreported).
// Its output count is the messages' message_start figure, which
// undercounts: the sum is partial.
func (s *claudeStream) unreported() (events.UsageData, int) {
	if len(s.pending) == 0 {
		return events.UsageData{}, 0
	}
	var in, out, cr, cw int64
	for _, p := range s.pending {
		in, out, cr, cw = in+p.input, out+p.output, cr+p.cacheRead, cw+p.cacheWrite
	}
	u := events.UsageData{Model: s.pending[len(s.pending)-1].model, PromptTokens: &in, CompletionTokens: &out,
		CacheReadTokens: &cr, CacheWriteTokens: &cw, Calls: events.Count(0)}
	return u, len(s.pending)
}

// failed reports whether the last result says the run failed: is_error
// true or a subtype starting error_ (error_max_turns,
// error_during_execution), whatever the exit code.
func (s *claudeStream) failed() bool {
	return s.result != nil && s.resultFailed(s.result)
}

func (s *claudeStream) resultFailed(r map[string]any) bool {
	return r["is_error"] == true || strings.HasPrefix(sval(r["subtype"]), "error_")
}

// attempted reports whether the model made an attempt, from the stream
// alone: an assistant message of the model (not one the CLI made up for
// a failed API call) with output, a non-blank text or thinking block or a
// tool call. The result's usage does not decide it: a result may carry
// none (error_max_turns after a turn that did the work).
func (s *claudeStream) attempted() bool { return s.attempt }

// transientAPIError reports whether the run ended on an API error that a
// new attempt may not meet: the last result's api_error_status is 408,
// 429 or 5xx (529 overloaded included), or, without a status (the
// connection failed), the CLI's own kind of the error is rate_limit,
// overloaded or server_error. Rejected credentials, an unknown model, a
// bad request or a billing error would only repeat.
func (s *claudeStream) transientAPIError() bool {
	if s.result != nil {
		if st, ok := s.result["api_error_status"].(float64); ok {
			return st == 408 || st == 429 || st >= 500
		}
	}
	switch s.apiError {
	case "rate_limit", "overloaded", "server_error":
		return true
	}
	return false
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

// treatmentOffered reports whether the init event lists the treatment
// among the skills offered to the model, under the name the CLI gives it
// (SkillOfferedName). A plugin that loaded without offering its skill
// (a SKILL.md the CLI would not list) does not count; no init event is no
// offer.
func (s *claudeStream) treatmentOffered() bool {
	return s.offeredAs != "" && slices.Contains(s.offered("skills"), s.offeredAs)
}

// isTreatment reports whether a Skill call's skill names the treatment:
// the name the CLI offers (abskill:My_Skill-v2), or, as the CLI also
// resolves them, the skill's own name (My_Skill.v2) and
// abskill:<own name>. Whether the CLI accepted the call is its tool
// result's to say (a rejected call is not counted).
func (s *claudeStream) isTreatment(skill string) bool {
	return s.treatment != "" && (skill == s.offeredAs || skill == s.treatment || skill == skillPluginName+":"+s.treatment)
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
		case !s.rejected[id] && !slices.Contains(unexpected, skill):
			// A call the CLI rejected (an unknown name) ran no skill.
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
		m["n_calls"] = s.turns
		if s.cost != nil {
			m["cost_usd"] = *s.cost
		}
		m["latency_sec"] = math.Round(s.latencyMs) / 1000
		if s.ttftMs != nil {
			m["ttft_sec"] = math.Round(*s.ttftMs) / 1000
		}
		if s.results > 1 {
			m["n_results"] = s.results
		}
		if v := r["api_error_status"]; v != nil {
			m["api_error_status"] = v
		}
		if e := s.errorMessage(); e != "" {
			m["error_message"] = e
		}
		mu, _ := r["modelUsage"].(map[string]any)
		m["models_used"] = slices.Sorted(maps.Keys(mu))
		m["model"] = s.model()
		if _, ok := modelUsageSums(mu); ok {
			// The tokens of the row are modelUsage's; the parent
			// session's own, summed over its results, beside them.
			m["model_usage"] = mu
			m["session_usage"] = map[string]any{
				"input_tokens": s.session.input, "output_tokens": s.session.output,
				"cache_read_tokens": s.session.cacheRead, "cache_write_tokens": s.session.cacheWrite,
			}
		}
	}
	if s.apiError != "" {
		m["api_error"] = s.apiError
	}
	return m
}

// errorMessage is what the last result says went wrong, when it failed:
// its errors (error_max_turns: "Reached maximum number of turns (N)"),
// else its text (an API error's message), bounded (boundMsg); "" when it
// did not fail.
func (s *claudeStream) errorMessage() string {
	if !s.failed() {
		return ""
	}
	var parts []string
	if es, ok := s.result["errors"].([]any); ok {
		for _, e := range es {
			if t := sval(e); t != "" {
				parts = append(parts, t)
			}
		}
	}
	if len(parts) == 0 {
		parts = append(parts, sval(s.result["result"]))
	}
	return boundMsg(strings.Join(parts, "; "))
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

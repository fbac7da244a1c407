package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// feed folds lines into s and returns every event they made.
func feed(s *claudeStream, lines ...string) []claudeEvent {
	var out []claudeEvent
	for _, l := range lines {
		out = append(out, s.line(l)...)
	}
	return out
}

// usageSum adds the Usage events up as the projection does (a Usage
// without calls counts one).
type usageSum struct {
	prompt, completion, cacheRead, calls int64
	cost                                 float64
	partial                              []string
}

func sumUsage(evs []claudeEvent) usageSum {
	var u usageSum
	for _, e := range evs {
		d, ok := e.Data.(events.UsageData)
		if e.Type != events.Usage || !ok {
			continue
		}
		add := func(dst *int64, p *int64) {
			if p != nil {
				*dst += *p
			}
		}
		add(&u.prompt, d.PromptTokens)
		add(&u.completion, d.CompletionTokens)
		add(&u.cacheRead, d.CacheReadTokens)
		if d.Calls != nil {
			u.calls += *d.Calls
		} else {
			u.calls++
		}
		if d.CostUSD != nil {
			u.cost += *d.CostUSD
		}
		if d.Partial != "" {
			u.partial = append(u.partial, d.Partial)
		}
	}
	return u
}

func messages(evs []claudeEvent, role string) []string {
	var out []string
	for _, e := range evs {
		if d, ok := e.Data.(events.MessageData); ok && e.Type == events.Message && d.Role == role {
			out = append(out, d.Text)
		}
	}
	return out
}

// Lines as Claude Code 2.1.332 writes them (trimmed to the keys read).
const (
	initLine      = `{"type":"system","subtype":"init","model":"m1","plugins":[],"skills":["doctor"]}`
	workText      = `{"type":"assistant","message":{"id":"msg_1","model":"m1","content":[{"type":"text","text":"Writing the file."}],"usage":{"input_tokens":100,"output_tokens":1,"cache_read_input_tokens":7}}}`
	workTool      = `{"type":"assistant","message":{"id":"msg_1","model":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"echo hello > out.txt"}}],"usage":{"input_tokens":100,"output_tokens":1,"cache_read_input_tokens":7}}}`
	workTool2     = `{"type":"assistant","message":{"id":"msg_2","model":"m1","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"cat out.txt"}}],"usage":{"input_tokens":200,"output_tokens":1}}}`
	synthetic429  = `{"type":"assistant","message":{"id":"b7ee","model":"<synthetic>","content":[{"type":"text","text":"API Error: Request rejected (429) · rate_limit_error"}],"usage":{"input_tokens":0,"output_tokens":0}},"error":"rate_limit"}`
	result429     = `{"type":"result","subtype":"success","is_error":true,"num_turns":1,"total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"terminal_reason":"api_error","api_error_status":429,"result":"API Error: Request rejected (429) · rate_limit_error"}`
	syntheticConn = `{"type":"assistant","message":{"id":"5ee8","model":"<synthetic>","content":[{"type":"text","text":"API Error: Connection refused"}]},"error":"server_error"}`
	resultConn    = `{"type":"result","subtype":"success","is_error":true,"num_turns":1,"total_cost_usd":0,"terminal_reason":"api_error","api_error_status":null,"result":"API Error: Connection refused"}`
	synthetic401  = `{"type":"assistant","message":{"id":"f6fa","model":"<synthetic>","content":[{"type":"text","text":"Failed to authenticate. API Error: 401 authentication_error"}]},"error":"authentication_failed"}`
	result401     = `{"type":"result","subtype":"success","is_error":true,"num_turns":1,"total_cost_usd":0,"terminal_reason":"api_error","api_error_status":401,"result":"Failed to authenticate. API Error: 401 authentication_error"}`
)

// TestClaudeAttemptFromTheStream: whether the CLI made an attempt is read
// from the stream (an assistant turn with output or a tool call), never
// from the result's usage: an error_max_turns result with no usage after
// a tool call is an attempt (it was "no attempt" from the missing usage);
// an API error before any turn is none, transient (retried) for a 429 or a
// connection that failed, final for rejected credentials; the result text
// of an API error is an error message, not the agent's response.
func TestClaudeAttemptFromTheStream(t *testing.T) {
	s := newClaudeStream("")
	evs := feed(s, initLine, workText, workTool,
		`{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":2,"terminal_reason":"max_turns","result":null,"errors":["Reached maximum number of turns (1)"]}`)
	if !s.failed() || !s.attempted() {
		t.Errorf("error_max_turns without usage after a tool call: failed=%v attempted=%v; want an attempt that is verified", s.failed(), s.attempted())
	}
	if m := s.metrics(false); m["terminal_reason"] != "max_turns" || !strings.Contains(m["error_message"].(string), "maximum number of turns") {
		t.Errorf("metrics %v: want the limit as the recorded reason", m)
	}
	if r := messages(evs, "response"); len(r) != 0 {
		t.Errorf("responses %q of a result without text", r)
	}

	for name, c := range map[string]struct {
		lines     []string
		transient bool
	}{
		"429":        {[]string{initLine, synthetic429, result429}, true},
		"connection": {[]string{initLine, syntheticConn, resultConn}, true},
		"401":        {[]string{initLine, synthetic401, result401}, false},
		"529 status": {[]string{initLine, strings.Replace(synthetic429, "rate_limit", "overloaded", 1), strings.Replace(result429, "429", "529", 1)}, true},
		"500 status": {[]string{initLine, strings.Replace(result429, "429", "500", 1)}, true},
		"400 status": {[]string{initLine, strings.Replace(result429, "429", "400", 1)}, false},
	} {
		e := newClaudeStream("")
		evs := feed(e, c.lines...)
		if e.attempted() || e.transientAPIError() != c.transient {
			t.Errorf("%s: attempted=%v transient=%v; want no attempt, transient %v", name, e.attempted(), e.transientAPIError(), c.transient)
		}
		if r := messages(evs, "response"); len(r) != 0 {
			t.Errorf("%s: the API error's text is recorded as the agent's response: %q", name, r)
		}
		if r := messages(evs, "error"); len(r) == 0 || !strings.Contains(r[len(r)-1], "API Error") && !strings.Contains(r[len(r)-1], "authenticate") {
			t.Errorf("%s: error messages %q", name, r)
		}
	}

	// Output after the API error's synthetic message does not count, nor
	// does an empty text block; a thinking block does.
	n := newClaudeStream("")
	feed(n, initLine, `{"type":"assistant","message":{"id":"a","model":"m1","content":[{"type":"text","text":"  "}]}}`)
	if n.attempted() {
		t.Error("a blank text block is an attempt")
	}
	feed(n, `{"type":"assistant","message":{"id":"b","model":"m1","content":[{"type":"thinking","thinking":"plan"}]}}`)
	if !n.attempted() {
		t.Error("a thinking block is no attempt")
	}
}

// TestClaudeTwoResults: a session that goes on after a background task's
// notification writes a second result (2.1.332: usage, num_turns and
// duration_ms are the result's own; total_cost_usd and modelUsage are
// cumulative). Tokens and calls are summed over the results, the cost is
// the last result's total: the second result was dropped (300 prompt
// tokens and 0.0018 USD instead of 600 and 0.0036).
func TestClaudeTwoResults(t *testing.T) {
	s := newClaudeStream("")
	evs := feed(s, initLine,
		`{"type":"assistant","message":{"id":"msg_1","model":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"sleep 1","run_in_background":true}}],"usage":{"input_tokens":100,"output_tokens":1}}}`,
		`{"type":"assistant","message":{"id":"msg_2","model":"m1","content":[{"type":"text","text":"Waiting."}],"usage":{"input_tokens":200,"output_tokens":1}}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":2,"duration_ms":169,"ttft_ms":82,"total_cost_usd":0.0018,"usage":{"input_tokens":300,"output_tokens":30},"modelUsage":{"m1":{"inputTokens":300,"outputTokens":30,"costUSD":0.0018}},"terminal_reason":"completed","result":"Waiting.","result_index":0}`,
		`{"type":"system","subtype":"task_notification","status":"completed"}`,
		`{"type":"system","subtype":"init","model":"m1","plugins":[],"skills":["doctor"]}`,
		`{"type":"assistant","message":{"id":"msg_3","model":"m1","content":[{"type":"text","text":"Background finished."}],"usage":{"input_tokens":300,"output_tokens":1}}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"duration_ms":33,"ttft_ms":30,"total_cost_usd":0.0036,"usage":{"input_tokens":300,"output_tokens":30},"modelUsage":{"m1":{"inputTokens":600,"outputTokens":60,"costUSD":0.0036}},"terminal_reason":"completed","result":"Background finished.","result_index":1}`)
	u := sumUsage(evs)
	if u.prompt != 600 || u.completion != 60 || u.calls != 3 || u.cost < 0.0035999 || u.cost > 0.0036001 || len(u.partial) != 0 {
		t.Errorf("usage %+v; want 600 prompt, 60 completion tokens, 3 calls, 0.0036 USD", u)
	}
	m := s.metrics(false)
	if m["cost_usd"] != 0.0036 || m["n_calls"] != int64(3) || m["n_results"] != 2 || m["latency_sec"] != 0.202 || m["ttft_sec"] != 0.082 {
		t.Errorf("metrics %v", m)
	}
	if r := messages(evs, "response"); len(r) != 2 || r[1] != "Background finished." {
		t.Errorf("responses %q", r)
	}
	if _, n := s.unreported(); n != 0 {
		t.Errorf("%d messages unreported after the last result", n)
	}
}

// TestClaudeTokensFromModelUsage: a Claude cell's tokens are summed over
// the result's modelUsage, as the task-runs seed counts them: the helper
// model's (here a haiku that titled the session) with the main model's;
// before, the row had the parent session's usage alone (300 prompt
// tokens, not 420). modelUsage is cumulative, so a second result adds
// its increase. The parent session's own usage, summed over its results,
// is kept in agent_reported.session_usage, and modelUsage as given in
// model_usage.
func TestClaudeTokensFromModelUsage(t *testing.T) {
	s := newClaudeStream("")
	evs := feed(s, initLine,
		`{"type":"assistant","message":{"id":"msg_1","model":"m1","content":[{"type":"text","text":"Working."}],"usage":{"input_tokens":300,"output_tokens":1}}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"total_cost_usd":0.002,"usage":{"input_tokens":300,"output_tokens":30,"cache_read_input_tokens":50},"modelUsage":{"m1":{"inputTokens":300,"outputTokens":30,"cacheReadInputTokens":50,"costUSD":0.0018},"claude-haiku-4-5":{"inputTokens":120,"outputTokens":12,"costUSD":0.0002}},"result":"Working."}`,
		`{"type":"assistant","message":{"id":"msg_2","model":"m1","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":100,"output_tokens":1}}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"total_cost_usd":0.003,"usage":{"input_tokens":100,"output_tokens":10},"modelUsage":{"m1":{"inputTokens":400,"outputTokens":40,"cacheReadInputTokens":50,"costUSD":0.0026},"claude-haiku-4-5":{"inputTokens":120,"outputTokens":12,"costUSD":0.0002}},"result":"Done."}`)
	u := sumUsage(evs)
	if u.prompt != 520 || u.completion != 52 || u.cacheRead != 50 {
		t.Errorf("usage %+v; want 520 prompt, 52 completion, 50 cache-read tokens (modelUsage, the helper model included)", u)
	}
	m := s.metrics(false)
	su, _ := m["session_usage"].(map[string]any)
	if su["input_tokens"] != int64(400) || su["output_tokens"] != int64(40) || su["cache_read_tokens"] != int64(50) {
		t.Errorf("session_usage %v; want the parent session's 400/40/50", su)
	}
	if mu, _ := m["model_usage"].(map[string]any); len(mu) != 2 {
		t.Errorf("model_usage %v", m["model_usage"])
	}
	// Without token counts in modelUsage, the result's usage stands.
	o := newClaudeStream("")
	if u := sumUsage(feed(o, initLine, `{"type":"result","subtype":"success","num_turns":1,"usage":{"input_tokens":10,"output_tokens":4},"modelUsage":{"m1":{"costUSD":0.1}}}`)); u.prompt != 10 || u.completion != 4 {
		t.Errorf("usage without modelUsage tokens: %+v", u)
	}
	if _, ok := o.metrics(false)["session_usage"]; ok {
		t.Error("session_usage without modelUsage tokens")
	}
}

// TestClaudePartialUsage: a stream without a result keeps the usage its
// assistant events carry, once per message id (the CLI repeats a
// message's usage on each of its content blocks: a sum over lines would
// double it), as a Usage marked partial; no message, no partial usage.
// Messages after the last result are unreported as well.
func TestClaudePartialUsage(t *testing.T) {
	s := newClaudeStream("")
	evs := feed(s, initLine, workText, workTool, workTool2)
	u, n := s.unreported()
	if n != 2 || *u.PromptTokens != 300 || *u.CompletionTokens != 2 || *u.CacheReadTokens != 7 || *u.Calls != 0 || u.CostUSD != nil {
		t.Errorf("unreported usage %+v of %d messages; want 300 prompt, 2 completion, 7 cache-read tokens from 2 messages, no calls beyond theirs", u, n)
	}
	if sum := sumUsage(evs); sum.calls != 2 || sum.prompt != 0 {
		t.Errorf("live usage %+v: one call per message, tokens only at the end", sum)
	}
	if _, n := newClaudeStream("").unreported(); n != 0 {
		t.Error("an empty stream has unreported usage")
	}
	// The synthetic message of an API error is no usage.
	e := newClaudeStream("")
	feed(e, initLine, synthetic429)
	if _, n := e.unreported(); n != 0 {
		t.Errorf("%d unreported messages for an API error", n)
	}
	// After a result: only what followed it.
	r := newClaudeStream("")
	feed(r, initLine, workTool, `{"type":"result","subtype":"success","num_turns":1,"usage":{"input_tokens":100,"output_tokens":10},"total_cost_usd":0.001}`, workTool2)
	if u, n := r.unreported(); n != 1 || *u.PromptTokens != 200 {
		t.Errorf("after the result: %d messages, %+v", n, u)
	}
}

// TestClaudeTreatmentOffered: a skill arm's treatment counts as offered
// only when the init event lists the skill under the name the CLI gives
// it (plugin "abskill" loaded with no skill offered is not enough: that
// cell was compared as treated), and Skill calls of that name count as
// invocations (a skill My_Skill.v2 is offered as abskill:My_Skill-v2, and
// such calls counted 0).
func TestClaudeTreatmentOffered(t *testing.T) {
	if got := SkillOfferedName("My_Skill.v2"); got != "abskill:My_Skill-v2" {
		t.Errorf("SkillOfferedName(My_Skill.v2) = %q", got)
	}
	s := newClaudeStream("greet")
	feed(s, `{"type":"system","subtype":"init","plugins":[{"name":"abskill"}],"skills":["doctor"]}`)
	if s.treatmentOffered() {
		t.Error("a plugin that offers no skill counts as the treatment offered")
	}
	if newClaudeStream("greet").treatmentOffered() {
		t.Error("a stream without an init event offered the treatment")
	}
	v := newClaudeStream("My_Skill.v2")
	feed(v, `{"type":"system","subtype":"init","plugins":[{"name":"abskill"}],"skills":["abskill:My_Skill-v2","doctor"]}`,
		`{"type":"assistant","message":{"id":"a","model":"m","content":[`+
			`{"type":"tool_use","id":"t1","name":"Skill","input":{"skill":"abskill:My_Skill-v2"}},`+
			`{"type":"tool_use","id":"t2","name":"Skill","input":{"skill":"My_Skill.v2"}},`+
			`{"type":"tool_use","id":"t3","name":"Skill","input":{"skill":"My_Skill-v2"}}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t3","is_error":true,"content":"Unknown skill: My_Skill-v2"}]}}`)
	m := v.metrics(false)
	if !v.treatmentOffered() || m["n_skill_invocations"] != 2 || len(m["unexpected_skills"].([]string)) != 0 {
		t.Errorf("offered=%v metrics %v; want offered, 2 accepted calls, none unexpected", v.treatmentOffered(), m)
	}
}

// TestLoadSkillNeedsADescription: the CLI offers a plugin skill only when
// its SKILL.md has frontmatter with a description (a non-blank string, a
// number or a boolean) or a when_to_use; any other skill is refused before
// the build, naming the file and why (such skills loaded as a plugin, were
// never offered, and the cells counted as treated).
func TestLoadSkillNeedsADescription(t *testing.T) {
	for name, c := range map[string]struct {
		md, want string
	}{
		"no frontmatter":    {"Just a body.\n", "no frontmatter"},
		"no description":    {"---\nname: s\n---\nbody\n", "no description"},
		"blank description": {"---\ndescription: \"   \"\n---\nbody\n", "no description"},
		"null description":  {"---\ndescription: ~\n---\nbody\n", "no description"},
		"map description":   {"---\ndescription: {a: b}\n---\nbody\n", "no description"},
		"list description":  {"---\ndescription: [a]\n---\nbody\n", "no description"},
		"empty when_to_use": {"---\nwhen_to_use: \"\"\n---\nbody\n", "no description"},
		"description":       {"---\ndescription: d\n---\nbody\n", ""},
		"number":            {"---\ndescription: 42\n---\nbody\n", ""},
		"when_to_use":       {"---\nwhen_to_use: use it\n---\nbody\n", ""},
		"crlf":              {"---\r\ndescription: d\r\n---\r\nbody\r\n", ""},
		"trailing space":    {"--- \ndescription: d\n---\nbody\n", ""},
	} {
		dir := filepath.Join(t.TempDir(), "s")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(c.md), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadSkill("", dir)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "SKILL.md")):
			t.Errorf("%s: %v; want an error naming SKILL.md with %q", name, err, c.want)
		}
	}
}

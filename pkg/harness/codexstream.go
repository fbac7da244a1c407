package harness

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
)

// codexStream folds the Codex CLI's `exec --json` lines (one JSON object
// a line: thread.started, turn.started, item.started/updated/completed,
// turn.completed, turn.failed, error) into events and the row's metrics.
// Like claudeStream it is fed the same lines live and again from the
// collected file, with a fresh state each time. Not safe for concurrent
// use.
type codexStream struct {
	// treatment is the skill arm's skill name ("" none).
	treatment string
	threadID  string
	// completed is the turn.completed event; failed the message of
	// turn.failed ("" none).
	completed map[string]any
	failed    string
	ended     bool
	// lastError is the last error the CLI reported (an "error" event: a
	// retry, or the failure).
	lastError string
	// message is the text of the agent's last message.
	message string
	// attempt is set by an item of the model with output: a non-blank
	// message or reasoning, a command, a file change, any tool call.
	attempt    bool
	started    map[string]bool // item ids whose ToolCall was published
	tools      map[string]int
	skillReads int
	lines      int
	badLines   int
}

func newCodexStream(treatment string) *codexStream {
	return &codexStream{treatment: treatment, started: map[string]bool{}, tools: map[string]int{}}
}

// line folds one (already redacted) line and returns its events: Started
// at thread.started; per item of the model a ToolCall when it starts (a
// command) or completes (any other tool), a Command with its exit code
// and output tail, a FileChange per file, a Message per agent message;
// each error the CLI reports as an "error" Message; at turn.completed its
// usage (the thread's totals: input without the cached part, the cached
// part as cache reads) as one Usage and the agent's last message as the
// response Message, the row's claim. A line that is not a JSON object is
// counted and skipped.
func (s *codexStream) line(text string) []claudeEvent {
	s.lines++
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		s.badLines++
		return nil
	}
	switch m["type"] {
	case "thread.started":
		s.threadID = sval(m["thread_id"])
		return []claudeEvent{{events.Started, events.StartedData{}}}
	case "item.started":
		it, _ := m["item"].(map[string]any)
		if it["type"] == "command_execution" {
			return s.toolCall(it)
		}
	case "item.completed":
		it, _ := m["item"].(map[string]any)
		return s.item(it)
	case "error":
		s.lastError = sval(m["message"])
		return []claudeEvent{{events.Message, events.MessageData{Role: "error", Text: boundMsg(s.lastError)}}}
	case "turn.failed":
		e, _ := m["error"].(map[string]any)
		s.failed, s.ended = sval(e["message"]), true
		if s.failed == "" {
			s.failed = "turn.failed without a message"
		}
		return []claudeEvent{{events.Message, events.MessageData{Role: "error", Text: boundMsg(s.failed)}}}
	case "turn.completed":
		s.completed, s.ended = m, true
		us, _ := m["usage"].(map[string]any)
		u := events.UsageData{CompletionTokens: count(us["output_tokens"]), CacheReadTokens: count(us["cached_input_tokens"]),
			CacheWriteTokens: count(us["cache_write_input_tokens"])}
		if in := count(us["input_tokens"]); in != nil {
			u.PromptTokens = events.Count(max(*in-derefInt(u.CacheReadTokens), 0))
		}
		out := []claudeEvent{{events.Usage, u}}
		if r := responseTail(s.message); r != "" {
			out = append(out, claudeEvent{events.Message, events.MessageData{Role: "response", Text: r}})
		}
		return out
	}
	return nil
}

// item folds one completed item.
func (s *codexStream) item(it map[string]any) []claudeEvent {
	switch it["type"] {
	case "agent_message":
		t := sval(it["text"])
		s.attempt = s.attempt || strings.TrimSpace(t) != ""
		s.message = t
		if t == "" {
			return nil
		}
		return []claudeEvent{{events.Message, events.MessageData{Role: "assistant", Text: t}}}
	case "reasoning":
		s.attempt = s.attempt || strings.TrimSpace(sval(it["text"])) != ""
	case "error":
		return []claudeEvent{{events.Message, events.MessageData{Role: "error", Text: boundMsg(sval(it["message"]))}}}
	case "command_execution":
		out := s.toolCall(it)
		c := events.CommandData{Command: sval(it["command"]), Output: cellfs.Suffix(sval(it["aggregated_output"]), 2048)}
		if n := count(it["exit_code"]); n != nil {
			code := int(*n)
			c.ExitCode = &code
		}
		if s.treatment != "" && strings.Contains(c.Command, CodexSkillsDir+"/"+s.treatment+"/SKILL.md") {
			s.skillReads++
		}
		return append(out, claudeEvent{events.Command, c})
	case "file_change":
		out := s.toolCall(it)
		changes, _ := it["changes"].([]any)
		for _, c := range changes {
			ch, _ := c.(map[string]any)
			out = append(out, claudeEvent{events.FileChange, events.FileChangeData{Path: sval(ch["path"]), Kind: sval(ch["kind"])}})
		}
		return out
	case "mcp_tool_call", "web_search", "collab_tool_call":
		return s.toolCall(it)
	}
	return nil
}

// toolCall is the ToolCall of a tool item, once per item id: named by its
// type (an MCP call by server.tool), its command or arguments as input.
func (s *codexStream) toolCall(it map[string]any) []claudeEvent {
	s.attempt = true
	id := sval(it["id"])
	if id != "" && s.started[id] {
		return nil
	}
	s.started[id] = true
	name := sval(it["type"])
	var in any
	switch name {
	case "command_execution":
		in = map[string]any{"command": it["command"]}
	case "mcp_tool_call":
		name = sval(it["server"]) + "." + sval(it["tool"])
		in = it["arguments"]
	case "web_search":
		in = map[string]any{"query": it["query"]}
	}
	s.tools[name]++
	return []claudeEvent{{events.ToolCall, events.ToolCallData{Name: name, Input: in}}}
}

// transientStatus finds the HTTP status of a provider error a new attempt
// may not meet in the CLI's message (408, 429, 5xx), and the CLI's words
// for a provider that failed without one.
var transientStatus = regexp.MustCompile(`\bstatus:? (408|429|5\d\d)\b|high demand|stream disconnected|Connection failed`)

// transientAPIError reports whether the turn failed on a provider error
// a new attempt may not meet (transientStatus): a rejected key, an
// unknown model or a bad request would only repeat.
func (s *codexStream) transientAPIError() bool {
	return s.failed != "" && transientStatus.MatchString(s.failed)
}

// metrics are the row's agent_reported values of a Codex run.
func (s *codexStream) metrics(truncated bool) map[string]any {
	m := map[string]any{"tool_calls": s.tools}
	if s.threadID != "" {
		m["thread_id"] = s.threadID
	}
	if truncated {
		m["stream_truncated"] = true
	}
	if s.treatment != "" {
		m["treatment"] = s.treatment
		m["n_skill_invocations"] = s.skillReads
	}
	switch {
	case s.completed != nil:
		m["turn"] = "completed"
		m["usage"] = s.completed["usage"]
	case s.failed != "":
		m["turn"] = "failed"
		m["error_message"] = boundMsg(s.failed)
	}
	if s.badLines > 0 {
		m["bad_lines"] = s.badLines
	}
	return m
}

// reason is the Finished reason of a run that did not time out.
func (s *codexStream) reason(exit int, truncated bool) string {
	switch {
	case s.failed != "":
		return "error: turn.failed: " + boundMsg(s.failed)
	case s.completed != nil:
		return "turn.completed"
	}
	r := "exit " + strconv.Itoa(exit) + " without a turn.completed event"
	if truncated {
		r += " (truncated stream)"
	}
	if s.lastError != "" {
		r += ": " + boundMsg(s.lastError)
	}
	return r
}

func derefInt(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

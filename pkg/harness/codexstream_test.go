package harness

import (
	"fmt"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// codexRun are the lines codex-cli 0.171.0 printed for a turn of two
// model calls (a message and a command, then the answer), as recorded
// against the scripted endpoint.
var codexRun = []string{
	`{"type":"thread.started","thread_id":"01a236ac-bf69-7420-83e9-d92fe7a26732"}`,
	`{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for ` + "`gpt-5-codex`" + ` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}`,
	`{"type":"turn.started"}`,
	`{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"I will look."}}`,
	`{"type":"item.started","item":{"id":"item_2","type":"command_execution","command":"/bin/bash -lc 'cat /etc/codex/skills/greet/SKILL.md'","aggregated_output":"","exit_code":null,"status":"in_progress"}}`,
	`{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"/bin/bash -lc 'cat /etc/codex/skills/greet/SKILL.md'","aggregated_output":"Write hello.\n","exit_code":0,"status":"completed"}}`,
	`{"type":"item.completed","item":{"id":"item_4","type":"file_change","changes":[{"path":"/app/out.txt","kind":"add"}],"status":"completed"}}`,
	`{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Done: wrote out.txt"}}`,
	`{"type":"turn.completed","usage":{"input_tokens":350,"cached_input_tokens":50,"cache_write_input_tokens":0,"output_tokens":30,"reasoning_output_tokens":0}}`,
}

// TestCodexStream: a completed turn gives Started, the messages, one
// ToolCall and one Command per command (the ToolCall at its start), a
// ToolCall and a FileChange per file change, the thread's usage with the cached input moved out of the
// prompt tokens, and the last message as the response (the claim); the
// skill read counts as an invocation.
func TestCodexStream(t *testing.T) {
	s := newCodexStream("greet")
	var got []string
	for _, l := range codexRun {
		for _, ev := range s.line(l) {
			got = append(got, string(ev.Type))
			if u, ok := ev.Data.(events.UsageData); ok {
				got = append(got, fmt.Sprintf("in=%d out=%d cached=%d", *u.PromptTokens, *u.CompletionTokens, *u.CacheReadTokens))
			}
			if m, ok := ev.Data.(events.MessageData); ok {
				got = append(got, m.Role+":"+m.Text[:min(len(m.Text), 12)])
			}
		}
	}
	want := "Started Message error:Model metada Message assistant:I will look. ToolCall Command ToolCall FileChange Message assistant:Done: wrote  Usage in=300 out=30 cached=50 Message response:Done: wrote "
	if g := strings.Join(got, " "); strings.TrimSpace(g) != strings.TrimSpace(want) {
		t.Errorf("events:\n got %s\nwant %s", g, want)
	}
	m := s.metrics(false)
	if !s.attempt || s.reason(0, false) != "turn.completed" || m["n_skill_invocations"] != 1 || m["turn"] != "completed" ||
		fmt.Sprint(m["tool_calls"]) != "map[command_execution:1 file_change:1]" {
		t.Errorf("attempt %v, reason %q, metrics %v", s.attempt, s.reason(0, false), m)
	}
}

// TestCodexStreamNoAttempt: a turn that failed on the provider before
// any item of the model is no attempt, transient for a 429 or the CLI's
// words for a 5xx and not for a rejected key; a stream that ended without
// its turn says so; a hostile line that is not JSON is counted and
// skipped.
func TestCodexStreamNoAttempt(t *testing.T) {
	for _, c := range []struct {
		failed    string
		transient bool
	}{
		{"exceeded retry limit, last status: 429 Too Many Requests", true},
		{"We’re currently experiencing high demand, which may cause temporary errors.", true},
		{"unexpected status 401 Unauthorized: bad key, url: http://10.0.0.2:8080/v1/responses", false},
	} {
		s := newCodexStream("")
		for _, l := range []string{codexRun[0], codexRun[1], `{"type":"error","message":"` + c.failed + `"}`, `{"type":"turn.failed","error":{"message":"` + c.failed + `"}}`} {
			s.line(l)
		}
		if s.attempt || s.transientAPIError() != c.transient || !strings.HasPrefix(s.reason(1, false), "error: turn.failed: ") {
			t.Errorf("%s: attempt %v, transient %v, reason %q", c.failed, s.attempt, s.transientAPIError(), s.reason(1, false))
		}
	}
	s := newCodexStream("")
	s.line(codexRun[0])
	s.line(`not json {"type":"turn.completed"}`)
	if s.ended || s.badLines != 1 || s.reason(137, true) != "exit 137 without a turn.completed event (truncated stream)" {
		t.Errorf("ended %v, bad lines %d, reason %q", s.ended, s.badLines, s.reason(137, true))
	}
}

package harness_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/llmtest"
)

// TestDemoScriptMatchesSkillNotices holds make demo's scripted model
// (examples/fake-model/skill-demo.yaml) to the skill notices the arms send
// today: the first turn of fix-sum loads the skill when the prompt opens
// with the arm's notice, and gives up without it. A notice reworded
// without the script left the demo's skill arm failing fix-sum. The
// demo's own-agent run holds too: the Python example agent's bash tool
// description picks the case that solves csv-columns with that tool.
func TestDemoScriptMatchesSkillNotices(t *testing.T) {
	s, err := llmtest.LoadScript("../../examples/fake-model/skill-demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	instr, err := os.ReadFile("../../examples/tasks/fix-sum/instruction.md")
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(s)
	defer srv.Close()
	first := func(path string, body map[string]any) string {
		b, _ := json.Marshal(body)
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b)))
		req.Header.Set("content-type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", path, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	claude := func(prompt string) string {
		return first("/v1/messages", map[string]any{"model": "m", "max_tokens": 1,
			"messages": []map[string]any{{"role": "user", "content": prompt}}})
	}
	codex := func(prompt string) string {
		return first("/v1/responses", map[string]any{"model": "m",
			"input": []map[string]any{{"role": "user", "content": prompt}}})
	}
	py, err := os.ReadFile("../../examples/agents/model/agent.py")
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Cases[0]; c.API != "anthropic" || !strings.Contains(string(py), c.When) ||
		len(c.Replies) == 0 || len(c.Replies[0].ToolUse) != 1 || c.Replies[0].ToolUse[0].Name != "bash" {
		t.Errorf("the demo's first case (%q, api %q) is not the one examples/agents/model's bash tool picks", c.When, c.API)
	}
	for _, c := range []struct {
		arm, notice, loads string
		ask                func(string) string
	}{
		{"docker-claude-skill", harness.SkillNotice, `"name":"Skill"`, claude},
		{"docker-codex-skill", harness.CodexSkillNotice, "/etc/codex/skills/sum-numbers/SKILL.md", codex},
	} {
		with := c.ask(fmt.Sprintf(c.notice, "sum-numbers") + string(instr))
		if !strings.Contains(with, c.loads) {
			t.Errorf("%s: the first turn of fix-sum with the notice does not load the skill (%s): %s", c.arm, c.loads, with)
		}
		without := c.ask(string(instr))
		if strings.Contains(without, c.loads) || !strings.Contains(without, "I am not sure how to do this") {
			t.Errorf("%s: the first turn of fix-sum without the notice does not give up: %s", c.arm, without)
		}
	}
}

package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

func TestParseLine(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	u := ParseLine(`{"_tag":"Usage","inputTokens":120,"output_tokens":30,"cache_read_input_tokens":7,"cost_usd":0.0125,"at":1767323045123}`, now)
	if u.Kind != LineEvent || u.Type != events.Usage {
		t.Fatalf("usage line: %+v", u)
	}
	ud := u.Data.(*events.UsageData)
	if p(ud.PromptTokens) != "120" || p(ud.CompletionTokens) != "30" || p(ud.CacheReadTokens) != "7" || ud.CostUSD == nil || *ud.CostUSD != 0.0125 ||
		ud.CacheWriteTokens != nil || ud.Calls != nil {
		t.Fatalf("usage data %+v", ud)
	}
	if !u.At.Equal(time.UnixMilli(1767323045123)) {
		t.Fatalf("at %v", u.At)
	}
	c := ParseLine(`  {"_tag":"Command","command":"ls -la","exitCode":2}  `, now)
	if cd := c.Data.(*events.CommandData); c.Type != events.Command || cd.Command != "ls -la" || cd.ExitCode == nil || *cd.ExitCode != 2 || !c.At.Equal(now) {
		t.Fatalf("command %+v", c)
	}
	tc := ParseLine(`{"_tag":"ToolCall","toolName":"bash","input":{"cmd":"x"}}`, now)
	if td := tc.Data.(*events.ToolCallData); td.Name != "bash" || td.Input == nil {
		t.Fatalf("tool %+v", td)
	}
	op := ParseLine(`PROCTOR_OP {"type":"skill_read","skill":"csv","bytes":12}`, now)
	if od := op.Data.(*events.OperationData); op.Kind != LineOperation || od.OpType != "skill_read" || od.Fields["bytes"] != int64(12) || od.Fields["skill"] != "csv" {
		t.Fatalf("op %+v", op.Data)
	}
	if d := ParseLine(`DOKIMI_OP {"op":"search"}`, now); d.Kind != LineOperation || d.Data.(*events.OperationData).OpType != "search" {
		t.Fatalf("dokimi op %+v", d)
	}
	for _, text := range []string{`hello`, `{"_tag":"Unknown"}`, `{"no_tag":1}`, `{broken`, `[1,2]`, `PROCTOR_OP not json`, ``} {
		if l := ParseLine(text, now); l.Kind != LineText || l.Text != text {
			t.Errorf("%q: %+v, want text", text, l)
		}
	}
	if m := ParseLine(`{"_tag":"Message","text":"hi","role":7,"error":"yes"}`, now); m.Kind != LineEvent || m.Data.(*events.MessageData).Text != "hi" {
		t.Fatalf("a field of the wrong type must not lose the event: %+v", m)
	}
	f := ParseLine(`{"_tag":"Finished","exitReason":"completed"}`, now)
	if f.Type != events.Finished || f.Data.(*events.FinishedData).Reason != "completed" {
		t.Fatalf("finished %+v", f)
	}
}

func TestLoadAgent(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "agent.toml"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("run = \"bash agent.sh\"\ninstall = \"true\"\n[env]\nA = \"1\"\n")
	a, err := LoadAgent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Run != "bash agent.sh" || a.Env["A"] != "1" || a.MaxTimeoutSec != DefaultAgentCapSec || len(a.Hash) != 64 {
		t.Fatalf("%+v", a)
	}
	if a.Budget(600) != 600 || a.Budget(3600) != 900 {
		t.Fatalf("budget %v %v", a.Budget(600), a.Budget(3600))
	}
	h1 := a.Hash
	write("run = \"bash agent.sh\"\ninstall = \"true\"\n[env]\nA = \"2\"\n")
	if b, _ := LoadAgent(dir); b.Hash == h1 {
		t.Fatal("hash did not change with the files")
	}
	write("install = \"true\"\n")
	if _, err := LoadAgent(dir); err == nil {
		t.Fatal("agent.toml without run loaded")
	}
	write("run = \"x\"\nrunn = \"typo\"\n")
	if _, err := LoadAgent(dir); err == nil {
		t.Fatal("unknown key accepted")
	}
	// An unknown key is named with its line and the keys agent.toml has,
	// the near one first: a provider left singular would otherwise read
	// as "unknown field".
	write("run = \"x\"\n\nprovider = [\"openai\"]\n")
	if _, err := LoadAgent(dir); err == nil || !strings.Contains(err.Error(), "agent.toml:3: unknown key provider (did you mean providers?") ||
		!strings.Contains(err.Error(), "run, install, env, providers, egress, system_prompt, max_timeout_sec") {
		t.Errorf("unknown key: %v", err)
	}
	for typo, want := range map[string]string{"intsall": "install", "max_timout_sec": "max_timeout_sec", "egresz": "egress", "system_prompts": "system_prompt"} {
		write("run = \"x\"\n" + typo + " = 1\n")
		if _, err := LoadAgent(dir); err == nil || !strings.Contains(err.Error(), "unknown key "+typo+" (did you mean "+want+"?") {
			t.Errorf("%s: %v", typo, err)
		}
	}
	// A value of the wrong type names the key and the type it wants, not
	// the decoder's Go struct.
	for body, want := range map[string]string{
		"run = \"x\"\nproviders = \"openai\"\n":   `agent.toml:2: key providers: a list of strings (providers = ["anthropic"]), not a TOML string`,
		"run = 3\n":                               "agent.toml:1: key run: a string, not a TOML integer",
		"run = \"x\"\nmax_timeout_sec = \"60\"\n": "agent.toml:2: key max_timeout_sec: a number of seconds, not a TOML string",
		"run = \"x\"\n[env]\nA = 1\n":             "agent.toml:3: key env.A: a string, not a TOML integer",
	} {
		write(body)
		if _, err := LoadAgent(dir); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "struct") {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
	write("run = \"x\"\n[env]\nA = \"1\"\n[extra]\nb = 1\n")
	if _, err := LoadAgent(dir); err == nil || !strings.Contains(err.Error(), "agent.toml:4: unknown key extra (agent.toml keys:") {
		t.Errorf("unknown table: %v", err)
	}
	// max_timeout_sec: a finite number > 0; 0 is not "no cap", nan and inf
	// never become a budget.
	for _, v := range []string{"0", "nan", "inf", "-inf", "-1", "1e300"} {
		write("run = \"x\"\n# cap\nmax_timeout_sec = " + v + "\n")
		_, err := LoadAgent(dir)
		if err == nil || !strings.Contains(err.Error(), "agent.toml:3: key max_timeout_sec: must be a finite number > 0 (seconds)") {
			t.Errorf("max_timeout_sec = %s: %v", v, err)
		}
	}
	write("run = \"x\"\nmax_timeout_sec = 120\n")
	if a, err := LoadAgent(dir); err != nil || a.MaxTimeoutSec != 120 || a.Budget(600) != 120 {
		t.Errorf("max_timeout_sec = 120: %+v %v", a, err)
	}
}

// p renders an optional count: "null" when nil.
func p(v *int64) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(*v)
}

// TestParseUsageUnreportedIsNull: a Usage line carries only the counts it
// names; every other count is nil (unreported), and a reported 0 stays 0.
func TestParseUsageUnreportedIsNull(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		line                                      string
		prompt, completion, cacheR, cacheW, calls string
	}{
		{`{"_tag":"Usage","input_tokens":100,"output_tokens":20}`, "100", "20", "null", "null", "null"},
		{`{"_tag":"Usage","prompt_tokens":0,"cache_read_tokens":0}`, "0", "null", "0", "null", "null"},
		{`{"_tag":"Usage","cacheCreationInputTokens":9,"llmCallCount":3}`, "null", "null", "null", "9", "3"},
		{`{"_tag":"Usage","cost_usd":0.5}`, "null", "null", "null", "null", "null"},
		{`{"_tag":"Usage","input_tokens":null,"output_tokens":5}`, "null", "5", "null", "null", "null"},
	}
	for _, c := range cases {
		l := ParseLine(c.line, now)
		u, ok := l.Data.(*events.UsageData)
		if !ok {
			t.Fatalf("%s: not a Usage event: %+v", c.line, l)
		}
		got := [5]string{p(u.PromptTokens), p(u.CompletionTokens), p(u.CacheReadTokens), p(u.CacheWriteTokens), p(u.Calls)}
		if want := [5]string{c.prompt, c.completion, c.cacheR, c.cacheW, c.calls}; got != want {
			t.Errorf("%s: prompt, completion, cache read, cache write, calls = %v, want %v", c.line, got, want)
		}
	}
}

// TestParseLineKeepsAnpordFields: Started's sessionId, FileChange's paths,
// ToolCall's callId and status and Usage's explicit totalTokens are kept
// in the events, as Anpord's line protocol prints them.
func TestParseLineKeepsAnpordFields(t *testing.T) {
	now := time.Now()
	if d := ParseLine(`{"_tag":"Started","sessionId":"sess-42","model":"m"}`, now).Data.(*events.StartedData); d.SessionID != "sess-42" {
		t.Errorf("started %+v", d)
	}
	if d := ParseLine(`{"_tag":"FileChange","paths":["src/a.py","src/b.py",3],"kind":"edit"}`, now).Data.(*events.FileChangeData); d.Path != "src/a.py" ||
		strings.Join(d.Paths, ",") != "src/a.py,src/b.py" || d.Kind != "edit" {
		t.Errorf("file change %+v", d)
	}
	if d := ParseLine(`{"_tag":"ToolCall","callId":"call-7","name":"bash","status":"failed"}`, now).Data.(*events.ToolCallData); d.CallID != "call-7" || d.Status != "failed" || d.Name != "bash" {
		t.Errorf("tool call %+v", d)
	}
	if d := ParseLine(`{"_tag":"Usage","inputTokens":10,"outputTokens":5,"totalTokens":16}`, now).Data.(*events.UsageData); p(d.TotalTokens) != "16" || p(d.PromptTokens) != "10" {
		t.Errorf("usage %+v", d)
	}
}

package llmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, script string) (*Server, string) {
	t.Helper()
	s, err := ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := New(s)
	url, stop, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return srv, url
}

func post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", "sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// events reads an SSE body into (event, data) pairs.
func events(t *testing.T, resp *http.Response) (names []string, data []map[string]any) {
	t.Helper()
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, ev)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("data %q: %v", d, err)
			}
			data = append(data, m)
		}
	}
	return names, data
}

const twoTurns = `
model: claude-test
replies:
  - text: "Let me look."
    tool_use: [{name: Bash, input: {command: "ls /app"}}]
    usage: {input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 7}
  - error: {status: 529}
  - text: done
`

func TestStreamsToolUseTurnAndRecords(t *testing.T) {
	srv, url := start(t, twoTurns)
	resp := post(t, context.Background(), url, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	names, data := events(t, resp)
	want := "message_start content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if m := data[0]["message"].(map[string]any); m["model"] != "claude-test" {
		t.Errorf("model %v", m["model"])
	}
	if d := data[5]["delta"].(map[string]any); d["type"] != "input_json_delta" || d["partial_json"] != `{"command":"ls /app"}` {
		t.Errorf("tool delta %v", d)
	}
	if cb := data[4]["content_block"].(map[string]any); cb["name"] != "Bash" || cb["type"] != "tool_use" {
		t.Errorf("tool block %v", cb)
	}
	md := data[7]
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"] != 20.0 {
		t.Errorf("message_delta %v", md)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || reqs[0].Turn != 0 || reqs[0].APIKey != "sk-test" || !reqs[0].Stream || reqs[0].Model != "m" {
		t.Fatalf("recorded %+v", reqs)
	}
}

func TestTurnIsAssistantCountSoRetriesRepeatTheError(t *testing.T) {
	srv, url := start(t, twoTurns)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"},{"role":"user","content":"y"}]}`
	for range 2 {
		resp := post(t, context.Background(), url, body)
		var e struct {
			Type  string
			Error struct{ Type string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 529 || e.Type != "error" || e.Error.Type != "overloaded_error" || resp.Header.Get("x-should-retry") != "false" {
			t.Fatalf("status %d body %+v headers %v", resp.StatusCode, e, resp.Header)
		}
	}
	resp := post(t, context.Background(), url, strings.Replace(body, `"content":"y"}`, `"content":"y"},{"role":"assistant","content":"z"},{"role":"user","content":"w"}`, 1))
	names, _ := events(t, resp)
	if len(names) == 0 || names[len(names)-1] != "message_stop" {
		t.Fatalf("turn 2: %v", names)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("%d requests recorded, want 3", n)
	}
}

func TestHangEndsWhenClientGoes(t *testing.T) {
	srv, url := start(t, "replies: [{hang: true}]")
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, url, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	r := bufio.NewReader(resp.Body)
	line, _ := r.ReadString('\n')
	if line != "event: message_start\n" {
		t.Fatalf("first line %q", line)
	}
	got := make(chan error, 1)
	go func() { _, err := r.ReadString('!'); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("the hanging reply ended by itself: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	resp.Body.Close()
	srv.Close()
}

func TestWhenPicksAltWithoutTheString(t *testing.T) {
	_, url := start(t, `
replies: [{when: "abskill", text: "with the skill"}]
alt: [{text: "without"}]
`)
	for body, want := range map[string]string{
		`{"model":"m","system":"skills: abskill","messages":[{"role":"user","content":"hi"}]}`: "with the skill",
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`:                            "without",
	} {
		resp := post(t, context.Background(), url, body)
		var m struct{ Content []struct{ Text string } }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if len(m.Content) != 1 || m.Content[0].Text != want {
			t.Errorf("%s: %+v, want %q", body, m, want)
		}
	}
}

func TestParseScriptErrorsNameTheKey(t *testing.T) {
	for script, want := range map[string]string{
		"replies: [{error: {status: 200}}]":    "replies[0].error.status",
		"replies: [{tool_use: [{input: {}}]}]": "replies[0].tool_use[0].name",
		"after: forever":                       "after",
		"replies: [{txt: hi}]":                 "txt",
	} {
		_, err := ParseScript([]byte(script))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %s", script, err, want)
		}
	}
}

func TestCasesChooseByRequest(t *testing.T) {
	_, url := start(t, `
cases:
  - when: "TASK-A"
    replies: [{text: "a0"}, {text: "a1"}]
replies: [{text: "default"}]
`)
	for body, want := range map[string]string{
		`{"model":"m","messages":[{"role":"user","content":"TASK-A"}]}`:                                                                                                                                   "a0",
		`{"model":"m","messages":[{"role":"user","content":"TASK-A"},{"role":"assistant","content":"x"},{"role":"user","content":"y"}]}`:                                                                  "a1",
		`{"model":"m","messages":[{"role":"user","content":"TASK-A"},{"role":"assistant","content":"x"},{"role":"user","content":"y"},{"role":"assistant","content":"x"},{"role":"user","content":"y"}]}`: "done",
		`{"model":"m","messages":[{"role":"user","content":"other"}]}`:                                                                                                                                    "default",
	} {
		resp := post(t, context.Background(), url, body)
		var m struct{ Content []struct{ Text string } }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if len(m.Content) != 1 || m.Content[0].Text != want {
			t.Errorf("%s: %+v, want %q", body, m, want)
		}
	}
}

// TestErrorTimesThenTheReply: an error reply with times answers only the
// first requests of its turn with the error (a 429 a second run of the
// task does not meet); the later ones get the rest of the reply. Other
// conversations count apart.
func TestErrorTimesThenTheReply(t *testing.T) {
	_, url := start(t, `
cases:
  - when: "TASK-A"
    replies: [{error: {status: 429, times: 1}, text: "after the limit"}]
replies: [{error: {status: 429, times: 2}, text: "default after two"}]
`)
	got := func(body string) (int, string) {
		resp := post(t, context.Background(), url, body)
		defer resp.Body.Close()
		var m struct{ Content []struct{ Text string } }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		if len(m.Content) == 0 {
			return resp.StatusCode, ""
		}
		return resp.StatusCode, m.Content[0].Text
	}
	a := `{"model":"m","messages":[{"role":"user","content":"TASK-A"}]}`
	o := `{"model":"m","messages":[{"role":"user","content":"other"}]}`
	for i, c := range []struct {
		body   string
		status int
		text   string
	}{{a, 429, ""}, {o, 429, ""}, {a, 200, "after the limit"}, {o, 429, ""}, {o, 200, "default after two"}, {a, 200, "after the limit"}} {
		if st, text := got(c.body); st != c.status || text != c.text {
			t.Errorf("request %d: %d %q, want %d %q", i, st, text, c.status, c.text)
		}
	}
	if _, err := ParseScript([]byte("replies: [{error: {status: 429, times: -1}}]")); err == nil || !strings.Contains(err.Error(), "replies[0].error.times") {
		t.Errorf("times -1: %v", err)
	}
}

// TestResponsesStream: the Responses API streams each output item as the
// API does (added, its delta, done) before response.completed; a turn
// counts a run of the model's output items once (a message and its
// function call sent back are one answer); a case with api answers only
// requests of that API.
func TestResponsesStream(t *testing.T) {
	_, url := start(t, `
cases:
  - when: "CASE-A"
    api: openai.responses
    replies:
      - text: "Looking."
        tool_use: [{name: exec_command, input: {cmd: "ls"}}]
      - text: "Done."
  - when: "CASE-A"
    replies: [{text: "the other API"}]
`)
	post := func(path, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	names, data := events(t, post("/v1/responses", `{"model":"m","stream":true,"input":[{"role":"user","content":"CASE-A"}]}`))
	want := "response.created response.output_item.added response.output_text.delta response.output_item.done response.output_item.added response.function_call_arguments.delta response.output_item.done response.completed"
	if strings.Join(names, " ") != want {
		t.Errorf("events %v, want %s", names, want)
	}
	if it, _ := data[6]["item"].(map[string]any); len(data) < 7 || it["type"] != "function_call" || it["name"] != "exec_command" || it["arguments"] != `{"cmd":"ls"}` {
		t.Errorf("function call item: %v", data)
	}
	second := `{"model":"m","stream":true,"input":[{"role":"user","content":"CASE-A"},{"type":"message","role":"assistant","content":[]},{"type":"function_call","call_id":"c"},{"type":"function_call_output","call_id":"c","output":"x"}]}`
	if _, data := events(t, post("/v1/responses", second)); !strings.Contains(fmt.Sprint(data[len(data)-1]), "Done.") {
		t.Errorf("turn 1 answered %v", data[len(data)-1])
	}
	resp := post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"CASE-A"}]}`)
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if !strings.Contains(fmt.Sprint(body), "the other API") {
		t.Errorf("chat completions answered %v", body)
	}
}

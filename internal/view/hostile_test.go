package view_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/view"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// hostile is what an agent writes to act on whoever reads it: a terminal
// retitle and bell, a carriage return, a right-to-left override, a C1
// control, an isolate and a tag character.
const hostile = "\x1b]0;pwned\x07\rfake\u202eevil\u0085\u2066x\u2069\U000e0041"

// TestViewHostileText: a run whose task name, harness's tool name,
// messages, command output, Finished reason, error and cell files hold
// hostile text. Every text of the run page and the cell page (text nodes,
// hidden ones of closed details included, and the title attributes and
// the document's title) is textsafe, and the text shows escaped, as
// textsafe.Text shows it: app.js's printable is the same rule, checked on
// a corpus against the Go function.
func TestViewHostileText(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	_, b := startNATS(t)
	out := filepath.Join(t.TempDir(), "out")
	runID, cells := publishRun(t, b, 1, 1, out, false)
	evil := events.CellID("evil"+hostile, "agent:h0", "m", 1)
	fin := events.FinishedData{Reason: hostile, ExitCode: 0, StdoutTail: "tail " + hostile}
	if err := b.PublishAll(context.Background(),
		events.Must(events.CellPlanned, runID, evil, 1, "test", events.CellPlannedData{Task: "evil" + hostile, Harness: "agent:h0", Model: "m", Repeat: 1}),
		events.Must(events.CellErrored, runID, evil, 1, "test", events.CellErroredData{ErrorClass: "solver_error", Error: "install: " + hostile}),
		events.Must(events.Message, runID, cells[0], 1, "test", events.MessageData{Role: "assistant", Text: "said " + hostile}),
		events.Must(events.ToolCall, runID, cells[0], 1, "test", events.ToolCallData{Name: "tool" + hostile, Input: map[string]any{"cmd": hostile}}),
		events.Must(events.Command, runID, cells[0], 1, "test", events.CommandData{Command: "run " + hostile, Output: "out " + hostile}),
		events.Must(events.Finished, runID, cells[0], 1, "test", fin),
	); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(out, "task-00000", "0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "solve.log"), []byte("log "+hostile+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startView(t, b, view.Config{Version: "test"})

	// Everything a person can read on the page: every text node (closed
	// details too), the title attributes and the document's title.
	const readable = `(() => {
		const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		const parts = [document.title];
		while (w.nextNode()) parts.push(w.currentNode.nodeValue);
		for (const e of document.querySelectorAll("[title], [alt]")) parts.push(e.getAttribute("title") || "", e.getAttribute("alt") || "");
		return parts.join("\n");
	})()`
	check := func(page string, want ...string) {
		t.Helper()
		text, err := br.eval(t, readable)
		if err != nil {
			t.Fatal(err)
		}
		if !textsafe.Safe(text) {
			t.Errorf("%s is not textsafe:\n%q", page, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q:\n%s", page, w, text)
			}
		}
		br.noErrors(t, page)
	}
	esc := textsafe.Text(hostile)
	br.open(t, srv.URL+"/runs/"+runID, `document.querySelectorAll("#grid tbody tr").length === 2`)
	check("run page", "evil"+esc)
	br.open(t, srv.URL+cellPath(runID, cells[0]), `document.querySelector("#transcript") && document.querySelector("#files") &&
		document.querySelector("#files").innerText.includes("log ")`)
	check("cell page", "said "+esc, "tool tool"+esc, "out "+esc, "log "+esc)
	br.open(t, srv.URL+cellPath(runID, evil), `document.querySelector("#cell-state")`)
	check("errored cell page", "evil"+esc)

	// printable (app.js) and textsafe.Text agree.
	corpus := []string{"plain", "tab\tand\nnewline", "crlf\r\nline", "bar\rover", "\x1b[31mred\x1b[0m", "del\x7f",
		"c1 \u0085 \u009b", "ls \u2028 ps \u2029", "bidi \u202eevil\u202c", "isolate \u2066x\u2069", "marks \u200e\u200f\u061c",
		"format \u206a\u206f", "tag \U000e0041 \U000e007f", "accents é, emoji 🙂, 👨\u200d👩", `back\slash \x00`, hostile}
	in, _ := json.Marshal(corpus)
	got, err := br.eval(t, `JSON.stringify(`+string(in)+`.map(printable))`)
	if err != nil {
		t.Fatal(err)
	}
	var js []string
	if err := json.Unmarshal([]byte(got), &js); err != nil {
		t.Fatal(err)
	}
	for i, s := range corpus {
		if js[i] != textsafe.Text(s) {
			t.Errorf("printable(%q) = %q, textsafe.Text %q", s, js[i], textsafe.Text(s))
		}
	}
}

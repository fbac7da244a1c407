package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestAgentFinalAnswerKept: an agent that prints 20 lines of 1 KB of
// response text (an event line among them) and then its final answer gets
// a Message{role: response} holding the last 4 KiB of the text, which ends
// with the answer, and the whole response in the cell's response.txt.
func TestAgentFinalAnswerKept(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	home := t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	agent := t.TempDir()
	// Each line is "line NN " and 508 two-byte runes: 1,025 bytes with the
	// newline, so the 4 KiB cut falls inside a rune.
	script := `for i in $(seq -w 1 20); do
  printf 'line %s %s\n' "$i" "$(printf 'é%.0s' $(seq 508))"
  [ "$i" = 10 ] && echo '{"_tag":"Usage","input_tokens":5,"output_tokens":1}'
done
echo
echo 'FINAL ANSWER: 42'
`
	if err := os.WriteFile(filepath.Join(agent, "agent.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agent, "agent.toml"), []byte("run = \"bash /opt/proctor/agent/agent.sh\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := runMain(t, "tasks", "run", "--tasks-root", patientAgentRoot(t), "--all", "--harnesses", "agent:"+agent)
	if len(a.Results) != 1 {
		t.Fatalf("%d rows", len(a.Results))
	}
	row := a.Results[0]
	if row.ErrorClass != "" || row.Metrics.PromptTokens == nil || *row.Metrics.PromptTokens != 5 {
		t.Fatalf("row %+v", row)
	}

	// The whole response, without the event line, is in response.txt.
	whole, err := os.ReadFile(filepath.Join(row.OutputDir, "response.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(whole), "\n"), "\n")
	if len(lines) != 22 || !strings.HasPrefix(lines[0], "line 01 é") || !strings.HasPrefix(lines[19], "line 20 é") ||
		lines[20] != "" || lines[21] != "FINAL ANSWER: 42" || strings.Contains(string(whole), "_tag") {
		t.Fatalf("response.txt: %d lines, first %.20q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if len(whole) != 20*1025+1+len("FINAL ANSWER: 42\n") {
		t.Fatalf("response.txt holds %d bytes", len(whole))
	}

	// The response message holds its last 4 KiB, ending with the answer.
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var responses []string
	err = b.ReadRun(context.Background(), a.Run.ID, func(ev events.Envelope) error {
		if ev.Type != events.Message {
			return nil
		}
		var m events.MessageData
		if err := events.Into(ev, &m); err != nil {
			return err
		}
		if m.Role == "response" {
			responses = append(responses, m.Text)
		}
		return nil
	})
	if err != nil || len(responses) != 1 {
		t.Fatalf("%d response messages (%v)", len(responses), err)
	}
	r := responses[0]
	if !strings.HasSuffix(r, "\n\nFINAL ANSWER: 42") || len(r) > cellfs.RowTailBytes || len(r) < cellfs.RowTailBytes-utf8.UTFMax || !utf8.ValidString(r) {
		t.Fatalf("response message: %d bytes, valid %v, ends %q", len(r), utf8.ValidString(r), r[max(0, len(r)-40):])
	}
	if want := strings.TrimSpace(string(whole)); !strings.HasSuffix(want, r) {
		t.Fatal("the response message is not the end of response.txt")
	}
}

// TestAgentLongResponseLineKept: response.txt holds an agent's response
// text whole up to its 64 MiB cap, as the README says: a 3 MiB line of
// two-byte runes and a 2 MiB line that looks like an event line (a Usage
// padded past the 1 MiB line bound) are kept whole (the first 1 MiB was
// kept, the rest dropped, with nothing to say so); neither is read as an
// event, and the row and the cell's Finished count both as long_lines.
// Past the cap the file ends with a line saying so and the row has
// response_truncated.
func TestAgentLongResponseLineKept(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	agent := func(script string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "agent.sh"), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "agent.toml"), []byte("run = \"bash /opt/proctor/agent/agent.sh\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	long := agent(`yes é | head -n 1572864 | tr -d '\n'; echo ' END'
printf '{"_tag":"Usage","input_tokens":7,"output_tokens":1,"pad":"'; head -c 2097152 /dev/zero | tr '\0' p; echo '"}'
echo 'FINAL ANSWER: 42'
`)
	// 65 MiB of response text in 64 KiB lines: response.txt is cut at 64 MiB.
	flood := agent(`head -c 68157440 /dev/zero | tr '\0' r | fold -w 65535
echo 'FINAL ANSWER: 42'
`)
	a, _ := runMain(t, "tasks", "run", "--tasks-root", patientAgentRoot(t), "--all", "--harnesses", "agent:"+long+",agent:"+flood)
	rows := byCell(a)
	row := rows["process-check agent:"+long]
	whole, err := os.ReadFile(filepath.Join(row.OutputDir, "response.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("é", 1572864) + " END\n" +
		`{"_tag":"Usage","input_tokens":7,"output_tokens":1,"pad":"` + strings.Repeat("p", 2<<20) + "\"}\n" +
		"FINAL ANSWER: 42\n"
	if string(whole) != want {
		t.Fatalf("response.txt: %d bytes, want %d; ends %q", len(whole), len(want), whole[max(0, len(whole)-40):])
	}
	if row.Metrics.LongLines != 2 || row.Metrics.ResponseTruncated || row.Metrics.PromptTokens != nil {
		t.Fatalf("long_lines %d, response_truncated %v, prompt_tokens %v; want 2, false, null (the long line is no event)",
			row.Metrics.LongLines, row.Metrics.ResponseTruncated, row.Metrics.PromptTokens)
	}

	row = rows["process-check agent:"+flood]
	st, err := os.Stat(filepath.Join(row.OutputDir, "response.txt"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(row.OutputDir, "response.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	end := make([]byte, 100)
	n, _ := f.ReadAt(end, st.Size()-100)
	if !strings.Contains(string(end[:n]), "[proctor: output capped at 67108864 bytes of 6815") || !row.Metrics.ResponseTruncated || row.Metrics.LongLines != 0 {
		t.Fatalf("response.txt of %d bytes ends %q; response_truncated %v, long_lines %d", st.Size(), end[:n], row.Metrics.ResponseTruncated, row.Metrics.LongLines)
	}
}

// patientAgentRoot is a copy of testdata/agent-root whose agent budget is
// 120 s instead of 8 s, for agents that end by themselves: the budget is
// generous where no test waits for it.
func patientAgentRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	copyDir(t, abs(t, "testdata/agent-root"), root)
	toml := filepath.Join(root, "process-check", "task.toml")
	b, err := os.ReadFile(toml)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(toml, bytes.Replace(b, []byte("[agent]\ntimeout_sec = 8\n"), []byte("[agent]\ntimeout_sec = 120\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

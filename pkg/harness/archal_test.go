package harness

import (
	"os"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/cellfs"
)

// TestArchalReported: exitReason becomes terminal_reason (an unknown
// value verbatim and named in run.log), and an agent that gave no usage
// of its own is labelled not reported by harness.
func TestArchalReported(t *testing.T) {
	dir := cellfs.Dir(t.TempDir())
	for in, want := range map[string]string{"completed": "completed", "Max-Turns": "max_turns", "TIMEOUT": "timeout", "end_turn": "completed", "rate limited": "api_error"} {
		if got, ok := TerminalReason(in); !ok || got != want {
			t.Errorf("%q -> %q %v, want %q", in, got, ok, want)
		}
	}
	m := archalReported(dir, Metrics{"exitReason": "handed_off", "inputTokens": 3.0}, false)
	if m["terminal_reason"] != "handed_off" || m["exitReason"] != "handed_off" || m["metrics_json"] != nil {
		t.Errorf("unknown exitReason: %v", m)
	}
	if b, _ := os.ReadFile(dir.Path("run.log")); !strings.Contains(string(b), `exitReason "handed_off" is not one proctor maps`) {
		t.Errorf("run.log: %s", b)
	}
	if m := archalReported(dir, Metrics{"exitReason": "max_steps", "terminal_reason": "own"}, false); m["terminal_reason"] != "own" {
		t.Errorf("the agent's own terminal_reason is replaced: %v", m)
	}
	if m := archalReported(dir, nil, false); m["metrics_json"] != NotReported+" (no metrics.json)" {
		t.Errorf("no metrics.json: %v", m)
	}
	if m := archalReported(dir, nil, true); m != nil {
		t.Errorf("no metrics.json but Usage lines: %v", m)
	}
	if m := archalReported(dir, Metrics{"error": "metrics.json: bad"}, false); m["metrics_json"] != NotReported || m["error"] != "metrics.json: bad" {
		t.Errorf("malformed: %v", m)
	}
}

// TestRecordedCommands: the trace is NUL-terminated commands; a
// multi-line command stays one, blank ones are skipped.
func TestRecordedCommands(t *testing.T) {
	got := RecordedCommands([]byte("ls /\x00false\x00\x00for i in 1 2; do\n echo $i\ndone\x00  \x00tail"))
	want := []string{"ls /", "false", "for i in 1 2; do\n echo $i\ndone", "tail"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%q, want %q", got, want)
	}
}

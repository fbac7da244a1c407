package harness

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// The recorder (Anpord's command trace): a script every non-interactive
// bash the agent starts sources through BASH_ENV, whose DEBUG trap
// appends the text of each simple command it runs to ANPORD_TRACE_LOG,
// NUL-terminated. The agent's own run command (the bash proctor starts,
// PROCTOR_RECORDER_PID) is not traced; the shells it starts are.
const (
	// RecorderPath is where the recorder script is in the sandbox: root's,
	// readable by the agent.
	RecorderPath = "/opt/proctor/recorder.sh"
	// TraceLog is ANPORD_TRACE_LOG: the agent's, in /agent-output.
	TraceLog = agentOutput + "/trace.log"
	// MaxTraceBytes bounds the trace read back.
	MaxTraceBytes = 16 << 20
)

// recorderScript is the script at RecorderPath.
const recorderScript = `# proctor's command recorder, sourced by non-interactive bash through BASH_ENV.
if [ -n "${BASH_VERSION:-}" ] && [ -n "${ANPORD_TRACE_LOG:-}" ] && [ "$$" != "${PROCTOR_RECORDER_PID:-}" ]; then
  __proctor_record() { printf '%s\0' "$BASH_COMMAND" >> "$ANPORD_TRACE_LOG" 2>/dev/null; }
  trap '__proctor_record' DEBUG
fi
`

// recorderEnv are the variables of the recorder in the agent's
// environment. BASH_ENV itself is set by agentCommand's wrapper on the run
// command only, so proctor's own wrapper is not traced.
func recorderEnv() map[string]string {
	return map[string]string{"ANPORD_TRACE_LOG": TraceLog}
}

// publishRecorded reads the trace (TraceLog) back after the solve and
// publishes each command as a Command event with a null exit code, except
// one whose text is byte-identical to a Command line the agent printed
// itself (each printed line absorbs one recorded command). A trace that
// is missing, too large or unreadable is named in run.log. The caller
// holds run.mu.
func publishRecorded(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, run *stream, dir cellfs.Dir) {
	fr, ok := d.(sandbox.FileReader)
	if !ok {
		return
	}
	b, err := fr.ReadFile(ctx, h, TraceLog, MaxTraceBytes)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return
	case err != nil:
		dir.Logf("%s not read: %v", TraceLog, err)
		return
	}
	cmds := RecordedCommands(b)
	n := 0
	for _, c := range cmds {
		if run.printed[c] > 0 {
			run.printed[c]--
			continue
		}
		run.publish(events.Command, events.CommandData{Command: c}, time.Time{})
		n++
	}
	dir.Logf("recorder: %d commands traced, %d recorded as Command events (the rest the agent printed itself)", len(cmds), n)
}

// RecordedCommands splits a trace into its commands (NUL-terminated; an
// unterminated last one is kept, empty ones skipped).
func RecordedCommands(b []byte) []string {
	var out []string
	for _, c := range bytes.Split(b, []byte{0}) {
		if len(bytes.TrimSpace(c)) > 0 {
			out = append(out, string(c))
		}
	}
	return out
}

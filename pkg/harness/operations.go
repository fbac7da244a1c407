package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"strings"
	"time"
	"unicode"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// AgentOperationsFile is where an in-container agent appends its
// operations, one JSON object a line (PROCTOR_OPERATIONS_FILE and
// DOKIMI_OPERATIONS_FILE name it), as a command appends to its
// {output_dir}'s operations file: each line becomes an Operation event
// (OperationFrom) after the solve.
const AgentOperationsFile = agentOutput + "/operations.jsonl"

// MaxOperationsBytes caps an operations file: 16 MiB. A larger one is not
// read (run.log says so).
const MaxOperationsBytes = 16 << 20

// maxOperationLine is the longest operations-file line read (4 MiB); a
// longer one ends the reading there, as a malformed file.
const maxOperationLine = 4 << 20

// publishOperationLines turns the JSON lines of an operations file (name,
// for run.log) into Operation events (OperationFrom) at the time they are
// read. Lines that are not JSON objects are skipped and counted in
// run.log. The caller holds run.mu.
func publishOperationLines(run *stream, dir cellfs.Dir, name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxOperationLine)
	bad := 0
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil || m == nil {
			bad++
			continue
		}
		run.publish(events.Operation, OperationFrom(m), time.Time{})
	}
	if bad > 0 {
		dir.Logf("%d lines of %s were not JSON objects", bad, name)
	}
	return sc.Err()
}

// readAgentOperations reads AgentOperationsFile straight from the sandbox
// (a regular file of at most MaxOperationsBytes: a link, a device or a
// larger file is not read, never followed through the host; the driver's
// FileReader ability) after the agent's processes are gone, and publishes
// its lines (publishOperationLines). No file is no operation. The caller
// holds run.mu.
func readAgentOperations(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, run *stream, dir cellfs.Dir) {
	fr, ok := d.(sandbox.FileReader)
	if !ok {
		return
	}
	b, err := fr.ReadFile(ctx, h, AgentOperationsFile, MaxOperationsBytes)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return
	case err != nil:
		dir.Logf("%s not read: %v", AgentOperationsFile, err)
		return
	}
	if err := publishOperationLines(run, dir, "operations.jsonl", bytes.NewReader(b)); err != nil {
		dir.Logf("%s: %v", AgentOperationsFile, err)
	}
}

// Low-fidelity operation types: the words an unstructured output line
// mentions (LowFidelityType).
const (
	LowFidelityTool     = "tool"
	LowFidelitySubagent = "subagent"
	LowFidelityLoop     = "loop"
)

// lowFidelityWords maps the words LowFidelityType looks for to their type.
var lowFidelityWords = map[string]string{
	"tool": LowFidelityTool, "tools": LowFidelityTool,
	"subagent": LowFidelitySubagent, "subagents": LowFidelitySubagent,
	"loop": LowFidelityLoop, "loops": LowFidelityLoop,
}

// LowFidelityType returns the low-fidelity operation type an unstructured
// output line stands for, as the task-runs seed counts them: the first
// word of the line, case ignored, that is "tool" or "tools" (type tool),
// "subagent" or "subagents" (subagent), "loop" or "loops" (loop); "" when
// it mentions none. A word is a run of letters, so "tool_use" and
// "[tool]" hold the word tool, "toolbox" and "sub-agent" do not.
func LowFidelityType(line string) string {
	for _, w := range strings.FieldsFunc(line, func(r rune) bool { return !unicode.IsLetter(r) }) {
		if len(w) > len("subagents") {
			continue
		}
		if t, ok := lowFidelityWords[strings.ToLower(w)]; ok {
			return t
		}
	}
	return ""
}

// noteLow counts line as a low-fidelity operation when it mentions one
// (LowFidelityType). The caller holds r.mu.
func (r *stream) noteLow(line string) {
	if t := LowFidelityType(line); t != "" {
		if r.lowOps == nil {
			r.lowOps = map[string]int{}
		}
		r.lowOps[t]++
	}
}

// stderrLines returns the writer a solve's stderr goes through: its lines
// are counted as low-fidelity operations (noteLow). Close it once the
// solve has ended, before lowFidelity.
func (r *stream) stderrLines() *sandbox.Lines {
	return sandbox.NewLines(func(line string, _ bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.noteLow(line)
	}, 0)
}

// lowFidelity is the solve's low-fidelity operation counts by type
// (FinishedData.LowFidelityOps); nil when there were none. The caller
// holds r.mu.
func (r *stream) lowFidelity() map[string]int { return maps.Clone(r.lowOps) }

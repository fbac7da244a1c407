package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/proctor-eval/proctor/pkg/cellfs"
)

// SolverFile is the claim file a command may leave in its {output_dir}, as
// the task-runs seed writes a cell's solver.json: the Claude CLI's result
// event, or another solver's final claim.
const SolverFile = "solver.json"

// solverClaimKeys are the keys read for a solver.json's final message, in
// order: the Claude result event's "result", then the names other solvers
// use.
var solverClaimKeys = []string{"result", "final_message", "claim", "response", "text"}

// readSolverClaim reads the solver.json a command left in outDir, when it
// is a regular file (not followed through a link) of at most
// MaxMetricsBytes holding a JSON object: its final message is the first
// string among solverClaimKeys, and reported holds its "subtype" and
// "is_error" when present (a Claude result that is not a success never
// claims one: artifact.NewAgentClaim). No file gives nothing; a file that
// is not such an object is logged in run.log and ignored.
func readSolverClaim(dir cellfs.Dir, outDir string) (text string, reported map[string]any) {
	path := filepath.Join(outDir, SolverFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	fail := func(why string) (string, map[string]any) {
		dir.Logf("%s ignored: %s", SolverFile, why)
		return "", nil
	}
	switch {
	case err != nil:
		return fail(err.Error())
	case !fi.Mode().IsRegular():
		return fail("not a regular file")
	case fi.Size() > MaxMetricsBytes:
		return fail(fmt.Sprintf("%d bytes, over %d", fi.Size(), MaxMetricsBytes))
	}
	f, err := os.Open(path)
	if err != nil {
		return fail(err.Error())
	}
	defer f.Close()
	var m map[string]any
	if err := json.NewDecoder(io.LimitReader(f, MaxMetricsBytes)).Decode(&m); err != nil || m == nil {
		return fail("not a JSON object")
	}
	for _, k := range solverClaimKeys {
		if s, ok := m[k].(string); ok && strings.TrimSpace(s) != "" {
			text = s
			break
		}
	}
	for _, k := range []string{"subtype", "is_error"} {
		if v, ok := m[k]; ok {
			if reported == nil {
				reported = map[string]any{}
			}
			reported[k] = v
		}
	}
	return text, reported
}

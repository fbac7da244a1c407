package artifact

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestOlderArtifactRenders: an artifact written by an older proctor
// (testdata/older/task_runs-9ba59aa.json: the example tasks through the
// oracle and both example agents, written at commit 9ba59aa, before
// agent_claim, tamper and verifier findings, Newcombe intervals and the
// row's step and attempt fields existed) is read under today's schema
// and re-rendered; the report equals testdata/older/report.md (-update
// rewrites it).
func TestOlderArtifactRenders(t *testing.T) {
	a, err := Read(filepath.Join("testdata", "older", "task_runs-9ba59aa.json"))
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "older", "report.md"), md.Bytes())
}

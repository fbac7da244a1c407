package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/taskcheck"
)

// qcLabels is examples/qc-set/labels.json.
type qcLabels struct {
	Checks string `json:"checks"`
	Labels map[string]struct {
		Verdict   taskcheck.Verdict `json:"verdict"`
		DecidedBy string            `json:"decided_by"`
	} `json:"labels"`
}

// TestQCSetLabels runs `proctor tasks check` over the labelled QC set of
// examples/qc-set (real Docker: the oracle, the no-op agent and the cheats
// the labels name, plus the static checks) and compares every task's
// verdict and deciding check with its label: each clean task PASSes, each
// defect FAILs or WARNs by the check its label names (an unconditional
// reward, a missing solution, a solution copied into the image, an
// agent-writable verifier, a conftest a planted file can override, a
// truth file baked into the image, set -e aborting before the reward, a
// wall-clock-dependent verifier, a literal-only verifier, a verifier
// helper baked into the environment, a .pyc left by a generator, a grader
// reading a file the agent can write). Every task of the set is labelled
// and every label has a task.
func TestQCSetLabels(t *testing.T) {
	testutil.LongE2E(t)
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root, err := filepath.Abs("../../examples/qc-set")
	if err != nil {
		t.Fatal(err)
	}
	var labels qcLabels
	b, err := os.ReadFile(filepath.Join(root, "labels.json"))
	if err != nil || json.Unmarshal(b, &labels) != nil {
		t.Fatalf("labels.json: %v", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []string
	for _, e := range entries {
		if e.IsDir() {
			tasks = append(tasks, e.Name())
			if _, ok := labels.Labels[e.Name()]; !ok {
				t.Errorf("task %s has no label", e.Name())
			}
		}
	}
	if len(tasks) != len(labels.Labels) {
		t.Errorf("%d tasks, %d labels", len(tasks), len(labels.Labels))
	}
	out := t.TempDir()
	js := filepath.Join(out, "check.json")
	var stdout, stderr bytes.Buffer
	code := mainT(t, []string{"tasks", "check", "--tasks-root", root, "--all", "--checks", labels.Checks, "--concurrency", "2",
		"--output-dir", out, "--out-json", js}, &stdout, &stderr)
	var rep taskcheck.Report
	if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("exit %d: %v\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	if code != ExitError {
		t.Errorf("exit %d, want %d (the set holds FAILs)", code, ExitError)
	}
	got := map[string]taskcheck.TaskResult{}
	for _, tr := range rep.Tasks {
		got[tr.Task] = tr
	}
	sort.Strings(tasks)
	for _, name := range tasks {
		want, tr := labels.Labels[name], got[name]
		if tr.Verdict != want.Verdict || tr.DecidedBy != want.DecidedBy {
			t.Errorf("%s: %s decided by %q, labelled %s by %q\nfindings: %+v", name, tr.Verdict, tr.DecidedBy, want.Verdict, want.DecidedBy, tr.Findings)
		}
	}
	if m := runIDRe.FindStringSubmatch(stdout.String()); m != nil {
		if nc, nn := leftovers(t, cli, m[1]); nc+nn > 0 {
			t.Errorf("%d containers and %d networks of the check run remain", nc, nn)
		}
	}
}

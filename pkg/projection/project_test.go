package projection

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

var update = flag.Bool("update", false, "rewrite the expected files in testdata/ from the projection")

// goldenRun is the run id of testdata/golden.events.jsonl.
const goldenRun = "01J9Z3K2W8RQ6N7T5V4X3Y2Z1A"

// readLog reads a JSONL fixture of envelopes, one per line, checked by
// events.Decode.
func readLog(t testing.TB, path string) []events.Envelope {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []events.Envelope
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		e, err := events.Decode(sc.Bytes())
		if err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func fold(runID string, evs []events.Envelope) *Projector {
	p := NewProjector(runID)
	for _, e := range evs {
		p.Apply(e)
	}
	return p
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (rerun this test with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the projection; review with -update and git diff\n--- got ---\n%s", path, got)
	}
}

// TestProjectGolden projects the fixture log (every outcome, a
// redelivered cell with stale events of its first attempt, duplicated
// event ids, telemetry, a cell without terminal event) into the expected
// artifact and report, twice, with identical bytes.
func TestProjectGolden(t *testing.T) {
	evs := readLog(t, "testdata/golden.events.jsonl")
	js, md, err := Render(fold(goldenRun, evs), "test")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "golden.artifact.json", js)
	golden(t, "golden.report.md", md)
	js2, md2, err := Render(fold(goldenRun, evs), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(js, js2) || !bytes.Equal(md, md2) {
		t.Fatal("projecting the same log twice gave different bytes")
	}

	// What the fixture exists for, asserted on the rows as well as by bytes.
	a, err := artifact.Unmarshal("golden", js)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.CellID] = r
	}
	want := map[string]string{
		"fix-sum/oracle/m1/1":          "passed",
		"csv-columns/oracle/m1/1":      "partial",
		"count-words/oracle/m1/1":      "failed",
		"slow-check/oracle/m1/1":       "verifier_timeout",
		"bad-reward/oracle/m1/1":       "verifier_error",
		"needs-token/oracle/m1/1":      "errored",
		"home-workdir/agent:demo/m1/1": "errored",
		"fix-sum/agent:demo/m1/1":      "passed",
		"csv-columns/agent:demo/m1/1":  "partial",
		"count-words/agent:demo/m1/1":  "errored",
		"slow-check/agent:demo/m1/1":   "solver_timeout",
		"bad-reward/agent:demo/m1/1":   "errored",
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for id, outcome := range want {
		if rows[id].Outcome != outcome {
			t.Errorf("%s: outcome %q, want %q", id, rows[id].Outcome, outcome)
		}
	}
	classes := map[string]string{"needs-token/oracle/m1/1": "unresolved_env", "home-workdir/agent:demo/m1/1": "refused",
		"count-words/agent:demo/m1/1": "solver_error", "bad-reward/agent:demo/m1/1": "infra"}
	for id, class := range classes {
		if rows[id].ErrorClass != class {
			t.Errorf("%s: error_class %q, want %q", id, rows[id].ErrorClass, class)
		}
	}
	re := rows["fix-sum/agent:demo/m1/1"]
	if re.Attempt != 2 || *re.Metrics.PromptTokens != 2700 || *re.Metrics.CostUSD != 0.02 || re.StdoutTail != "fixed\n" || re.Metrics.OperationCount != 1 {
		t.Errorf("redelivered cell kept attempt-1 data: attempt %d, prompt %d, cost %v, tail %q, ops %d",
			re.Attempt, *re.Metrics.PromptTokens, *re.Metrics.CostUSD, re.StdoutTail, re.Metrics.OperationCount)
	}
	dup := rows["csv-columns/agent:demo/m1/1"]
	if *dup.Metrics.NCalls != 3 || *dup.Metrics.PromptTokens != 2800 || dup.Metrics.ToolCalls["bash"] != 1 ||
		dup.Metrics.OperationsByType["db_query"] != 2 || dup.Metrics.Egress.Denied != 1 {
		t.Errorf("telemetry of the duplicated-id cell: %+v", dup.Metrics)
	}
}

// TestProjectGoldenThroughBus publishes the fixture into a real JetStream
// server and checks that Project reads back the same artifact bytes (the
// stream's duplicate window drops the repeated ids; the projection would
// drop them too).
func TestProjectGoldenThroughBus(t *testing.T) {
	evs := readLog(t, "testdata/golden.events.jsonl")
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	if err := b.PublishAll(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	p, err := Project(ctx, b, goldenRun)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Render(p, "test")
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := Render(fold(goldenRun, evs), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the log read back from JetStream projects to different bytes than the fixture")
	}
	rec := p.Record()
	if rec.Status != bus.StatusInterrupted || rec.Cells != 12 || rec.Counts["errored"] != 4 || rec.StartedAt != "2025-01-15T10:00:00Z" || rec.FinishedAt != "2025-01-15T10:00:30Z" {
		t.Errorf("record %+v", rec)
	}
}

// TestProgress follows the fixture event by event: before RunFinished the
// cell without a terminal event is running, and after it every count
// equals the artifact's summary.
func TestProgress(t *testing.T) {
	evs := readLog(t, "testdata/golden.events.jsonl")
	p := NewProjector(goldenRun)
	sawQueued := false
	for _, e := range evs {
		if e.Type == events.RunFinished {
			got := map[string]HarnessProgress{}
			for _, h := range p.Progress() {
				got[h.Harness] = h
			}
			if h := got["agent:demo"]; h.Running != 1 || h.Done != 5 || h.States[StateRunning] != 1 {
				t.Errorf("before RunFinished: %+v", h)
			}
			if s := p.CellState("bad-reward/agent:demo/m1/1"); s != StateRunning {
				t.Errorf("unfinished cell state %q", s)
			}
		}
		p.Apply(e)
		if e.Type == events.CellPlanned && p.States()[StateQueued] > 0 {
			sawQueued = true
		}
	}
	if !sawQueued {
		t.Error("no cell was ever queued")
	}
	a := p.Artifact("test")
	for _, h := range p.Progress() {
		s := a.Summary.PerHarness[h.Harness]
		if s == nil || h.Cells != s.N || h.Done != s.N || h.Errored != s.Errored || h.Scored != s.Scored || h.Passed != s.Passed || h.Running+h.Queued != 0 {
			t.Errorf("%s: progress %+v, summary %+v", h.Harness, h, s)
		}
		if (h.PassRate == nil) != (s.PassRate == nil) || (h.PassRate != nil && *h.PassRate-*s.PassRate > 1e-6) {
			t.Errorf("%s: pass rate %v, summary %v", h.Harness, h.PassRate, s.PassRate)
		}
	}
	if s := p.CellState("bad-reward/agent:demo/m1/1"); s != artifact.OutcomeErrored {
		t.Errorf("after RunFinished the unfinished cell is %q, want errored", s)
	}
	if s := p.CellState("no/such/cell/1"); s != "" {
		t.Errorf("unknown cell state %q", s)
	}
}

// TestSetupCheckIsTheLogs: which harnesses are setup checks is what
// their CellPlanned says (setup_check), not what this build's arms would
// say of their names: a harness planned as a setup check gets no
// comparison whatever its name, and one named "oracle" whose log predates
// the key, or says otherwise, is compared like any other.
func TestSetupCheckIsTheLogs(t *testing.T) {
	const run = "run-setup-check"
	one := 1.0
	spec := events.RunSpec{TasksRoot: "/t", Harnesses: []string{"base", "oracle", "chk"}, Models: []string{"m"}, Repeats: 1, BaselineHarness: "base"}
	evs := []events.Envelope{
		events.Must(events.RunRequested, run, "", 0, "cli", events.RunRequestedData{Spec: spec}),
		events.Must(events.RunPlanned, run, "", 0, "planner", events.RunPlannedData{Cells: 3}),
	}
	for _, h := range spec.Harnesses {
		id := events.CellID("a", h, "m", 1)
		evs = append(evs,
			events.Must(events.CellPlanned, run, id, 1, "planner", events.CellPlannedData{Task: "a", Harness: h, Model: "m", Repeat: 1, SetupCheck: h == "chk"}),
			events.Must(events.Started, run, id, 1, "launcher", events.StartedData{Harness: h, Model: "m"}),
			events.Must(events.Verdict, run, id, 1, "verifier", events.VerdictData{Reward: &one}),
		)
	}
	a := fold(run, evs).Artifact("test")
	if _, ok := a.Summary.Comparisons["chk"]; ok {
		t.Errorf("chk, planned as a setup check, was compared: %v", a.Summary.Comparisons)
	}
	if _, ok := a.Summary.Comparisons["oracle"]; !ok {
		t.Errorf("oracle, planned without setup_check, was not compared (the name decided, not the log): %v", a.Summary.Comparisons)
	}
}

// TestHarnessKind: a row keeps the harness as the user wrote it and names
// the canonical kind its CellPlanned records: the golden log's oracle
// cells renamed to the seed's docker-oracle (kind oracle) give harness
// docker-oracle, harness_kind oracle; agent rows, planned before the kind
// was recorded, are the part before ":" (agent).
func TestHarnessKind(t *testing.T) {
	evs := readLog(t, "testdata/golden.events.jsonl")
	for i, e := range evs {
		if e.Type == events.CellPlanned {
			var d map[string]any
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d["harness"] == "oracle" {
				d["harness"], d["harness_kind"] = "docker-oracle", "oracle"
				evs[i].Data, _ = json.Marshal(d)
			}
		}
	}
	kinds := map[string]string{}
	for _, r := range fold(goldenRun, evs).Artifact("test").Results {
		kinds[r.Harness] = r.HarnessKind
	}
	if kinds["docker-oracle"] != "oracle" || kinds["agent:demo"] != "agent" || len(kinds) != 2 {
		t.Fatalf("harness -> harness_kind: %v", kinds)
	}
}

// TestHarnessOrder: the baseline first, then the run's --harnesses order,
// then harnesses the spec does not list by name; each once.
func TestHarnessOrder(t *testing.T) {
	spec := events.RunSpec{Harnesses: []string{"oracle", "docker-claude-skill:s", "docker-claude"}, BaselineHarness: "docker-claude"}
	got := HarnessOrder(spec, []string{"zeta", "docker-claude-skill:s", "oracle", "alpha", "docker-claude", "oracle"})
	want := []string{"docker-claude", "oracle", "docker-claude-skill:s", "alpha", "zeta"}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
	if got := HarnessOrder(events.RunSpec{}, []string{"b", "a"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("no spec: %q", got)
	}
}

package subject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/atomicfile"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/schemas"
)

// SchemaVersion is the scorecard's schema name.
const SchemaVersion = "subject_scorecard.v1"

// SchemaFile is the scorecard's JSON Schema in schemas/.
const SchemaFile = "subject_scorecard.v1.schema.json"

// Work statuses of a scorecard.
const (
	WorkRan     = "ran"
	WorkSkipped = "skipped"
	WorkDryRun  = "dry-run"
	WorkFailed  = "failed"
)

// QuestionsReason is why a scorecard's questions were not run.
const QuestionsReason = "proctor runs executable tasks only; the seed's judged Q&A track (suite.questions) needs a judge proctor does not have"

// Scorecard is a subject's scorecard: the subject, its work suite's
// status and figures (copied from the task_runs.v1 artifact, never
// recomputed), and the questions recorded as not run.
type Scorecard struct {
	Schema     string           `json:"schema"`
	Descriptor string           `json:"descriptor"`
	Subject    Subject          `json:"subject"`
	Baseline   string           `json:"baseline"`
	Products   []string         `json:"products"`
	Cells      []map[string]any `json:"matrix_cells"`
	Work       Work             `json:"work"`
	Questions  Questions        `json:"questions"`
}

// Work is the scorecard's work suite.
type Work struct {
	// Status is ran, skipped, dry-run or failed; Reason says why for
	// skipped and failed.
	Status    string   `json:"status"`
	Reason    string   `json:"reason,omitempty"`
	TasksRoot string   `json:"tasks_root,omitempty"`
	Tasks     []string `json:"tasks"`
	RunID     string   `json:"run_id,omitempty"`
	Harnesses []string `json:"harnesses,omitempty"`
	// BaselineHarness is the work baseline every other harness is
	// compared with.
	BaselineHarness string   `json:"baseline_harness,omitempty"`
	Models          []string `json:"models,omitempty"`
	Repeats         int      `json:"repeats,omitempty"`
	// Artifact and Report are the task_runs.v1 artifact and its Markdown
	// report (a dry run's artifact is its planned one).
	Artifact string `json:"artifact,omitempty"`
	Report   string `json:"report,omitempty"`
	// PerHarness and Comparisons are the artifact's
	// summary.per_harness and summary.comparisons rolled up: pass rate
	// and cost per harness, and each harness against the work baseline.
	PerHarness  map[string]HarnessRollup    `json:"per_harness,omitempty"`
	Comparisons map[string]ComparisonRollup `json:"comparisons,omitempty"`
}

// HarnessRollup is one harness's figures, as the artifact's
// summary.per_harness has them. Costs in USD.
type HarnessRollup struct {
	N              int         `json:"n"`
	Errored        int         `json:"errored"`
	Planned        int         `json:"planned,omitempty"`
	Scored         int         `json:"scored"`
	Passed         int         `json:"passed"`
	PassRate       *float64    `json:"pass_rate"`
	PassRateCI     *[2]float64 `json:"pass_rate_ci"`
	TotalCostUSD   *float64    `json:"total_cost_usd"`
	CostPerPassUSD *float64    `json:"cost_per_pass_usd"`
}

// ComparisonRollup is one harness against the work baseline, as the
// artifact's summary.comparisons has it.
type ComparisonRollup struct {
	Baseline      string   `json:"baseline"`
	PassRateDelta *float64 `json:"pass_rate_delta"`
	PassedDelta   *int     `json:"passed_delta"`
	CostDeltaUSD  *float64 `json:"cost_delta_usd"`
	PExact        *float64 `json:"p_exact"`
	PAdjusted     *float64 `json:"p_adjusted"`
	Significant   *bool    `json:"significant"`
}

// Questions records suite.questions: how many, and that proctor did not
// run them.
type Questions struct {
	Count  int    `json:"count"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// New is the scorecard of d with work w (Status and what it ran set by
// the caller; Rollup fills the figures).
func New(d *Descriptor, w Work) *Scorecard {
	if w.Tasks == nil {
		w.Tasks = slices.Clone(d.TaskNames)
	}
	if w.Tasks == nil {
		w.Tasks = []string{}
	}
	if w.TasksRoot == "" {
		w.TasksRoot = d.TasksRoot
	}
	sc := &Scorecard{Schema: SchemaVersion, Descriptor: d.File, Subject: d.Subject, Baseline: d.Baseline,
		Products: d.Products, Cells: d.Cells, Work: w,
		Questions: Questions{Count: len(d.Questions), Status: "not_run", Reason: QuestionsReason}}
	if sc.Products == nil {
		sc.Products = []string{}
	}
	if sc.Cells == nil {
		sc.Cells = []map[string]any{}
	}
	return sc
}

// Rollup copies a's figures into the work: per harness n, errored,
// planned, scored, passed, pass rate and its interval, total cost and
// cost per pass; per compared harness the deltas and p-values. The
// figures are the artifact's, never recomputed.
func (w *Work) Rollup(a *artifact.Artifact) {
	w.RunID, w.Harnesses, w.Models, w.Repeats = a.Run.ID, a.Run.Harnesses, a.Run.Models, a.Run.Repeats
	w.BaselineHarness = a.Run.BaselineHarness
	w.PerHarness = map[string]HarnessRollup{}
	for h, s := range a.Summary.PerHarness {
		w.PerHarness[h] = HarnessRollup{N: s.N, Errored: s.Errored, Planned: s.Planned, Scored: s.Scored, Passed: s.Passed,
			PassRate: s.PassRate, PassRateCI: s.PassRateCI, TotalCostUSD: s.Cost.TotalCostUSD, CostPerPassUSD: s.Cost.CostPerPassUSD}
	}
	if len(a.Summary.Comparisons) > 0 {
		w.Comparisons = map[string]ComparisonRollup{}
		for h, c := range a.Summary.Comparisons {
			w.Comparisons[h] = ComparisonRollup{Baseline: c.Baseline, PassRateDelta: c.PassRateDelta, PassedDelta: c.PassedDelta,
				CostDeltaUSD: c.CostDeltaUSD, PExact: c.McNemar.PExact, PAdjusted: c.McNemar.PAdjusted, Significant: c.McNemar.Significant}
		}
	}
}

// Marshal encodes sc (indented, a trailing newline) and validates it
// against the embedded schema.
func Marshal(sc *Scorecard) ([]byte, error) {
	b, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if err := Validate(b); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteFiles writes sc as JSON at path (validated) and its Markdown page
// beside it (.json replaced by .md, else .md appended); it returns the
// page's path.
func WriteFiles(path string, sc *Scorecard) (string, error) {
	b, err := Marshal(sc)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if err := atomicfile.WriteBytes(path, b); err != nil {
		return "", err
	}
	md := strings.TrimSuffix(path, ".json") + ".md"
	var page bytes.Buffer
	WriteMarkdown(&page, sc)
	return md, atomicfile.WriteBytes(md, page.Bytes())
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// Validate checks doc against schemas/subject_scorecard.v1.schema.json.
func Validate(doc []byte) error {
	schemaOnce.Do(func() {
		raw, err := schemas.FS.ReadFile(SchemaFile)
		if err == nil {
			var d any
			if d, err = jsonschema.UnmarshalJSON(bytes.NewReader(raw)); err == nil {
				c := jsonschema.NewCompiler()
				c.DefaultDraft(jsonschema.Draft2020)
				if err = c.AddResource(SchemaFile, d); err == nil {
					schema, err = c.Compile(SchemaFile)
				}
			}
		}
		schemaErr = err
	})
	if schemaErr != nil {
		return fmt.Errorf("%s: %w", SchemaFile, schemaErr)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", SchemaVersion, err)
	}
	if err := schema.Validate(inst); err != nil {
		return fmt.Errorf("%s: %w", SchemaVersion, err)
	}
	return nil
}

// WriteMarkdown writes sc's Markdown page (every value through
// textsafe).
func WriteMarkdown(w io.Writer, sc *Scorecard) {
	p := func(format string, a ...any) {
		for i, v := range a {
			if s, ok := v.(string); ok {
				a[i] = textsafe.Line(s)
			}
		}
		fmt.Fprintf(w, format, a...)
	}
	p("# Subject scorecard: %s\n\n", sc.Subject.ID)
	p("Subject `%s` (%s, ref `%s`), compared with %s. Descriptor: `%s`.\n\n", sc.Subject.ID, sc.Subject.Kind, sc.Subject.Ref, sc.Baseline, sc.Descriptor)
	p("## Work suite: %s\n\n", sc.Work.Status)
	if sc.Work.Reason != "" {
		p("%s\n\n", sc.Work.Reason)
	}
	if len(sc.Work.Tasks) > 0 {
		p("Tasks (%d) under `%s`: %s.\n\n", len(sc.Work.Tasks), sc.Work.TasksRoot, strings.Join(sc.Work.Tasks, ", "))
	}
	if sc.Work.Artifact != "" {
		p("Run `%s`; artifact `%s`; report `%s`; work baseline `%s`.\n\n", sc.Work.RunID, sc.Work.Artifact, sc.Work.Report, sc.Work.BaselineHarness)
	}
	if len(sc.Work.PerHarness) > 0 {
		p("| harness | n | errored | planned | scored | passed | pass rate | total cost (USD) | cost per pass (USD) |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, h := range slices.Sorted(maps.Keys(sc.Work.PerHarness)) {
			r := sc.Work.PerHarness[h]
			p("| `%s` | %d | %d | %d | %d | %d | %s | %s | %s |\n", h, r.N, r.Errored, r.Planned, r.Scored, r.Passed, num(r.PassRate), num(r.TotalCostUSD), num(r.CostPerPassUSD))
		}
		p("\n")
	}
	if len(sc.Work.Comparisons) > 0 {
		p("| harness | against | pass rate delta | cost delta (USD) | p (exact) | p (Holm) |\n|---|---|---|---|---|---|\n")
		for _, h := range slices.Sorted(maps.Keys(sc.Work.Comparisons)) {
			c := sc.Work.Comparisons[h]
			p("| `%s` | `%s` | %s | %s | %s | %s |\n", h, c.Baseline, num(c.PassRateDelta), num(c.CostDeltaUSD), num(c.PExact), num(c.PAdjusted))
		}
		p("\n")
	}
	p("## Questions: %s\n\n%d questions; %s.\n", sc.Questions.Status, sc.Questions.Count, sc.Questions.Reason)
}

func num(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%g", *v)
}

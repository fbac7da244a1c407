package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// TaskRunRow is one cell of a task_runs.v1 artifact, flattened for
// analysis (SCHEMA.md, table task_runs). The struct tags are the schema of
// every format: the json name is the JSONL key, the parquet name the
// Parquet and Arrow column. Pointer fields are nullable columns: nil means
// the artifact does not carry the value, never 0. Slices are nullable
// lists (nil = absent, empty = present and empty).
//
// Units: *_sec in seconds, cost in US dollars, tokens as counts.
type TaskRunRow struct {
	CellID  string `json:"cell_id" parquet:"cell_id"`
	RunID   string `json:"run_id" parquet:"run_id,dict"`
	Task    string `json:"task" parquet:"task,dict"`
	Harness string `json:"harness" parquet:"harness,dict"`
	Model   string `json:"model" parquet:"model,dict"`
	Repeat  int64  `json:"repeat" parquet:"repeat"`
	Attempt int64  `json:"attempt" parquet:"attempt"`
	Outcome string `json:"outcome" parquet:"outcome,dict"`
	// ErrorClass is set only for errored cells (artifact error_class).
	ErrorClass *string `json:"error_class" parquet:"error_class,optional,dict"`
	Passed     bool    `json:"passed" parquet:"passed"`
	// Reward is the primary reward in [0,1]; nil when the cell has no verdict.
	Reward *float64 `json:"reward" parquet:"reward,optional"`
	// ReturnCode is the solve's exit code (124 on timeout); nil when it never ran.
	ReturnCode         *int64 `json:"returncode" parquet:"returncode,optional"`
	VerifierReturnCode *int64 `json:"verifier_returncode" parquet:"verifier_returncode,optional"`
	// ElapsedSec is the cell's wall time in seconds.
	ElapsedSec   float64 `json:"elapsed_sec" parquet:"elapsed_sec"`
	TaskRevision *string `json:"task_revision" parquet:"task_revision,optional,dict"`
	OutputDir    *string `json:"output_dir" parquet:"output_dir,optional"`
	Error        *string `json:"error" parquet:"error,optional"`
	StdoutTail   *string `json:"stdout_tail" parquet:"stdout_tail,optional"`

	// Task metadata (artifact task_metadata): difficulty and category as
	// strings (a non-string scalar is written in its JSON form), tags as a
	// list of strings, and the whole block as JSON.
	Difficulty       *string  `json:"difficulty" parquet:"difficulty,optional,dict"`
	Category         *string  `json:"category" parquet:"category,optional,dict"`
	Tags             []string `json:"tags" parquet:"tags,optional,list"`
	TaskMetadataJSON *string  `json:"task_metadata_json" parquet:"task_metadata_json,optional"`

	// Telemetry promoted from artifact metrics.
	MetricPromptTokens     *int64   `json:"metric_prompt_tokens" parquet:"metric_prompt_tokens,optional"`
	MetricCompletionTokens *int64   `json:"metric_completion_tokens" parquet:"metric_completion_tokens,optional"`
	MetricTotalTokens      *int64   `json:"metric_total_tokens" parquet:"metric_total_tokens,optional"`
	MetricCacheReadTokens  *int64   `json:"metric_cache_read_tokens" parquet:"metric_cache_read_tokens,optional"`
	MetricCacheWriteTokens *int64   `json:"metric_cache_write_tokens" parquet:"metric_cache_write_tokens,optional"`
	MetricCostUSD          *float64 `json:"metric_cost_usd" parquet:"metric_cost_usd,optional"`
	// MetricLatencySec equals ElapsedSec.
	MetricLatencySec float64 `json:"metric_latency_sec" parquet:"metric_latency_sec"`
	MetricNCalls     *int64  `json:"metric_n_calls" parquet:"metric_n_calls,optional"`
	// MetricToolCallCount is the sum of metrics.tool_calls; nil when the
	// artifact has no tool_calls block.
	MetricToolCallCount   *int64   `json:"metric_tool_call_count" parquet:"metric_tool_call_count,optional"`
	MetricOperationCount  int64    `json:"metric_operation_count" parquet:"metric_operation_count"`
	MetricSolverTimeout   bool     `json:"metric_solver_timeout" parquet:"metric_solver_timeout"`
	MetricVerifierTimeout bool     `json:"metric_verifier_timeout" parquet:"metric_verifier_timeout"`
	MetricSolverError     bool     `json:"metric_solver_error" parquet:"metric_solver_error"`
	MetricError           bool     `json:"metric_error" parquet:"metric_error"`
	MetricSolveSec        *float64 `json:"metric_solve_sec" parquet:"metric_solve_sec,optional"`
	MetricVerifySec       *float64 `json:"metric_verify_sec" parquet:"metric_verify_sec,optional"`
	MetricBuildSec        *float64 `json:"metric_build_sec" parquet:"metric_build_sec,optional"`
	// Egress counts are nil when the cell had no proxy (metrics.egress absent).
	MetricEgressAllowed *int64 `json:"metric_egress_allowed" parquet:"metric_egress_allowed,optional"`
	MetricEgressDenied  *int64 `json:"metric_egress_denied" parquet:"metric_egress_denied,optional"`
	MetricEgressErrors  *int64 `json:"metric_egress_errors" parquet:"metric_egress_errors,optional"`
	// MetricObserved* are metrics.usage_observed (the model gateway's
	// figures beside the agent's own above); nil without a gateway.
	// MetricTokensDiffer is usage_observed.reported_differs: the agent's
	// and the gateway's token totals differ by more than 1 %.
	MetricObservedRequests         *int64   `json:"metric_observed_requests" parquet:"metric_observed_requests,optional"`
	MetricObservedInputTokens      *int64   `json:"metric_observed_input_tokens" parquet:"metric_observed_input_tokens,optional"`
	MetricObservedOutputTokens     *int64   `json:"metric_observed_output_tokens" parquet:"metric_observed_output_tokens,optional"`
	MetricObservedCacheReadTokens  *int64   `json:"metric_observed_cache_read_tokens" parquet:"metric_observed_cache_read_tokens,optional"`
	MetricObservedCacheWriteTokens *int64   `json:"metric_observed_cache_write_tokens" parquet:"metric_observed_cache_write_tokens,optional"`
	MetricObservedCostUSD          *float64 `json:"metric_observed_cost_usd" parquet:"metric_observed_cost_usd,optional"`
	MetricTokensDiffer             *bool    `json:"metric_tokens_differ" parquet:"metric_tokens_differ,optional"`

	// MetricsJSON is the whole metrics block, OperationsJSON the operations
	// list ("[]" when the cell has none) and RewardsJSON the rewards map
	// (nil when the cell has no verdict), each as compact JSON with keys in
	// the artifact's order and map keys sorted.
	MetricsJSON    string  `json:"metrics_json" parquet:"metrics_json"`
	OperationsJSON string  `json:"operations_json" parquet:"operations_json"`
	RewardsJSON    *string `json:"rewards_json" parquet:"rewards_json,optional"`

	// Multi-step cells (artifact steps[]); all nil for a single-step task.
	// StepCount is the number of declared steps, StepsRun those that ran
	// and StepsSkipped those skipped after an early stop; StepsJSON is the
	// steps[] list as compact JSON (each step's name, outcome, reward,
	// rewards and timings).
	StepCount    *int64  `json:"step_count" parquet:"step_count,optional"`
	StepsRun     *int64  `json:"steps_run" parquet:"steps_run,optional"`
	StepsSkipped *int64  `json:"steps_skipped" parquet:"steps_skipped,optional"`
	StepsJSON    *string `json:"steps_json" parquet:"steps_json,optional"`
}

// Rows flattens every result of a into a TaskRunRow, in the artifact's
// order (see SCHEMA.md for each column). Pointer fields of the rows may
// point into a: do not modify a while the rows are in use. A block that
// cannot be encoded as JSON (a NaN or infinite float, only possible in an
// artifact built in memory, never in one read with artifact.Read) leaves
// its JSON column as the JSON literal null; ExportTaskRuns reports such an
// artifact as an error instead.
func Rows(a *artifact.Artifact) []TaskRunRow {
	if a == nil {
		return nil
	}
	// The slabs are never reset here (rows keep pointing into them); the
	// arena becomes one string per batch.
	c := newConverter(a.Run.ID, min(len(a.Results), batchRows))
	rows := make([]TaskRunRow, len(a.Results))
	for i := range a.Results {
		_ = c.convert(&rows[i], &a.Results[i])
		if (i+1)%batchRows == 0 {
			c.finish()
		}
	}
	c.finish()
	return rows
}

// converter flattens results a batch at a time. Its slabs hand out the
// int64, string and tag values rows point to, and the JSON columns of a
// batch are written into one byte arena that becomes one string, so a batch
// costs a few allocations instead of several per row. Rows converted since
// the last finish are complete only after finish; reset then reuses the
// slabs, after which those rows must no longer be used.
type converter struct {
	runID  string
	ints   []int64
	strs   []string
	tags   []string
	arena  []byte
	fixups []fixup
	enc    jsonEncoder
}

// fixup is a string field to be pointed at arena[lo:hi] by finish.
type fixup struct {
	dst    *string
	lo, hi int
}

func newConverter(runID string, n int) *converter {
	return &converter{
		runID:  runID,
		ints:   make([]int64, 0, 4*n),
		strs:   make([]string, 0, 2*n),
		tags:   make([]string, 0, 2*n),
		arena:  make([]byte, 0, 256*n),
		fixups: make([]fixup, 0, 3*n),
	}
}

// finish turns the arena into one string and points every JSON field
// converted since the last finish into it. The arena's bytes become the
// string's without a copy and are never written again: the converter
// continues in a new arena.
func (c *converter) finish() {
	if len(c.fixups) == 0 {
		return
	}
	s := unsafe.String(unsafe.SliceData(c.arena), len(c.arena))
	for _, f := range c.fixups {
		*f.dst = s[f.lo:f.hi]
	}
	c.arena = make([]byte, 0, len(c.arena)+len(c.arena)/4)
	c.fixups = c.fixups[:0]
}

// reset forgets the values handed out so far.
func (c *converter) reset() {
	c.ints = c.ints[:0]
	c.strs = c.strs[:0]
	c.tags = c.tags[:0]
	c.arena = c.arena[:0] // after finish it is fresh; before, nothing points into it
	c.fixups = c.fixups[:0]
}

func (c *converter) int64p(v int64) *int64 {
	if len(c.ints) == cap(c.ints) {
		// A new slab: rows holding pointers into the old one keep it alive.
		c.ints = make([]int64, 0, max(64, 2*cap(c.ints)))
	}
	c.ints = append(c.ints, v)
	return &c.ints[len(c.ints)-1]
}

func (c *converter) intp(v *int) *int64 {
	if v == nil {
		return nil
	}
	return c.int64p(int64(*v))
}

func (c *converter) strp(s string) *string {
	if len(c.strs) == cap(c.strs) {
		c.strs = make([]string, 0, max(64, 2*cap(c.strs)))
	}
	c.strs = append(c.strs, s)
	return &c.strs[len(c.strs)-1]
}

// tagList returns a slice of n strings from the tag slab, capacity n.
func (c *converter) tagList(n int) []string {
	if len(c.tags)+n > cap(c.tags) {
		c.tags = make([]string, 0, max(64, 2*cap(c.tags), n))
	}
	l := len(c.tags)
	c.tags = c.tags[:l+n]
	return c.tags[l : l+n : l+n]
}

// nonEmpty points at s when it is not "", else nil.
func nonEmpty(s *string) *string {
	if *s == "" {
		return nil
	}
	return s
}

// convert fills row from r; the JSON columns are set by the next finish.
// The error names the cell and the block that could not be encoded; the
// row is complete either way (see Rows).
func (c *converter) convert(row *TaskRunRow, r *artifact.Result) error {
	m := &r.Metrics
	*row = TaskRunRow{
		CellID:             r.CellID,
		RunID:              c.runID,
		Task:               r.Task,
		Harness:            r.Harness,
		Model:              r.Model,
		Repeat:             int64(r.Repeat),
		Attempt:            int64(r.Attempt),
		Outcome:            r.Outcome,
		ErrorClass:         nonEmpty(&r.ErrorClass),
		Passed:             r.Passed,
		Reward:             r.Reward,
		ReturnCode:         c.intp(r.ReturnCode),
		VerifierReturnCode: c.intp(r.VerifierReturnCode),
		ElapsedSec:         r.ElapsedSec,
		TaskRevision:       nonEmpty(&r.TaskRevision),
		OutputDir:          nonEmpty(&r.OutputDir),
		Error:              nonEmpty(&r.Error),
		StdoutTail:         nonEmpty(&r.StdoutTail),

		MetricPromptTokens:     m.PromptTokens,
		MetricCompletionTokens: m.CompletionTokens,
		MetricTotalTokens:      m.TotalTokens,
		MetricCacheReadTokens:  m.CacheReadTokens,
		MetricCacheWriteTokens: m.CacheWriteTokens,
		MetricCostUSD:          m.CostUSD,
		MetricLatencySec:       r.ElapsedSec,
		MetricNCalls:           m.NCalls,
		MetricOperationCount:   int64(m.OperationCount),
		MetricSolverTimeout:    m.SolverTimeout,
		MetricVerifierTimeout:  m.VerifierTimeout,
		MetricSolverError:      m.SolverError,
		MetricError:            m.Error,
		MetricSolveSec:         m.SolveSec,
		MetricVerifySec:        m.VerifySec,
		MetricBuildSec:         m.BuildSec,
	}
	if m.ToolCalls != nil {
		var n int64
		for _, k := range m.ToolCalls {
			n += int64(k)
		}
		row.MetricToolCallCount = c.int64p(n)
	}
	if e := m.Egress; e != nil {
		row.MetricEgressAllowed = c.int64p(int64(e.Allowed))
		row.MetricEgressDenied = c.int64p(int64(e.Denied))
		row.MetricEgressErrors = c.int64p(int64(e.Errors))
	}
	if u := m.UsageObserved; u != nil {
		row.MetricObservedRequests = c.int64p(int64(u.Requests))
		row.MetricObservedInputTokens = c.int64p(u.InputTokens)
		row.MetricObservedOutputTokens = c.int64p(u.OutputTokens)
		row.MetricObservedCacheReadTokens = c.int64p(u.CacheReadTokens)
		row.MetricObservedCacheWriteTokens = c.int64p(u.CacheWriteTokens)
		row.MetricObservedCostUSD = u.CostUSD
		row.MetricTokensDiffer = u.ReportedDiffers
	}
	var firstErr error
	jsonCol := func(dst *string, block string, encode func([]byte) ([]byte, error)) {
		lo := len(c.arena)
		out, err := encode(c.arena)
		if err != nil {
			out = append(out[:lo], "null"...)
			if firstErr == nil {
				firstErr = fmt.Errorf("cell %s: encode %s: %w", r.CellID, block, err)
			}
		}
		c.arena = out
		c.fixups = append(c.fixups, fixup{dst: dst, lo: lo, hi: len(out)})
	}
	if r.TaskMeta != nil {
		row.Difficulty = c.metaString(r.TaskMeta["difficulty"])
		row.Category = c.metaString(r.TaskMeta["category"])
		row.Tags = c.metaTags(r.TaskMeta["tags"])
		row.TaskMetadataJSON = c.strp("")
		jsonCol(row.TaskMetadataJSON, "task_metadata", func(b []byte) ([]byte, error) { return c.enc.appendAny(b, r.TaskMeta) })
	}
	jsonCol(&row.MetricsJSON, "metrics", func(b []byte) ([]byte, error) { return c.enc.appendMetrics(b, m) })
	if len(r.Operations) == 0 {
		row.OperationsJSON = "[]"
	} else {
		jsonCol(&row.OperationsJSON, "operations", func(b []byte) ([]byte, error) { return c.enc.appendAny(b, r.Operations) })
	}
	if r.Rewards != nil {
		row.RewardsJSON = c.strp("")
		jsonCol(row.RewardsJSON, "rewards", func(b []byte) ([]byte, error) { return c.enc.appendAny(b, r.Rewards) })
	}
	if len(r.Steps) > 0 {
		skipped := 0
		for _, s := range r.Steps {
			if s.Outcome == artifact.OutcomeSkipped {
				skipped++
			}
		}
		row.StepCount = c.int64p(int64(len(r.Steps)))
		row.StepsRun = c.int64p(int64(len(r.Steps) - skipped))
		row.StepsSkipped = c.int64p(int64(skipped))
		row.StepsJSON = c.strp("")
		jsonCol(row.StepsJSON, "steps", func(b []byte) ([]byte, error) { return appendStepsJSON(b, r.Steps) })
	}
	return firstErr
}

// appendStepsJSON appends steps as compact JSON in the artifact's field
// order (encoding/json: struct order, sorted map keys, no HTML escaping).
func appendStepsJSON(b []byte, steps []artifact.StepResult) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(steps); err != nil {
		return b, err
	}
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...), nil
}

// metaString renders a task metadata scalar: a string as itself, nil as
// null, anything else in its JSON form (3, true, ["a"]).
func (c *converter) metaString(v any) *string {
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		return c.strp(v)
	case float64:
		return c.strp(strconv.FormatFloat(v, 'g', -1, 64))
	case int:
		return c.strp(strconv.Itoa(v))
	case int64:
		return c.strp(strconv.FormatInt(v, 10))
	case bool:
		return c.strp(strconv.FormatBool(v))
	}
	b, err := c.enc.appendAny(nil, v)
	if err != nil {
		return c.strp(fmt.Sprint(v))
	}
	return c.strp(string(b))
}

// metaTags renders task metadata tags as a list of strings: a list's
// elements each as metaString does ("null" for a null element), a lone
// string as a one-element list, nil as null.
func (c *converter) metaTags(v any) []string {
	switch v := v.(type) {
	case nil:
		return nil
	case []string:
		return v
	case string:
		l := c.tagList(1)
		l[0] = v
		return l
	case []any:
		l := c.tagList(len(v))
		for i, e := range v {
			if s, ok := e.(string); ok {
				l[i] = s
			} else if p := c.metaString(e); p != nil {
				l[i] = *p
			} else {
				l[i] = "null"
			}
		}
		return l
	}
	l := c.tagList(1)
	l[0] = *c.metaString(v)
	return l
}

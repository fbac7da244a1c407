// Package artifact holds the task_runs.v1 model of DESIGN §8, its JSON
// Schema validation on every write, and the Markdown report.
package artifact

import "github.com/proctor-eval/proctor/pkg/events"

// SchemaVersion is the value of Artifact.Schema.
const SchemaVersion = "task_runs.v1"

// Outcomes of a cell (DESIGN §8).
const (
	OutcomePassed          = "passed"
	OutcomeFailed          = "failed"
	OutcomePartial         = "partial"
	OutcomeSolverTimeout   = "solver_timeout"
	OutcomeVerifierTimeout = "verifier_timeout"
	OutcomeVerifierError   = "verifier_error"
	OutcomeErrored         = "errored"
	// OutcomePlanned is a cell of a dry run's artifact that would run:
	// neither scored nor errored, and in no comparison.
	OutcomePlanned = "planned"
)

// Error classes of an errored cell (DESIGN §8), as strings of the rows:
// the vocabulary is events.ErrorClass; ErrorVerifier is the one class a
// row has that no event carries (a verifier that wrote no readable
// reward).
const (
	ErrorRefused       = string(events.ClassRefused)
	ErrorUnresolvedEnv = string(events.ClassUnresolvedEnv)
	ErrorBuild         = string(events.ClassBuild)
	ErrorSandbox       = string(events.ClassSandbox)
	ErrorSolver        = string(events.ClassSolverError)
	ErrorInfra         = string(events.ClassInfra)
	ErrorUnavailable   = string(events.ClassUnavailable)
	ErrorCancelled     = string(events.ClassCancelled)
	ErrorVerifier      = "verifier_error"
)

// Artifact is a task_runs.v1 document.
type Artifact struct {
	Schema  string   `json:"schema"`
	Run     RunInfo  `json:"run"`
	Results []Result `json:"results"`
	Summary Summary  `json:"summary"`
}

// RunInfo describes the run the artifact belongs to.
type RunInfo struct {
	ID              string            `json:"id"`
	TasksRoot       string            `json:"tasks_root"`
	Harnesses       []string          `json:"harnesses"`
	Models          []string          `json:"models"`
	Repeats         int               `json:"repeats"`
	BaselineHarness string            `json:"baseline_harness,omitempty"`
	StartedAt       string            `json:"started_at"`            // RFC 3339, from RunRequested
	FinishedAt      string            `json:"finished_at,omitempty"` // RFC 3339, from RunFinished
	ImageMap        map[string]string `json:"image_map,omitempty"`
	// AgentUser is who the run's in-container agent arms solved as
	// (--agent-user: "sealed" or "task"); absent in a run recorded before
	// the flag existed, which ran them sealed.
	AgentUser string `json:"agent_user,omitempty"`
	// ImageMapUnused lists the `from` of the image-map rules no image of
	// the run used (sorted): a rule that matched nothing, a warning.
	ImageMapUnused []string `json:"image_map_unused,omitempty"`
	ProctorVersion string   `json:"proctor_version"`
	// DecodeErrors counts the run's events whose data did not decode into
	// their type's shape; nil (absent) when every event decoded.
	DecodeErrors *DecodeErrors `json:"decode_errors,omitempty"`
}

// DecodeErrors counts the events a projection used whose data did not
// decode (a producer that wrote a field of the wrong type, a truncated
// object). The projection keeps going: a cell whose outcome event
// (Verdict, CellErrored, CellRefused or Finished) did not decode is an
// errored row of class infra naming the event; other events lose only
// their own data.
type DecodeErrors struct {
	// Count is the number of such events.
	Count int `json:"count"`
	// ByType counts them by event type.
	ByType map[string]int `json:"by_type"`
	// First is the first one's error, naming the event type and id.
	First string `json:"first"`
}

// Result is one row per cell.
type Result struct {
	CellID  string `json:"cell_id"`
	Task    string `json:"task"`
	Harness string `json:"harness"`
	// HarnessKind is the harness's canonical kind (harness.KindOf): the
	// kind behind an alias the row's harness was written with
	// (docker-oracle is oracle, probe is docker-probe), the part before
	// the first ":" otherwise.
	HarnessKind string `json:"harness_kind,omitempty"`
	Model       string `json:"model"`
	Repeat      int    `json:"repeat"`
	Attempt     int    `json:"attempt"`
	// Attempts counts the attempts of the cell the event log holds (a
	// retried, redelivered or resumed cell has several; the row is the
	// last one's); omitted when there was one.
	Attempts int    `json:"attempts,omitempty"`
	Outcome  string `json:"outcome"`
	// ErrorClass says why an errored cell has no verdict; "" otherwise.
	ErrorClass string `json:"error_class,omitempty"`
	// Passed is reward >= 1; false for errored cells (which never count).
	Passed bool `json:"passed"`
	// Reward is the primary reward in [0,1]; null when the cell has no verdict.
	Reward *float64 `json:"reward"`
	// Rewards holds every key of reward.json (or {"reward": r}).
	Rewards map[string]float64 `json:"rewards,omitempty"`
	// ReturnCode is the solve's exit code (124 on timeout); null when it never ran.
	ReturnCode *int `json:"returncode"`
	// VerifierReturnCode is test.sh's exit code; recorded, never decisive.
	VerifierReturnCode *int `json:"verifier_returncode,omitempty"`
	// ElapsedSec is the cell's wall time in seconds, from the start of its
	// image phase (the ImageBuilt event's time less its build_sec, failed
	// builds included) or its first event, whichever is earlier, to its
	// last event.
	ElapsedSec   float64 `json:"elapsed_sec"`
	TaskRevision string  `json:"task_revision,omitempty"`
	OutputDir    string  `json:"output_dir,omitempty"`
	// StdoutTail is the last bytes of the solve's output (valid UTF-8).
	StdoutTail string `json:"stdout_tail,omitempty"`
	// VerifierTail is the last bytes of the verifier's output (valid
	// UTF-8), where a test runner says what failed; empty when no verifier
	// ran or it printed nothing.
	VerifierTail string `json:"verifier_tail,omitempty"`
	// Error is a human-readable reason for errored / verifier_error cells.
	Error string `json:"error,omitempty"`
	// AgentClaim is the agent's own final word (NewAgentClaim), kept
	// beside the verdict; absent when the agent left no final message
	// (the oracle, a command, a silent agent).
	AgentClaim *AgentClaim `json:"agent_claim,omitempty"`
	// TaskMeta carries difficulty, category and tags for the dataset export.
	TaskMeta map[string]any `json:"task_metadata,omitempty"`
	Metrics  Metrics        `json:"metrics"`
	// Operations are the cell's Operation events' data, in log order.
	Operations []map[string]any `json:"operations,omitempty"`
	// Steps are a multi-step cell's steps in declared order (absent for a
	// single-step task); the row's reward is theirs rolled up by the
	// task's multi_step_reward_strategy.
	Steps []StepResult `json:"steps,omitempty"`
}

// OutcomeSkipped is a step that never ran because an earlier step stopped
// the trial (its min_reward missed, or it had no verdict): not an error.
const OutcomeSkipped = "skipped"

// StepResult is results[].steps[]: one step of a multi-step cell.
type StepResult struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Outcome is passed, partial, failed, solver_timeout,
	// verifier_timeout, verifier_error (the step ran but has no verdict)
	// or skipped.
	Outcome string `json:"outcome"`
	// Reward is the step verifier's primary reward; null when the step has
	// no verdict or was skipped.
	Reward  *float64           `json:"reward"`
	Rewards map[string]float64 `json:"rewards,omitempty"`
	// ReturnCode is the step's solve exit code; VerifierReturnCode its
	// test.sh's.
	ReturnCode         *int `json:"returncode,omitempty"`
	VerifierReturnCode *int `json:"verifier_returncode,omitempty"`
	// SolveSec and VerifySec are the phases' durations; ElapsedSec the
	// step's wall time from StepStarted to StepVerdict (seconds).
	SolveSec   *float64 `json:"solve_sec,omitempty"`
	VerifySec  *float64 `json:"verify_sec,omitempty"`
	ElapsedSec *float64 `json:"elapsed_sec,omitempty"`
	// Error says why a step that ran has no verdict, or why it was skipped.
	Error string `json:"error,omitempty"`
	// Stop says why this step stopped the trial.
	Stop string `json:"stop,omitempty"`
}

// Metrics is the telemetry of a cell. Absent numbers are omitted, never 0.
type Metrics struct {
	CostUSD          *float64       `json:"cost_usd,omitempty"`
	PromptTokens     *int64         `json:"prompt_tokens,omitempty"`
	CompletionTokens *int64         `json:"completion_tokens,omitempty"`
	TotalTokens      *int64         `json:"total_tokens,omitempty"`
	CacheReadTokens  *int64         `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens *int64         `json:"cache_write_tokens,omitempty"`
	NCalls           *int64         `json:"n_calls,omitempty"`
	ToolCalls        map[string]int `json:"tool_calls,omitempty"`
	OperationCount   int            `json:"operation_count"`
	OperationsByType map[string]int `json:"operations_by_type,omitempty"`

	// LowFidelityOperationCount counts the solve's unstructured output
	// lines (an agent's response text and stderr, a command's output) that
	// mention tool, subagent or loop (the Finished's low_fidelity_ops),
	// kept apart from the structured OperationCount;
	// LowFidelityOperationsByType counts them by type. Absent when none
	// was counted.
	LowFidelityOperationCount   int            `json:"low_fidelity_operation_count,omitempty"`
	LowFidelityOperationsByType map[string]int `json:"low_fidelity_operations_by_type,omitempty"`

	SolverTimeout   bool `json:"solver_timeout"`
	VerifierTimeout bool `json:"verifier_timeout"`
	SolverError     bool `json:"solver_error"`
	// Error is true when the cell has no verdict for an infrastructure or
	// refusal reason (errored), so statistics treat it as missing data.
	Error         bool          `json:"error"`
	UnresolvedEnv []string      `json:"unresolved_env,omitempty"`
	UnknownKeys   []string      `json:"unknown_keys,omitempty"` // definition keys neither proctor, Harbor nor BenchFlow defines (ignored), sorted
	Egress        *EgressCounts `json:"egress,omitempty"`
	// UsageObserved is what the model gateway saw of the cell's model
	// calls (absent for a cell without a gateway); the agent's own figures
	// stay in the fields above and in AgentReported.
	UsageObserved  *UsageObserved    `json:"usage_observed,omitempty"`
	Isolation      map[string]any    `json:"isolation,omitempty"`
	IsolationProbe map[string]string `json:"isolation_probe,omitempty"`
	// Treatment is a skill arm's skill and notice version.
	Treatment     *Treatment     `json:"treatment,omitempty"`
	AgentReported map[string]any `json:"agent_reported,omitempty"`
	SolveSec      *float64       `json:"solve_sec,omitempty"`
	VerifySec     *float64       `json:"verify_sec,omitempty"`
	BuildSec      *float64       `json:"build_sec,omitempty"`
	// QueueSec is how long the cell waited for a slot before its image
	// phase (seconds; not part of elapsed_sec).
	QueueSec *float64 `json:"queue_sec,omitempty"`
	// VerifierLeftoverProcesses is how many processes were still alive in
	// the sandbox when the test script ended (frozen before the reward was
	// read; PID 1 and zombies not counted): a sign of tampering or of a
	// sloppy test. Absent when not measured.
	VerifierLeftoverProcesses *int `json:"verifier_leftover_processes,omitempty"`
	// Limits are the sandbox's resource limits (absent for a cell that
	// never had a container).
	Limits *Limits `json:"limits,omitempty"`
	// OOMKilled is true when the kernel killed a process of the sandbox at
	// its memory limit; OOMPhase says during which phase ("solve" or
	// "verify"). The outcome is still the verifier's
	// (docs/decisions/2026-12-01-oom-kills-counted.md).
	OOMKilled bool   `json:"oom_killed,omitempty"`
	OOMPhase  string `json:"oom_phase,omitempty"`
	// TamperFindings are the files the solve created or changed in the
	// work tree that shadow a test runner or a standard module of the
	// verifier's language: the cell is suspect (Result.Suspect). Its
	// verdict stands; the report and the viewer mark it.
	TamperFindings []TamperFinding `json:"tamper_findings,omitempty"`
	// VerifierFindings are what the verifier phase showed beside the
	// reward: reward_exit_conflict, no_tests_executed, collect_failed.
	VerifierFindings []VerifierFinding `json:"verifier_findings,omitempty"`
	// LongLines counts the solve's stdout lines over the 1 MiB line bound:
	// response text, never read as event lines, kept whole in
	// response.txt. ResponseTruncated is true when response.txt was cut
	// at its 64 MiB cap (its last line says so). From the cell's Finished.
	LongLines         int  `json:"long_lines,omitempty"`
	ResponseTruncated bool `json:"response_truncated,omitempty"`
	// UsagePartial is true when the token counts are only part of what
	// the solve used (a lower bound: an agent's stream that ended without
	// its own totals, such as a Claude Code run without a result event);
	// UsagePartialReason says why.
	UsagePartial       bool   `json:"usage_partial,omitempty"`
	UsagePartialReason string `json:"usage_partial_reason,omitempty"`
	// WorkTree is what the cell's work/ holds of the agent's final
	// working tree (in-container agent arms): counts, the cap and what it
	// left out. From the cell's Finished.
	WorkTree *WorkTree `json:"work_tree,omitempty"`
	// Recompile is the task's build command run again after the solve;
	// RecompileFailed is its Failed, under the task-runs seed's name. The
	// outcome is still the verifier's.
	Recompile       *Recompile `json:"recompile,omitempty"`
	RecompileFailed bool       `json:"recompile_failed,omitempty"`
}

// WorkTree is metrics.work_tree: the copy of an agent's final working
// tree in the cell's work/ (events.WorkTree says what each field counts).
type WorkTree = events.WorkTree

// Recompile is metrics.recompile: the instruction's build commands run
// again as root after the solve (events.Recompile).
type Recompile = events.Recompile

// TamperFinding is metrics.tamper_findings[]: a file the solve left that
// could run instead of what the verifier means to run (events.TamperFinding).
type TamperFinding = events.TamperFinding

// VerifierFinding is metrics.verifier_findings[] (events.VerifierFinding).
type VerifierFinding = events.VerifierFinding

// Suspect reports whether the row's cell is suspect: its solve left files
// that shadow the verifier's runner or standard modules.
func (r Result) Suspect() bool { return len(r.Metrics.TamperFindings) > 0 }

// Limits are metrics.limits: CPUs (fractions allowed; absent = no limit),
// memory in MiB, the most processes and threads at once, no-new-privileges,
// and where CPUs and memory came from ("task" or "default").
type Limits struct {
	CPUs            float64 `json:"cpus,omitempty"`
	MemoryMB        int64   `json:"memory_mb,omitempty"`
	PidsLimit       int64   `json:"pids_limit,omitempty"`
	NoNewPrivileges bool    `json:"no_new_privileges"`
	MemorySource    string  `json:"memory_source,omitempty"`
	CPUsSource      string  `json:"cpus_source,omitempty"`
}

// UsageObserved is metrics.usage_observed (DESIGN §6.1): the sums of a
// cell's ModelCall events. Input tokens exclude cached input (cache reads
// are counted apart, whatever the provider's convention); output tokens
// include reasoning. CostUSD is the sum of the calls priced from the
// pinned price table dated PriceTable, null with CostNullReason when a
// call that was answered (a 2xx of an API whose usage is read) has no
// price: a model not in the table, or no usage in its response. Calls
// without usage (count_tokens, listings, errors) cost nothing.
// ReportedDiffers compares the agent's own token total (prompt,
// completion, cache reads and writes as it reported them) with the
// observed one (input, output, cache reads and writes): true when they
// differ by more than 1 % of the observed; absent when the agent
// reported no tokens.
type UsageObserved struct {
	Requests          int      `json:"requests"`
	CallsWithoutUsage int      `json:"calls_without_usage"`
	InputTokens       int64    `json:"input_tokens"`
	OutputTokens      int64    `json:"output_tokens"`
	CacheReadTokens   int64    `json:"cache_read_tokens"`
	CacheWriteTokens  int64    `json:"cache_write_tokens"`
	CostUSD           *float64 `json:"cost_usd"`
	CostNullReason    string   `json:"cost_null_reason,omitempty"`
	PriceTable        string   `json:"price_table,omitempty"`
	Models            []string `json:"models,omitempty"`
	ReportedDiffers   *bool    `json:"reported_differs,omitempty"`
}

// TotalTokens is input + output + cache reads + cache writes.
func (u *UsageObserved) TotalTokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// EgressCounts counts the proxy's decisions for a cell (one per client
// connection; the close record of an allowed connection is not counted
// again) and names what was reached and refused.
type EgressCounts struct {
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
	Errors  int `json:"errors"`
	// AllowedHosts, DeniedHosts and ErrorHosts are the distinct
	// "host:port" targets (IPv6 in brackets) of the allowed, denied and
	// error decisions, sorted; an allowed connection whose upstream then
	// failed is in both AllowedHosts and ErrorHosts. Never null.
	AllowedHosts []string `json:"allowed_hosts"`
	DeniedHosts  []string `json:"denied_hosts"`
	ErrorHosts   []string `json:"error_hosts"`
	// DeniedEntries are the distinct (target, reason) pairs of the denied
	// decisions with how many times each came, sorted by target then
	// reason. Never null.
	DeniedEntries []DeniedEntry `json:"denied_entries"`
}

// DeniedEntry is one kind of refused request of a cell.
type DeniedEntry struct {
	// Target is "host:port" as the request named it (normalised host).
	Target string `json:"target"`
	// Reason is the proxy's reason (the rule that refused it).
	Reason string `json:"reason"`
	// Count is how many denied decisions had this target and reason.
	Count int `json:"count"`
}

// Summary aggregates the rows.
type Summary struct {
	PerHarness  map[string]*HarnessSummary `json:"per_harness"`
	Comparisons map[string]*Comparison     `json:"comparisons,omitempty"`
}

// HarnessSummary is summary.per_harness.<h>.
type HarnessSummary struct {
	N       int `json:"n"`
	Errored int `json:"errored"`
	// Planned counts the rows of a dry run's artifact that would run
	// (OutcomePlanned); omitted when 0. Scored is n − errored − planned.
	Planned int `json:"planned,omitempty"`
	Scored  int `json:"scored"`
	Passed  int `json:"passed"`
	// PassRate is passed / scored; null when scored is 0.
	PassRate *float64 `json:"pass_rate"`
	// PassRateCI is the Wilson 95 % interval [lo, hi] over scored cells;
	// null when scored is 0.
	PassRateCI *[2]float64 `json:"pass_rate_ci"`
	// ElapsedSec is the sum of the rows' elapsed seconds.
	ElapsedSec float64              `json:"elapsed_sec"`
	Operations int                  `json:"operations"`
	Cost       CostSummary          `json:"cost"`
	PerTask    map[string]*TaskStat `json:"per_task"`
	// SkillInvocationRate is, for a skill arm (its rows carry
	// metrics.agent_reported.treatment, or BenchFlow's skill_mode
	// "with-skill"), the fraction of its scored rows that report
	// agent_reported.n_skill_invocations whose count is at least 1: how
	// often the agent used the skill it was offered (a row that does not
	// report the count is left out, not counted as 0). SkillInvocationN is
	// that number of scored, reporting rows. Both are absent for other arms; the rate is
	// absent when no row is scored (n 0).
	SkillInvocationRate *float64 `json:"skill_invocation_rate,omitempty"`
	SkillInvocationN    *int     `json:"skill_invocation_n,omitempty"`
	// Suspect counts the rows with tamper findings (their verdicts are
	// counted as they are); absent when none.
	Suspect int `json:"suspect,omitempty"`
	// VerifierFindings counts the rows with each kind of verifier
	// finding; absent when none.
	VerifierFindings map[string]int `json:"verifier_findings,omitempty"`
	// LowFidelityOperations is the sum of the rows'
	// metrics.low_fidelity_operation_count, apart from Operations; absent
	// when 0.
	LowFidelityOperations int `json:"low_fidelity_operations,omitempty"`
	// ClaimedButFailed counts the rows whose agent claimed success while
	// the verifier scored them below 1 (Result.Overclaimed); absent when
	// none.
	ClaimedButFailed int `json:"claimed_but_failed,omitempty"`
}

// CostSummary is summary.per_harness.<h>.cost, in USD.
type CostSummary struct {
	// TotalCostUSD is null when no row was priced.
	TotalCostUSD *float64 `json:"total_cost_usd"`
	// CostPerPassUSD is set only when every row, errored rows included,
	// carries a cost and at least one row passed.
	CostPerPassUSD *float64 `json:"cost_per_pass_usd"`
	// Source is "observed" when every row carries
	// metrics.usage_observed.cost_usd (the gateway's figures are used),
	// else "reported" (metrics.cost_usd, the agent's own); absent when no
	// row was priced.
	Source string `json:"source,omitempty"`
}

// TaskStat is summary.per_harness.<h>.per_task.<task>.
type TaskStat struct {
	N          int      `json:"n"`
	Errored    int      `json:"errored"`
	Scored     int      `json:"scored"`
	Passed     int      `json:"passed"`
	PassRate   *float64 `json:"pass_rate"`
	MeanReward *float64 `json:"mean_reward"`
}

// Comparison is summary.comparisons.<h> against the baseline harness.
type Comparison struct {
	Baseline         string   `json:"baseline"`
	PassRateDelta    *float64 `json:"pass_rate_delta"`
	PassedDelta      *int     `json:"passed_delta"`
	CostDeltaUSD     *float64 `json:"cost_delta_usd"`
	NormalizedGain   *float64 `json:"normalized_gain"`
	NormalizedChange *float64 `json:"normalized_change"`
	Errored          int      `json:"errored"`
	BaselineErrored  int      `json:"baseline_errored"`
	McNemar          McNemar  `json:"mcnemar"`
}

// McNemar is the paired comparison on the (task, model, repeat) cells both
// arms scored (see Compare).
type McNemar struct {
	N                   int      `json:"n"`
	NGained             int      `json:"n_gained"`
	NLost               int      `json:"n_lost"`
	NBothPassed         int      `json:"n_both_passed"`
	NBothFailed         int      `json:"n_both_failed"`
	NExcluded           int      `json:"n_excluded"`
	NUnits              int      `json:"n_units"`
	PseudoReplicated    bool     `json:"pseudo_replicated"`
	PairedPassRateDelta *float64 `json:"paired_pass_rate_delta"`
	// CILo, CIHi are the 95 % interval of PairedPassRateDelta named by
	// CIMethod (Newcombe's hybrid score interval); null when N is 0.
	CILo     *float64 `json:"ci_lo"`
	CIHi     *float64 `json:"ci_hi"`
	CIMethod string   `json:"ci_method,omitempty"`
	// BootstrapCILo, BootstrapCIHi are the seeded task-level percentile
	// bootstrap interval of PairedPassRateDelta; absent when N is 0 (and
	// in artifacts written before they existed, whose ci_lo, ci_hi held
	// the bootstrap). CorrectionFamilySize is the number of harnesses in
	// Holm's family; absent in those older artifacts.
	BootstrapCILo      *float64 `json:"bootstrap_ci_lo,omitempty"`
	BootstrapCIHi      *float64 `json:"bootstrap_ci_hi,omitempty"`
	BootstrapResamples int      `json:"bootstrap_resamples"`
	BootstrapSeed      uint64   `json:"bootstrap_seed"`
	PExact             *float64 `json:"p_exact"`
	PAdjusted          *float64 `json:"p_adjusted"`
	// PExactUnderflow is true when the exact p-value is below PFloor (it
	// can be below the smallest float64): PExact then holds PFloor, a
	// bound, and PExactLog10 the value's log10 (to 6 decimals). The same
	// holds for PAdjusted. Absent for a p-value of PFloor or more.
	PExactUnderflow      bool     `json:"p_exact_underflow,omitempty"`
	PExactLog10          *float64 `json:"p_exact_log10,omitempty"`
	PAdjustedUnderflow   bool     `json:"p_adjusted_underflow,omitempty"`
	PAdjustedLog10       *float64 `json:"p_adjusted_log10,omitempty"`
	CorrectionFamily     string   `json:"correction_family"`
	CorrectionFamilySize int      `json:"correction_family_size,omitempty"`
	Significant          *bool    `json:"significant"`
}

// Treatment is metrics.treatment: the skill a skill arm offered and the
// version of the notice opening its prompt (events.Treatment). Rows of
// different notice versions are not comparable.
type Treatment = events.Treatment

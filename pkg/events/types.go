package events

// RunSpec is what a user asked for in `proctor tasks run`.
type RunSpec struct {
	// TasksRoot is the absolute tasks root.
	TasksRoot string `json:"tasks_root"`
	// Tasks are the selected task names; empty with All means every task.
	Tasks []string `json:"tasks,omitempty"`
	All   bool     `json:"all,omitempty"`
	// Strict refuses tasks whose definitions hold unknown keys (planning
	// fails naming the file, key and line) instead of warning.
	Strict bool `json:"strict,omitempty"`
	// Harnesses are harness references ("oracle", "agent:<dir>", ...).
	Harnesses []string `json:"harnesses"`
	// Models default to ["default"].
	Models  []string `json:"models"`
	Repeats int      `json:"repeats"`
	// BaselineHarness is the harness every other one is compared with.
	BaselineHarness string `json:"baseline_harness,omitempty"`
	// OutputDir is the absolute directory under which each cell's files go.
	OutputDir string `json:"output_dir"`
	// OutJSON and OutMD are where the aggregator writes the artifact and the
	// report ("" = not written).
	OutJSON string `json:"out_json,omitempty"`
	OutMD   string `json:"out_md,omitempty"`
	// ImageMap is the image-reference mapping in force (from, to).
	ImageMap map[string]string `json:"image_map,omitempty"`
	// AgentGraceSec is the SIGTERM-to-SIGKILL grace at an agent's deadline,
	// in seconds (0 = 10 s).
	AgentGraceSec float64 `json:"agent_grace_sec,omitempty"`
	// BaseDir is the directory relative agent:<dir> and command:<template>
	// paths were given against (the caller's working directory).
	BaseDir string `json:"base_dir,omitempty"`
	// ProbeTargets are the isolation probe's network and dns targets in
	// --probe-targets syntax (url=URL,tcp=HOST:PORT,dns=NAME,
	// gateway=PORT/PORT...; "" the defaults, isoprobe.DefaultTargets).
	ProbeTargets string `json:"probe_targets,omitempty"`
	// Retries is how many times a cell errored with a retryable class
	// (ErrorClass.Retryable: build, sandbox, infra) is run again, each
	// time as a new attempt; 0 (the default) runs no cell again.
	Retries int `json:"retries,omitempty"`
	// NoIntercept keeps the egress proxy of the arms that reach a model a
	// plain CONNECT tunnel: no model gateway (DESIGN §6.1), so the
	// credentials enter the sandbox and no ModelCall is recorded.
	NoIntercept bool `json:"no_intercept,omitempty"`
	// AgentUser is who the in-container agent arms solve as (--agent-user):
	// "sealed" (uid 10001 owning only the working tree; "" in a log
	// written before the flag existed means the same) or "task" (Harbor's:
	// the task's or step's [agent].user, else the image's USER, root
	// included).
	AgentUser string `json:"agent_user,omitempty"`
	// Caps pause the run when one trips (RunControl, action pause, with
	// the cap named); the operator continues or cancels it. Zero means no
	// cap.
	Caps RunCaps `json:"caps,omitempty,omitzero"`
}

// RunCaps are a run's spending caps (`tasks run --max-cost-usd`, ...).
// Each trips at most once per run: after a continue the run goes on past
// it. Zero values mean no cap.
type RunCaps struct {
	// MaxCostUSD pauses the run once the cost of its cells reaches it, in
	// US dollars: each cell's observed cost where the model gateway saw
	// it, else the cost its agent reported.
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	// MaxErroredFraction pauses the run when more than this fraction of
	// its done cells errored, once at least ErroredMinCount cells are
	// done (a provider outage, an image that never builds). Cells refused
	// before any build are not counted.
	MaxErroredFraction float64 `json:"max_errored_fraction,omitempty"`
	ErroredMinCount    int     `json:"errored_min_count,omitempty"`
	// MaxErroredPerTask pauses the run when this many cells of one task
	// errored (a per-task circuit breaker).
	MaxErroredPerTask int `json:"max_errored_per_task,omitempty"`
}

// Any reports whether some cap is set.
func (c RunCaps) Any() bool {
	return c.MaxCostUSD > 0 || c.MaxErroredFraction > 0 || c.MaxErroredPerTask > 0
}

// RunRequestedData opens a run.
type RunRequestedData struct {
	Spec           RunSpec `json:"spec"`
	ProctorVersion string  `json:"proctor_version"`
	Host           string  `json:"host,omitempty"`
}

// RunPlannedData closes planning: Cells is the number of CellPlanned events
// of the run, each of which ends in exactly one terminal event (Verdict,
// CellErrored or CellRefused).
type RunPlannedData struct {
	Cells int      `json:"cells"`
	Tasks []string `json:"tasks"`
	// Error is set when planning failed (bad root, unknown harness); the run
	// then has no cells.
	Error string `json:"error,omitempty"`
}

// CellPlannedData describes one cell of the matrix.
type CellPlannedData struct {
	Task         string         `json:"task"`
	Harness      string         `json:"harness"`
	Model        string         `json:"model"`
	Repeat       int            `json:"repeat"`
	TaskDir      string         `json:"task_dir"`
	TaskRevision string         `json:"task_revision"`
	TaskMeta     map[string]any `json:"task_metadata,omitempty"`
	OutputDir    string         `json:"output_dir"`
	// UnknownKeys are the dotted definition keys of the task that neither
	// proctor, Harbor nor BenchFlow defines (ignored; see task.UnknownKey).
	UnknownKeys []string `json:"unknown_keys,omitempty"`
	// SetupCheck: the cell's harness checks the setup (the oracle, the
	// probe; harness.Arm.SetupCheck): its rows are never compared against
	// a baseline, never one and never in Holm's family. The planner records
	// the arm's word so that a projection compares as the run was planned,
	// whichever build replays the log.
	SetupCheck bool `json:"setup_check,omitempty"`
	// HarnessKind is the harness's canonical kind (harness.Ref.Kind, an
	// alias resolved: docker-oracle is oracle), the planner's word; the
	// row's harness_kind. Absent in logs written before it: the part of
	// Harness before its first ":".
	HarnessKind string `json:"harness_kind,omitempty"`
	// Trees are the digests of the directories the cell reads besides its
	// task (its agent's, its skill's), stored in the PROCTOR_TREES bucket
	// when the run was planned on a cluster, so a worker that does not
	// see Path fetches the tree by Digest. Absent in single-process runs
	// and in logs written before it. The task's own tree is stored under
	// TaskRevision.
	Trees []InputTree `json:"trees,omitempty"`
}

// InputTree is a directory a cell reads, stored by its digest.
type InputTree struct {
	// Name says what it is to the harness ("agent dir", "skill dir").
	Name string `json:"name"`
	// Path is the directory on the planner's machine (the spec's path).
	Path string `json:"path"`
	// Digest is its tree digest: the object's name in PROCTOR_TREES.
	Digest string `json:"digest"`
}

// CellRefusedData ends a cell that was never launched: a harness refusal or
// an unresolved env reference, decided from the task files before any build.
type CellRefusedData struct {
	ErrorClass    string   `json:"error_class"`
	Reason        string   `json:"reason"`
	UnresolvedEnv []string `json:"unresolved_env,omitempty"`
}

// ImageBuiltData records the image phase of a cell: the image it runs in,
// or, with Error set, a build or pull that failed (a CellErrored of class
// build follows). BuildSec is the phase's wall time in seconds, failed or
// not.
type ImageBuiltData struct {
	Image    string   `json:"image"`
	Cached   bool     `json:"cached"`
	BuildSec float64  `json:"build_sec"`
	Rewrites []string `json:"rewrites,omitempty"`
	Workdir  string   `json:"workdir,omitempty"`
	// ImageID is the image's id (sha256:...).
	ImageID string `json:"image_id,omitempty"`
	// Key is the image key of a built task image: what its cache is keyed
	// on (the revision, the Dockerfile as built, the base image ids).
	Key string `json:"key,omitempty"`
	// Bases maps each base image of a build (after the image map) to the
	// image id it resolved to.
	Bases map[string]string `json:"bases,omitempty"`
	// ImageMapRules are the image-map rules applied (their `from`, sorted).
	ImageMapRules []string `json:"image_map_rules,omitempty"`
	// Error is the failed build's or pull's error.
	Error string `json:"error,omitempty"`
	// QueueSec is how long the cell waited for a slot (`--concurrency`)
	// before its image phase, in seconds; absent when it did not wait (a
	// launcher with shared slots takes none before the image: its wait is
	// on SandboxStarted).
	QueueSec float64 `json:"queue_sec,omitempty"`
}

// SandboxStartedData records the driver's handle so a restarted process can
// find and clean up what a dead one left.
type SandboxStartedData struct {
	Driver  string            `json:"driver"`
	ID      string            `json:"id"`
	State   map[string]string `json:"state,omitempty"`
	Node    string            `json:"node"`
	Network string            `json:"network,omitempty"`
	// Limits are the sandbox's resource limits (DESIGN §4).
	Limits *SandboxLimits `json:"limits,omitempty"`
	// QueueSec is how long the cell waited for a sandbox slot
	// (`--concurrency`) once its image was ready, in seconds; absent when
	// it did not wait.
	QueueSec float64 `json:"queue_sec,omitempty"`
}

// SandboxLimits are the limits a sandbox got: CPUs (fractions allowed),
// memory in MiB (swap limited to the same), the most processes and threads
// at once, and no-new-privileges. A zero or absent number means no limit;
// the sources are "task" (declared by the task) or "default".
type SandboxLimits struct {
	CPUs            float64 `json:"cpus,omitempty"`
	MemoryMB        int64   `json:"memory_mb,omitempty"`
	PidsLimit       int64   `json:"pids_limit,omitempty"`
	NoNewPrivileges bool    `json:"no_new_privileges"`
	MemorySource    string  `json:"memory_source,omitempty"`
	CPUsSource      string  `json:"cpus_source,omitempty"`
}

// StartedData opens a solve.
type StartedData struct {
	Harness string `json:"harness"`
	Model   string `json:"model,omitempty"`
	// Synthesized is true when the agent printed no Started line.
	Synthesized bool `json:"synthesized,omitempty"`
	// SessionID is the agent's own session id, as its Started line gave
	// it (Anpord's sessionId).
	SessionID string `json:"session_id,omitempty"`
}

// MessageData is text from the agent (a reply or a response line).
type MessageData struct {
	Role string `json:"role,omitempty"`
	Text string `json:"text"`
}

// CommandData is a shell command the agent ran.
type CommandData struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Output   string `json:"output,omitempty"`
}

// FileChangeData is a file the agent created, edited or deleted.
type FileChangeData struct {
	Path string `json:"path"`
	Kind string `json:"kind,omitempty"`
	// Paths are every file of a change that names several (Anpord's
	// paths array); Path is then the first.
	Paths []string `json:"paths,omitempty"`
}

// ToolCallData is one tool invocation.
type ToolCallData struct {
	Name  string `json:"name"`
	Input any    `json:"input,omitempty"`
	Error bool   `json:"error,omitempty"`
	// CallID and Status are the agent's own id of the call and its
	// status as printed (Anpord's callId, status).
	CallID string `json:"call_id,omitempty"`
	Status string `json:"status,omitempty"`
}

// UsageData is model usage; token counts add up over a cell. CostUSD is in
// US dollars. A nil field is one the agent did not report (absent from the
// JSON), never 0; a reported 0 is kept as 0.
type UsageData struct {
	Model            string   `json:"model,omitempty"`
	PromptTokens     *int64   `json:"prompt_tokens,omitempty"`
	CompletionTokens *int64   `json:"completion_tokens,omitempty"`
	CacheReadTokens  *int64   `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens *int64   `json:"cache_write_tokens,omitempty"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
	Calls            *int64   `json:"calls,omitempty"`
	// TotalTokens is a total the agent printed itself (totalTokens),
	// kept as printed; the row's total_tokens is still the sum of the
	// parts.
	TotalTokens *int64 `json:"total_tokens,omitempty"`
	// Partial, when set, says why these counts are only part of what the
	// solve used (a lower bound: a stream that ended without the agent's
	// own totals); the row then has metrics.usage_partial and the reason.
	Partial string `json:"partial,omitempty"`
}

// Count returns a pointer to n, for the optional counts of UsageData.
func Count(n int64) *int64 { return &n }

// OperationData is a user-defined operation (PROCTOR_OP / DOKIMI_OP lines).
type OperationData struct {
	OpType string         `json:"op_type"`
	Fields map[string]any `json:"fields,omitempty"`
}

// EgressDecisionData is one record of the proxy-logger
// (services/proxylogger): a connection's decision, made before the upstream
// connect when allowed, and, for an allowed connection, a second record at
// close (Closed true, same Conn) with the byte counts and duration. A
// consumer counting decisions skips Closed records.
type EgressDecisionData struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Method   string `json:"method"`
	Decision string `json:"decision"` // allowed, denied, error
	Reason   string `json:"reason,omitempty"`
	// Conn numbers the proxy's connections; a decision and its close
	// record share it.
	Conn uint64 `json:"conn,omitempty"`
	// Status is the HTTP status answered to the client, or the upstream's
	// for a forwarded plain-HTTP request.
	Status int `json:"status,omitempty"`
	// Resolved lists the addresses the host resolved to at connect time.
	Resolved []string `json:"resolved,omitempty"`
	// Upstream is the address connected to ("ip:port").
	Upstream string `json:"upstream,omitempty"`
	// Closed marks the close record of an allowed connection.
	Closed bool `json:"closed,omitempty"`
	// BytesUp (client to upstream) and BytesDown (upstream to client) are
	// bytes; DurationSec is seconds from the client's connect.
	BytesUp     int64   `json:"bytes_up,omitempty"`
	BytesDown   int64   `json:"bytes_down,omitempty"`
	DurationSec float64 `json:"duration_sec,omitempty"`
}

// ModelCallData is one call to a model provider's API as the model gateway
// saw it (DESIGN §6.1): one request the egress proxy intercepted on a
// provider's host, with the usage its response reported. Bodies are never
// stored, only these figures. A token count is nil when the response
// reported none (an error answer, an API the proxy does not parse: a
// request without usage); a reported 0 is 0.
//
// Input tokens exclude cached input (Anthropic's convention; OpenAI's and
// Gemini's cached tokens are counted in CacheReadTokens); output tokens
// include reasoning and thinking tokens. Seconds are wall time measured by
// the proxy; bytes are as read from the client and the upstream
// (bodies and heads).
type ModelCallData struct {
	// Provider is the provider whose host the request went to.
	Provider string `json:"provider"`
	// Host and Port are the request's target; Path its URL path (never the
	// query, which may hold a key); Method its method.
	Host   string `json:"host"`
	Port   int    `json:"port,omitempty"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// API names the shape parsed: anthropic.messages (Vertex AI's
	// rawPredict and Foundry's included), openai.chat, openai.responses,
	// gemini.generate, bedrock.invoke, bedrock.converse; "" when the
	// request was none of them.
	API string `json:"api,omitempty"`
	// Model is the response's model, else the request's (its body's, or
	// the model its path names: Gemini, Vertex AI, Bedrock).
	Model string `json:"model,omitempty"`
	// Stream is true for a streamed response: Server-Sent Events, or
	// Bedrock's AWS event stream.
	Stream bool `json:"stream,omitempty"`
	// Status is the upstream's HTTP status (0: no response).
	Status           int    `json:"status"`
	InputTokens      *int64 `json:"input_tokens,omitempty"`
	OutputTokens     *int64 `json:"output_tokens,omitempty"`
	CacheReadTokens  *int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens *int64 `json:"cache_write_tokens,omitempty"`
	// TTFBSec runs from the request's head read from the client to the
	// first byte of the upstream's response; DurationSec to the response's
	// last byte written to the client.
	TTFBSec     float64 `json:"ttfb_sec"`
	DurationSec float64 `json:"duration_sec"`
	// RequestBytes and ResponseBytes count the request and the response
	// (heads and bodies).
	RequestBytes  int64 `json:"request_bytes"`
	ResponseBytes int64 `json:"response_bytes"`
	// CostUSD is the call priced from the price table dated PriceTable
	// (pkg/providers); nil with CostNote saying why (a model not in the
	// table, no model, no usage).
	CostUSD    *float64 `json:"cost_usd,omitempty"`
	CostNote   string   `json:"cost_note,omitempty"`
	PriceTable string   `json:"price_table,omitempty"`
	// Error says how the exchange failed (the upstream unreachable, the
	// client gone mid-response); "" when it completed.
	Error string `json:"error,omitempty"`
	// Conn is the proxy connection (EgressDecisionData.Conn) it came on.
	Conn uint64 `json:"conn,omitempty"`
}

// FinishedData closes a solve. Seconds are wall time.
type FinishedData struct {
	// Reason is "exit N", "timeout", or the agent's own reason.
	Reason      string  `json:"reason"`
	ExitCode    int     `json:"exit_code"`
	TimedOut    bool    `json:"timed_out,omitempty"`
	DurationSec float64 `json:"duration_sec"`
	// StdoutTail is the bounded, valid UTF-8 tail of the solve's output.
	StdoutTail string `json:"stdout_tail,omitempty"`
	// NoAttempt is true when the solver made no attempt (no output, no
	// event, or its install failed): the cell is a solver_error.
	NoAttempt bool `json:"no_attempt,omitempty"`
	// Synthesized is true when proctor wrote this event for the agent.
	Synthesized bool `json:"synthesized,omitempty"`
	// QueueSec is how long the cell's started sandbox waited for a solve
	// slot (`--concurrency`; a sandbox is started ahead while the node's
	// solves run), in seconds; absent when it did not wait.
	QueueSec float64 `json:"queue_sec,omitempty"`
	// AgentReported holds metrics.json values as the agent reported them.
	AgentReported map[string]any `json:"agent_reported,omitempty"`
	// Isolation records the sandbox of the solve phase (e.g. network).
	Isolation map[string]any `json:"isolation,omitempty"`
	// Treatment is a skill arm's treatment: the skill and the version of
	// the notice that opened the prompt; copied to the row's
	// metrics.treatment.
	Treatment *Treatment `json:"treatment,omitempty"`
	// IsolationProbe is a probe arm's status per leak class (open, closed,
	// n/a, untested, expected; DESIGN §6), copied to the row's
	// metrics.isolation_probe.
	IsolationProbe map[string]string `json:"isolation_probe,omitempty"`
	// OOMKilled is true when the kernel killed a process of the sandbox at
	// its memory limit during the solve.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// TamperFindings are the files the solve created or changed in the
	// work tree that shadow a test runner or a standard module of the
	// verifier's language (verify.ShadowSnapshot), found after the solve
	// and before the verifier: the cell is suspect. Empty when none.
	TamperFindings []TamperFinding `json:"tamper_findings,omitempty"`
	// LongLines counts the solve's stdout lines longer than the line bound
	// (1 MiB, sandbox.DefaultMaxLine): each is response text, never read
	// as an event or operation line, and kept whole in response.txt (up to
	// its cap).
	LongLines int `json:"long_lines,omitempty"`
	// ResponseTruncated is true when the response text was longer than
	// response.txt's cap (64 MiB, cellfs.MaxLogBytes): the file holds its
	// first 64 MiB and a last line saying so.
	ResponseTruncated bool `json:"response_truncated,omitempty"`
	// LowFidelityOps counts, by type (tool, subagent, loop), the solve's
	// unstructured output lines (stdout response text and stderr) that
	// mention one of those words (harness.LowFidelityType): operations seen
	// only in free text, counted apart from the structured Operation
	// events, as the task-runs seed counts them. Absent when none.
	LowFidelityOps map[string]int `json:"low_fidelity_ops,omitempty"`
	// WorkTree is what the cell's work/ holds of the agent's working tree,
	// copied out after the solve and before anything else touched it
	// (an in-container agent arm's; nil for other arms).
	WorkTree *WorkTree `json:"work_tree,omitempty"`
	// Recompile is the task's build command run again as root after the
	// solve and before the verifier (nil when the instruction names none
	// or the arm is not an agent's).
	Recompile *Recompile `json:"recompile,omitempty"`
}

// WorkTree is the copy of an agent's final working tree in the cell's
// work/: symlinks stored as symlinks (never followed), devices and fifos
// left out, within a cap of CapBytes of file contents and CapEntries
// entries. What the cap left out is counted (SkippedEntries,
// SkippedBytes) and its first names listed (Skipped, "PATH (N bytes)" or
// "PATH (over the entry cap)"). Error says why nothing was copied.
type WorkTree struct {
	Path           string   `json:"path"`
	Files          int      `json:"files"`
	Dirs           int      `json:"dirs"`
	Symlinks       int      `json:"symlinks"`
	Bytes          int64    `json:"bytes"`
	CapBytes       int64    `json:"cap_bytes"`
	CapEntries     int      `json:"cap_entries"`
	Truncated      bool     `json:"truncated,omitempty"`
	SkippedEntries int      `json:"skipped_entries,omitempty"`
	SkippedBytes   int64    `json:"skipped_bytes,omitempty"`
	Skipped        []string `json:"skipped,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// Recompile is the task's build command (a g++, gcc, clang or clang++
// line of its instruction) run again as root in the working directory
// after the agent's solve, the program it builds removed first, so the
// verifier scores a fresh build of what the agent left. Failed is true
// when a command exited non-zero or timed out; OutputTail is then the
// end of the compiler's output (recompile.log holds all of it). The cell
// is scored as the verifier finds it either way.
type Recompile struct {
	Commands    []string `json:"commands"`
	ExitCode    int      `json:"exit_code"`
	TimedOut    bool     `json:"timed_out,omitempty"`
	DurationSec float64  `json:"duration_sec"`
	Failed      bool     `json:"failed"`
	OutputTail  string   `json:"output_tail,omitempty"`
}

// TamperFinding is one file a solve left that could run instead of what
// the verifier means to run.
type TamperFinding struct {
	// Path is the file's absolute path in the sandbox.
	Path string `json:"path"`
	// Change is "created" (the image did not have it) or "changed"
	// (its contents or kind differ from the image's).
	Change string `json:"change"`
	// Shadows says what it stands in for ("python module unittest",
	// "pytest conftest", "python start-up hook", "runner jest", ...).
	Shadows string `json:"shadows"`
}

// VerifierFinding is one thing the verifier phase noticed that the
// reward alone does not show (verify.Findings).
type VerifierFinding struct {
	// Kind is reward_exit_conflict, no_tests_executed or collect_failed.
	Kind string `json:"kind"`
	// Detail is the evidence, one line.
	Detail string `json:"detail"`
}

// VerifyStartedData opens the verifier phase.
type VerifyStartedData struct {
	Node    string `json:"node"`
	Network string `json:"network,omitempty"`
}

// VerdictData is the verifier's outcome. Reward is nil when there is no
// verdict (Error says why); TimedOut means the verifier overran its budget
// (reward 0, not an error).
type VerdictData struct {
	Reward      *float64           `json:"reward"`
	Rewards     map[string]float64 `json:"rewards,omitempty"`
	ReturnCode  *int               `json:"returncode,omitempty"`
	TimedOut    bool               `json:"timed_out,omitempty"`
	Error       string             `json:"error,omitempty"`
	RawReward   string             `json:"raw_reward,omitempty"`
	DurationSec float64            `json:"duration_sec"`
	StdoutTail  string             `json:"stdout_tail,omitempty"`
	// LeftoverProcesses is how many processes (besides the container's
	// PID 1, zombies not counted) were still alive in the sandbox when the
	// test script ended and the sandbox was frozen, before the reward was
	// read: a sign of tampering or of a sloppy test. Nil when not measured.
	LeftoverProcesses *int `json:"leftover_processes,omitempty"`
	// OOMKilled is true when the kernel killed a process of the sandbox at
	// its memory limit during the verifier phase (not before it).
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Findings are what the verifier phase noticed beside the reward (a
	// pass whose script exited non-zero, a runner that executed no
	// tests, a collect hook that failed); recorded, never decisive.
	Findings []VerifierFinding `json:"findings,omitempty"`
	// Output names the object in the PROCTOR_TREES bucket that holds the
	// cell's output directory as this attempt left it, stored before
	// this Verdict was published (a cluster run; absent in single-process
	// runs, which write the output directory in place).
	Output *OutputObject `json:"output,omitempty"`
}

// OutputObject is a cell attempt's output directory stored as an object.
type OutputObject struct {
	// Object is its name: cell/<run>/<cell hash>/<attempt>.
	Object string `json:"object"`
	// Digest is the digest of its files, checked when it is fetched.
	Digest string `json:"digest"`
}

// StepStartedData opens one step of a multi-step cell (Harbor's
// [[steps]]): the steps run in declared order in the cell's one sandbox,
// each solved and then scored by its own verifier before the next.
type StepStartedData struct {
	// Index is the step's 0-based place in declared order; Of the number
	// of steps.
	Index int    `json:"index"`
	Of    int    `json:"of"`
	Name  string `json:"name"`
}

// StepVerdictData closes one step of a multi-step cell: its solve, its
// verifier's verdict, and whether it stopped the trial. A step that never
// ran because an earlier one stopped the trial is recorded with Skipped
// (and no Solve or Verdict): skipped, never errored. The cell's own
// Finished and Verdict follow the last step, the Verdict's reward rolled
// up by multi_step_reward_strategy.
type StepVerdictData struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Skipped: an earlier step stopped the trial; SkipReason says which.
	Skipped    bool   `json:"skipped,omitempty"`
	SkipReason string `json:"skip_reason,omitempty"`
	// Solve is the step's solve (nil when it never ran).
	Solve *FinishedData `json:"solve,omitempty"`
	// Verdict is the step verifier's outcome (nil when the step has no
	// verdict: skipped, or Error).
	Verdict *VerdictData `json:"verdict,omitempty"`
	// Error says why a step that ran has no verdict (its workdir upload,
	// setup.sh or healthcheck failed, or its verifier could not run).
	Error string `json:"error,omitempty"`
	// Stop is why this step stopped the trial (its min_reward missed, or
	// no verdict); "" when the next step runs.
	Stop string `json:"stop,omitempty"`
}

// CellErroredData ends a cell that has no verdict.
type CellErroredData struct {
	ErrorClass string `json:"error_class"`
	Error      string `json:"error"`
	// Output names the object in the PROCTOR_TREES bucket that holds the
	// cell's output directory as this attempt left it (its logs: why it
	// errored), stored before this event was published, as a Verdict's
	// Output; absent when nothing was stored (a single-process run, a
	// cell errored before it ran on a worker, a store that failed).
	Output *OutputObject `json:"output,omitempty"`
}

// CellSupersededData marks the attempts before Attempt as replaced.
type CellSupersededData struct {
	PreviousAttempt int    `json:"previous_attempt"`
	Reason          string `json:"reason,omitempty"`
}

// SolveFrozenData answers a `runs pause --now` for one cell whose solve
// (or a step's) runs on a launcher: its sandbox frozen, with the solve's
// budget clock stopped until the thaw (SolveThawed), or, when the
// sandbox driver cannot freeze (Reason), not frozen: the solve runs on.
// A cell whose solve had not begun is frozen before its first command.
type SolveFrozenData struct {
	// Frozen: every process of the sandbox is stopped and the solve's
	// budget does not run.
	Frozen bool `json:"frozen"`
	// Alive is how many processes the freeze stopped, besides the
	// sandbox's keep-alive.
	Alive int `json:"alive,omitempty"`
	// Driver is the sandbox driver (docker, process).
	Driver string `json:"driver"`
	// Reason says why the sandbox was not frozen.
	Reason string `json:"reason,omitempty"`
	// Step is the step whose solve was frozen (multi-step tasks).
	Step string `json:"step,omitempty"`
	// Node is the launcher's node.
	Node string `json:"node,omitempty"`
}

// SolveThawedData ends a freeze of SolveFrozen: the sandbox runs again
// (on a continue, or to stop it on a cancel), after FrozenSec seconds in
// which the solve's budget did not run. Error says why the thaw failed
// (the solve then ends as its sandbox does).
type SolveThawedData struct {
	FrozenSec float64 `json:"frozen_sec"`
	Error     string  `json:"error,omitempty"`
}

// RunFinishedData closes a run.
type RunFinishedData struct {
	Status string         `json:"status"` // finished, failed, interrupted
	Counts map[string]int `json:"counts,omitempty"`
	Error  string         `json:"error,omitempty"`
	// Epoch is the run's epoch (its resumes) when it finished; absent (0)
	// before any resume and in logs of older versions.
	Epoch int `json:"epoch,omitempty"`
}

// RunResumedData reopens a run that ended without every cell's verdict
// (its process died, or it was interrupted): the RunFinished of an older
// epoch no longer ends the run, and Cells, whose attempts had no terminal
// event, run again as new attempts. Cells with a terminal event keep it.
type RunResumedData struct {
	// Epoch is the run's new epoch (1 for the first resume).
	Epoch int `json:"epoch"`
	// Cells are the ids of the cells that run again, in plan order.
	Cells []string `json:"cells"`
	// Owner names the resuming process ("host pid N").
	Owner string `json:"owner,omitempty"`
	// Identity is the hash of the run's declared inputs, unchanged since
	// the run was requested.
	Identity string `json:"identity,omitempty"`
	// OutJSON and OutMD, when set, replace the spec's artifact and report
	// paths (runs resume --out-json / --out-md).
	OutJSON string `json:"out_json,omitempty"`
	OutMD   string `json:"out_md,omitempty"`
}

// Treatment is what a skill arm gave the agent beside the task: the
// skill's name and the version of the notice opening its prompt (a change
// of the notice's wording is a new version; deltas across versions are
// not comparable).
type Treatment struct {
	Skill         string `json:"skill"`
	NoticeVersion int    `json:"notice_version"`
}

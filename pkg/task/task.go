// Package task discovers and loads evaluation tasks in the Harbor /
// terminal-bench layout (task.toml) and the BenchFlow / SkillsBench layout
// (task.md), as DESIGN §3 describes.
package task

// Layout names the on-disk shape a task was loaded from.
type Layout string

const (
	// LayoutHarbor is a directory with task.toml, instruction.md,
	// environment/, solution/solve.sh and tests/test.sh.
	LayoutHarbor Layout = "harbor"
	// LayoutBenchFlow is a directory with task.md (YAML frontmatter and a
	// Markdown body), environment/, oracle/solve.sh and verifier/test.sh.
	LayoutBenchFlow Layout = "benchflow"
)

// Network policies, as Harbor and BenchFlow name them.
const (
	NetworkPublic    = "public"
	NetworkNone      = "no-network"
	NetworkAllowlist = "allowlist"
)

// NetworkPolicy is a phase's network access.
type NetworkPolicy struct {
	// Mode is NetworkPublic, NetworkNone or NetworkAllowlist.
	Mode string `json:"mode"`
	// AllowedHosts are host or host:port entries (bare host = :443): the
	// hosts of NetworkAllowlist; with NetworkPublic, the `egress` list an
	// agent arm's solve gets through the egress proxy (an agent never gets
	// the open network), the seed's public-plus-egress pattern.
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
}

// Task is one loaded task. Paths are absolute and symlink-resolved; a path
// field is "" when the file does not exist.
type Task struct {
	// Name is the task directory's path relative to the tasks root, with
	// forward slashes (for a task loaded directly: the directory's base name).
	Name string `json:"name"`
	// Dir is the task directory.
	Dir string `json:"dir"`
	// Layout says which definition file the task was loaded from.
	Layout Layout `json:"layout"`
	// DefinitionFile is task.toml or task.md.
	DefinitionFile string `json:"definition_file"`

	// Prompt is the instruction given to an agent (instruction.md, or the
	// task.md body reduced as DESIGN §3 says).
	Prompt string `json:"prompt"`

	// EnvironmentDir is the Docker build context (environment/).
	EnvironmentDir string `json:"environment_dir,omitempty"`
	// Dockerfile is environment/Dockerfile.
	Dockerfile string `json:"dockerfile,omitempty"`
	// DockerImage is the sandbox table's docker_image: a prebuilt image used
	// when there is no Dockerfile.
	DockerImage string `json:"docker_image,omitempty"`
	// Workdir is the sandbox table's workdir ("" = the image's WORKDIR).
	Workdir string `json:"workdir,omitempty"`

	// SolutionDir holds the reference solution (solution/ or oracle/);
	// SolutionScript is its solve.sh.
	SolutionDir    string `json:"solution_dir,omitempty"`
	SolutionScript string `json:"solution_script,omitempty"`
	// TestsDir holds the verifier (tests/ or verifier/); TestScript is its
	// test.sh.
	TestsDir   string `json:"tests_dir,omitempty"`
	TestScript string `json:"test_script,omitempty"`

	// AgentTimeoutSec is [agent].timeout_sec in seconds (default 600).
	AgentTimeoutSec float64 `json:"agent_timeout_sec"`
	// AgentTimeoutDeclared is true when the definition sets
	// [agent].timeout_sec (BenchFlow gives an undeclared agent no
	// wall-clock budget at all; its arms declare one).
	AgentTimeoutDeclared bool `json:"agent_timeout_declared,omitempty"`
	// VerifierTimeoutSec is [verifier].timeout_sec in seconds (default 600).
	VerifierTimeoutSec float64 `json:"verifier_timeout_sec"`
	// BuildTimeoutSec is the sandbox table's build_timeout_sec in seconds
	// (default 600).
	BuildTimeoutSec float64 `json:"build_timeout_sec"`

	// CPUs, MemoryMB, StorageMB and GPUs are the sandbox table's resources
	// (0 = not set). memory = "2G" style strings are converted to MB.
	CPUs      float64 `json:"cpus,omitempty"`
	MemoryMB  int64   `json:"memory_mb,omitempty"`
	StorageMB int64   `json:"storage_mb,omitempty"`
	GPUs      int     `json:"gpus,omitempty"`

	// Network is the task's policy; AgentNetwork and VerifierNetwork are the
	// per-phase policies after [agent]/[verifier] overrides.
	Network         NetworkPolicy `json:"network"`
	AgentNetwork    NetworkPolicy `json:"agent_network"`
	VerifierNetwork NetworkPolicy `json:"verifier_network"`

	// VerifierEnv, OracleEnv and SandboxEnv hold the literal values that are
	// forwarded to the verifier, the oracle and every phase.
	VerifierEnv map[string]string `json:"verifier_env,omitempty"`
	OracleEnv   map[string]string `json:"oracle_env,omitempty"`
	SandboxEnv  map[string]string `json:"sandbox_env,omitempty"`
	// UnresolvedEnv lists, sorted, the env keys that are ${VAR} references
	// (without a usable default) or non-scalar values: the union of the
	// three scopes below. A cell is errored before any build only for the
	// keys of a scope its harness uses (UnresolvedFor).
	UnresolvedEnv []string `json:"unresolved_env,omitempty"`
	// UnresolvedVerifierEnv ([verifier.env] and the steps'),
	// UnresolvedOracleEnv ([solution.env] / [oracle.env]) and
	// UnresolvedSandboxEnv (the sandbox table's env) split UnresolvedEnv
	// by the phase that would get the variable.
	UnresolvedVerifierEnv []string `json:"unresolved_verifier_env,omitempty"`
	UnresolvedOracleEnv   []string `json:"unresolved_oracle_env,omitempty"`
	UnresolvedSandboxEnv  []string `json:"unresolved_sandbox_env,omitempty"`
	// EgressInvalid lists the allowlist entries (egress, allowed_hosts)
	// the egress proxy cannot hold — a URL, a path, a wildcard — each
	// naming its key: the task loads (the rest of the root runs), and a
	// harness that applies the list to its sandbox refuses the task
	// before any build (Needs.Egress).
	EgressInvalid []string `json:"egress_invalid,omitempty"`

	// OS is the sandbox table's os as Harbor reads it ("linux" or
	// "windows"; "" when unset, which Harbor takes as linux): a Windows
	// task's verifier is tests/test.bat.
	OS string `json:"os,omitempty"`

	// Metadata is the [metadata] table as parsed (dates as ISO-8601 strings).
	Metadata map[string]any `json:"metadata,omitempty"`

	// Revision is the hex SHA-256 of the task's files (sorted relative
	// paths and contents).
	Revision string `json:"revision"`

	// Compose is the task's compose environment (environment/
	// docker-compose.yaml defining a main service, see LoadCompose); nil
	// for a single-container task.
	Compose *Compose `json:"compose,omitempty"`

	// Healthcheck is the sandbox table's healthcheck: run in the task
	// container after it starts and before the solve, with Docker
	// HEALTHCHECK semantics; an environment that never becomes healthy
	// errors the cell. nil when none.
	Healthcheck *Healthcheck `json:"healthcheck,omitempty"`
	// VerifierMode is VerifierSeparate when the tests run in a fresh
	// container of VerifierEnvironment, resolved as Harbor does; "" when
	// they run in the agent's sandbox (shared).
	VerifierMode string `json:"verifier_mode,omitempty"`
	// VerifierEnvironment is the separate verifier's environment; nil in
	// shared mode.
	VerifierEnvironment *VerifierEnvironment `json:"verifier_environment,omitempty"`
	// VerifierCollect are the [[verifier.collect]] hooks, in order: run
	// after the solve and before the verifier.
	VerifierCollect []Collect `json:"verifier_collect,omitempty"`

	// Unsupported is a reason the task cannot run (a compose file proctor
	// refuses, see LoadCompose); "" when it can.
	Unsupported string `json:"unsupported,omitempty"`
	// Warnings are non-fatal remarks from loading.
	Warnings []string `json:"warnings,omitempty"`

	// SchemaVersion is schema_version (or Harbor's older version key) as
	// written ("" when absent).
	SchemaVersion string `json:"schema_version,omitempty"`
	// TaskName, Description, Keywords and Authors are the [task] table
	// (Harbor's package info; BenchFlow's name shorthand fills TaskName).
	TaskName    string   `json:"task_name,omitempty"`
	Description string   `json:"description,omitempty"`
	Keywords    []string `json:"keywords,omitempty"`
	Authors     []Author `json:"authors,omitempty"`
	// Source is the top-level source key (where the task was adapted from).
	Source string `json:"source,omitempty"`
	// AgentUser and VerifierUser are [agent].user and [verifier].user (a
	// name or a uid as text; "" = the image's USER).
	AgentUser    string `json:"agent_user,omitempty"`
	VerifierUser string `json:"verifier_user,omitempty"`
	// SkillsDir is the sandbox table's skills_dir (a path in the image).
	SkillsDir string `json:"skills_dir,omitempty"`
	// MCPServers is the sandbox table's mcp_servers, each as written.
	MCPServers []map[string]any `json:"mcp_servers,omitempty"`
	// Steps are the [[steps]] of a multi-step task (Harbor schema 1.1), in
	// declared order; nil for a single-step task. A multi-step task has no
	// root instruction, solution or test script of its own: each step has
	// them under steps/<name>/.
	Steps []Step `json:"steps,omitempty"`
	// MultiStepRewardStrategy is how the cell's reward is made of the
	// steps' (StepRewardMean, the default, or StepRewardFinal); "" for a
	// single-step task.
	MultiStepRewardStrategy string `json:"multi_step_reward_strategy,omitempty"`
	// Artifacts is the top-level artifacts list (Harbor's ArtifactConfig;
	// a bare path is its source): copied into the cell's artifacts/ after
	// the verifier, or into each step's steps/<name>/artifacts/ after the
	// step's verifier.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// InheritPriorSession is set on the view of a multi-step task that
	// one step's solve gets (never on a loaded task): the step declares
	// inherit_prior_session and a step ran before it, so an arm that can
	// resume its agent's session of that step does (Step.InheritPriorSession).
	InheritPriorSession bool `json:"inherit_prior_session,omitempty"`
	// OracleTimeoutSec is BenchFlow's [oracle].timeout_sec (seconds): the
	// reference solution's budget; 0 when unset (the agent's budget
	// applies, as in Harbor).
	OracleTimeoutSec float64 `json:"oracle_timeout_sec,omitempty"`
	// DockerfileWorkdir is the WORKDIR the final stage of
	// environment/Dockerfile sets, when the file alone decides it ("" when
	// it is the base image's or uses a variable: known only after a build).
	DockerfileWorkdir string `json:"dockerfile_workdir,omitempty"`
	// InstructionFile is the file Prompt was read from (instruction.md or
	// task.md); "" when there is none.
	InstructionFile string `json:"instruction_file,omitempty"`
	// OmittedSections lists, in body order, the task.md sections kept from
	// the agent ("role:reviewer", "scene:intro", "user-persona").
	OmittedSections []string `json:"omitted_sections,omitempty"`
	// MultiRole is true for a task.md declaring agents, scenes or user: it
	// runs as one agent with the base prompt.
	MultiRole bool `json:"multi_role,omitempty"`
	// SplitDiffers lists, for a migrated directory (a task.md that is a
	// BenchFlow document beside Harbor's split files: task.toml,
	// instruction.md, tests/, solution/), what a run would read
	// differently from the split files than from task.md: each differing
	// table key with both values ("agent.timeout_sec: 30 in task.md, 600 in
	// task.toml"), the prompt and the scripts.
	// task.md is what proctor runs; Harbor would run the split files. Nil
	// when they agree or the directory is not migrated.
	SplitDiffers []string `json:"split_differs,omitempty"`
	// Missing lists, sorted, the layout's files the task lacks
	// ("tests/test.sh", "oracle/solve.sh", "instruction.md",
	// "environment/Dockerfile" when there is no docker_image either).
	Missing []string `json:"missing,omitempty"`
	// Blocked is a reason every harness refuses the task because of its
	// files (a symlink leaving the tasks root); "" when none.
	Blocked string `json:"blocked,omitempty"`
	// UncheckedKeys lists, sorted, the definition keys Harbor or BenchFlow
	// define that proctor reads past without interpreting (dotted paths,
	// "benchflow", "verifier.type", ...).
	UncheckedKeys []string `json:"unchecked_keys,omitempty"`
	// UnknownKeys lists, sorted by key, the definition keys that neither
	// proctor, Harbor nor BenchFlow defines (most often misspellings), each
	// with its line and the closest known name. Each is also a warning; a
	// strict Loader refuses the task instead.
	UnknownKeys []UnknownKey `json:"unknown_keys,omitempty"`
}

// Author is one entry of [task].authors.
type Author struct {
	Name  string `json:"name"`
	Email string `json:"email,omitempty"`
}

// Difficulty returns metadata.difficulty as a string, or "".
func (t *Task) Difficulty() string { return metaString(t.Metadata, "difficulty") }

// Category returns metadata.category as a string, or "".
func (t *Task) Category() string { return metaString(t.Metadata, "category") }

func metaString(m map[string]any, k string) string {
	if s, ok := m[k].(string); ok {
		return s
	}
	return ""
}

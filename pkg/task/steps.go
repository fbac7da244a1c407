package task

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// Multi-step reward strategies (multi_step_reward_strategy), as Harbor
// names them. Harbor's default on a multi-step task is mean.
const (
	StepRewardMean  = "mean"
	StepRewardFinal = "final"
)

// Step is one [[steps]] entry of a multi-step task (Harbor task schema
// 1.1), in declared order, with its files under steps/<name>/ located.
// Paths are absolute and symlink-resolved, "" when absent.
type Step struct {
	// Name is the step's name, which is also its directory steps/<name>/.
	Name string `json:"name"`
	// Prompt is steps/<name>/instruction.md (the step's instruction).
	Prompt          string `json:"prompt"`
	InstructionFile string `json:"instruction_file,omitempty"`
	// TestsDir is steps/<name>/tests/: copied to /tests over the
	// task-level tests/ (TaskTestsDir), so a same-named file of the step
	// wins, as Harbor uploads them.
	TestsDir string `json:"tests_dir,omitempty"`
	// TestScript is the test.sh that runs: the step's own, else the
	// task-level tests/test.sh.
	TestScript string `json:"test_script,omitempty"`
	// SolutionDir and SolutionScript are steps/<name>/solution/ and its
	// solve.sh, what the oracle runs for this step.
	SolutionDir    string `json:"solution_dir,omitempty"`
	SolutionScript string `json:"solution_script,omitempty"`
	// WorkdirDir is steps/<name>/workdir/: its contents are uploaded to
	// the working directory before the step's agent runs; a setup.sh at
	// its top (SetupScript) is run there as the agent user and removed.
	WorkdirDir  string `json:"workdir_dir,omitempty"`
	SetupScript string `json:"setup_script,omitempty"`
	// AgentTimeoutSec and VerifierTimeoutSec are [steps.agent].timeout_sec
	// and [steps.verifier].timeout_sec in seconds, the task-level budgets
	// when unset.
	AgentTimeoutSec    float64 `json:"agent_timeout_sec"`
	VerifierTimeoutSec float64 `json:"verifier_timeout_sec"`
	// AgentUser and VerifierUser are the step's users, the task-level ones
	// when unset.
	AgentUser    string `json:"agent_user,omitempty"`
	VerifierUser string `json:"verifier_user,omitempty"`
	// VerifierEnv is the task-level [verifier.env] with the step's
	// [steps.verifier.env] over it (the step's value wins).
	VerifierEnv map[string]string `json:"verifier_env,omitempty"`
	// MinReward is the step's min_reward gate as reward key -> threshold
	// (a bare number is {"reward": x}); nil when the step has none. A step
	// whose reward misses it stops the trial: later steps are skipped.
	MinReward map[string]float64 `json:"min_reward,omitempty"`
	// Healthcheck runs before the step's agent; nil when none.
	Healthcheck *Healthcheck `json:"healthcheck,omitempty"`
	// Artifacts are the step's own artifacts, collected after its
	// verifier into steps/<name>/artifacts/ with the task-level ones.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Dependencies are the steps this one builds on (the published
	// multi-turn tasks' key); proctor runs the steps in declared order, so
	// each must be declared before it (Refusal otherwise).
	Dependencies []string `json:"dependencies,omitempty"`
	// InheritPriorSession asks that the agent of this step continue the
	// session of the step before (its conversation, not only its files):
	// arms that can resume a session do (docker-claude resumes the CLI's
	// session; agent:<dir> is told with PROCTOR_INHERIT_PRIOR_SESSION=1);
	// the others start a fresh one, as every step does without it.
	InheritPriorSession bool `json:"inherit_prior_session,omitempty"`
}

// Healthcheck is a readiness command with Docker HEALTHCHECK semantics, as
// Harbor's HealthcheckConfig defines it (durations in seconds): the
// command must exit 0 before the phase it guards; failures during
// StartPeriodSec (tried every StartIntervalSec) do not count; after it,
// Retries consecutive failures (tried every IntervalSec) fail the cell.
type Healthcheck struct {
	Command          string  `json:"command"`
	IntervalSec      float64 `json:"interval_sec"`
	TimeoutSec       float64 `json:"timeout_sec"`
	StartPeriodSec   float64 `json:"start_period_sec"`
	StartIntervalSec float64 `json:"start_interval_sec"`
	Retries          int     `json:"retries"`
}

// stepTable is one [[steps]] entry as read.
type stepTable struct {
	path               string // "steps[0]"
	name               string
	hasName            bool
	agentTimeoutSec    float64
	agentUser          string
	verifierTimeoutSec float64
	verifierUser       string
	verifierEnv        map[string]any
	minReward          map[string]float64
	healthcheck        *Healthcheck
	artifacts          []Artifact
	dependencies       []string
	inherit            bool
	refusals           []string // step content proctor cannot run
}

var stepFields = map[string]field[stepTable]{
	"name": func(r *configReader, s *stepTable, e entry) (err error) {
		s.hasName = true
		s.name, err = r.str(e.v, e.path)
		return err
	},
	"agent": func(r *configReader, s *stepTable, e entry) error {
		return readTable(r, s, e.path, e.v, stepAgentFields)
	},
	"verifier": func(r *configReader, s *stepTable, e entry) error {
		return readTable(r, s, e.path, e.v, stepVerifierFields)
	},
	"min_reward": func(r *configReader, s *stepTable, e entry) error {
		if e.v == nil {
			return nil
		}
		const want = "a finite number or a table of reward key = number"
		if m, ok := e.v.(map[string]any); ok {
			s.minReward = map[string]float64{}
			for _, k := range sortedKeys(m) {
				f, err := r.number(m[k], joinKey(e.path, k), "a finite number")
				if err != nil {
					return err
				}
				s.minReward[k] = f
			}
			return nil
		}
		f, err := r.number(e.v, e.path, want)
		if err != nil {
			return err
		}
		s.minReward = map[string]float64{"reward": f}
		return nil
	},
	"healthcheck": func(r *configReader, s *stepTable, e entry) (err error) {
		s.healthcheck, err = r.healthcheck(e)
		return err
	},
	"artifacts": func(r *configReader, s *stepTable, e entry) (err error) {
		s.artifacts, err = r.artifacts(e.v, e.path)
		return err
	},
	"dependencies": func(r *configReader, s *stepTable, e entry) (err error) {
		if e.v == nil {
			return nil
		}
		s.dependencies, err = r.strList(e.v, e.path)
		return err
	},
	"inherit_prior_session": func(r *configReader, s *stepTable, e entry) (err error) {
		if e.v == nil {
			return nil
		}
		s.inherit, err = r.boolean(e.v, e.path)
		return err
	},
}

// stepUnsupported is the reader of a step key Harbor defines that changes
// how the step runs and that proctor does not run per step (a step's own
// network policy, separate verifier or collect hooks): the task is
// refused naming the key, never run as if it were absent.
func stepUnsupported(what string) field[stepTable] {
	return func(r *configReader, s *stepTable, e entry) error {
		if e.v != nil {
			s.refusals = append(s.refusals, fmt.Sprintf("%s (%s of a single step) is not supported", e.path, what))
		}
		return nil
	}
}

// healthcheck reads the healthcheck table e (nil when null) with Harbor's
// HealthcheckConfig defaults; command is required.
func (r *configReader) healthcheck(e entry) (*Healthcheck, error) {
	if e.v == nil {
		return nil, nil
	}
	h := &Healthcheck{IntervalSec: 5, TimeoutSec: 30, StartIntervalSec: 5, Retries: 3}
	if err := readTable(r, h, e.path, e.v, healthcheckFields); err != nil {
		return nil, err
	}
	if strings.TrimSpace(h.Command) == "" {
		return nil, r.errf(joinKey(e.path, "command"), "is required and must not be empty")
	}
	return h, nil
}

var stepAgentFields = map[string]field[stepTable]{
	"timeout_sec": func(r *configReader, s *stepTable, e entry) (err error) {
		s.agentTimeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"user": func(r *configReader, s *stepTable, e entry) (err error) {
		s.agentUser, err = r.user(e.v, e.path)
		return err
	},
	"network_mode":  stepUnsupported("the network policy"),
	"allowed_hosts": stepUnsupported("the network policy"),
	"egress":        stepUnsupported("the network policy"),
}

var stepVerifierFields = map[string]field[stepTable]{
	"timeout_sec": func(r *configReader, s *stepTable, e entry) (err error) {
		s.verifierTimeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"user": func(r *configReader, s *stepTable, e entry) (err error) {
		s.verifierUser, err = r.user(e.v, e.path)
		return err
	},
	"env": func(r *configReader, s *stepTable, e entry) (err error) {
		s.verifierEnv, err = r.mapping(e.v, e.path)
		return err
	},
	"network_mode":     stepUnsupported("the verifier's network policy"),
	"allowed_hosts":    stepUnsupported("the verifier's network policy"),
	"egress":           stepUnsupported("the verifier's network policy"),
	"environment_mode": stepUnsupported("a separate verifier"),
	"environment":      stepUnsupported("a separate verifier"),
	"sandbox_mode":     stepUnsupported("a separate verifier"),
	"sandbox":          stepUnsupported("a separate verifier"),
	"collect":          stepUnsupported("collect hooks"),
}

// nonNegative reads a finite number >= 0.
func (r *configReader) nonNegative(v any, key string) (float64, error) {
	const want = "a finite number >= 0 (seconds)"
	f, err := r.number(v, key, want)
	if err == nil && f < 0 {
		err = r.errf(key, "must be %s, not %s", want, formatNumber(f))
	}
	return f, err
}

var healthcheckFields = map[string]field[Healthcheck]{
	"command": func(r *configReader, h *Healthcheck, e entry) (err error) {
		h.Command, err = r.str(e.v, e.path)
		return err
	},
	"interval_sec": func(r *configReader, h *Healthcheck, e entry) (err error) {
		h.IntervalSec, err = r.nonNegative(e.v, e.path)
		return err
	},
	"timeout_sec": func(r *configReader, h *Healthcheck, e entry) (err error) {
		h.TimeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"start_period_sec": func(r *configReader, h *Healthcheck, e entry) (err error) {
		h.StartPeriodSec, err = r.nonNegative(e.v, e.path)
		return err
	},
	"start_interval_sec": func(r *configReader, h *Healthcheck, e entry) (err error) {
		h.StartIntervalSec, err = r.nonNegative(e.v, e.path)
		return err
	},
	"retries": func(r *configReader, h *Healthcheck, e entry) error {
		n, err := r.integer(e.v, e.path, 1, 1000, "attempts")
		h.Retries = int(n)
		return err
	},
}

// readSteps reads the top-level steps list ([[steps]]): each entry a table
// with a unique name usable as a directory name.
func (r *configReader) readSteps(c *taskConfig, e entry) error {
	l, err := r.tableList(e.v, e.path)
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for i, m := range l {
		s := stepTable{path: fmt.Sprintf("%s[%d]", e.path, i)}
		if err := readTable(r, &s, s.path, m, stepFields); err != nil {
			return err
		}
		key := joinKey(s.path, "name")
		switch {
		case !s.hasName || s.name == "":
			return r.errf(key, "is required: it names the step's directory steps/<name>/")
		case s.name == "." || s.name == ".." || strings.ContainsAny(s.name, "/\\\x00"):
			return r.errf(key, "%q must be a plain directory name under steps/", s.name)
		}
		if prev, dup := seen[s.name]; dup {
			return r.errf(key, "%q is also the name of %s: step names must be unique", s.name, prev)
		}
		seen[s.name] = s.path
		c.steps = append(c.steps, s)
	}
	return nil
}

// fillSteps makes the Steps of t from the steps read (files are located
// later, by locateSteps): budgets, users and verifier env inherit the
// task-level tables.
func (r *configReader) fillSteps(t *Task, c *taskConfig) {
	if c.rewardStrategy != "" && len(c.steps) == 0 {
		r.warnings = append(r.warnings, "multi_step_reward_strategy is ignored: the task has no steps")
	}
	if len(c.steps) == 0 {
		return
	}
	t.MultiStepRewardStrategy = c.rewardStrategy
	if t.MultiStepRewardStrategy == "" {
		t.MultiStepRewardStrategy = StepRewardMean
	}
	for _, s := range c.steps {
		st := Step{
			Name:                s.name,
			AgentTimeoutSec:     firstPositive(s.agentTimeoutSec, t.AgentTimeoutSec),
			VerifierTimeoutSec:  firstPositive(s.verifierTimeoutSec, t.VerifierTimeoutSec),
			AgentUser:           firstNonEmpty(s.agentUser, t.AgentUser),
			VerifierUser:        firstNonEmpty(s.verifierUser, t.VerifierUser),
			MinReward:           s.minReward,
			Healthcheck:         s.healthcheck,
			Artifacts:           s.artifacts,
			Dependencies:        s.dependencies,
			InheritPriorSession: s.inherit,
		}
		env := maps.Clone(t.VerifierEnv)
		if s.verifierEnv != nil {
			se := resolveEnv(s.verifierEnv, joinKey(s.path, "verifier.env"), r.lookup)
			if env == nil {
				env = map[string]string{}
			}
			maps.Copy(env, se.values)
			t.UnresolvedEnv = mergeUnresolved(t.UnresolvedEnv, se.unresolved)
			t.UnresolvedVerifierEnv = mergeUnresolved(t.UnresolvedVerifierEnv, se.unresolved)
			r.warnings = append(r.warnings, se.warnings...)
		}
		st.VerifierEnv = env
		t.Steps = append(t.Steps, st)
	}
}

// stepRefusals are the reasons a multi-step task cannot run as written:
// step content proctor does not run per step (stepUnsupported), and a
// dependency on a step not declared before the one that names it (proctor
// runs the steps in declared order, which must then be an order the
// dependencies allow).
func stepRefusals(c *taskConfig) []string {
	var out []string
	before := map[string]bool{}
	for _, s := range c.steps {
		out = append(out, s.refusals...)
		for _, d := range s.dependencies {
			if !before[d] {
				out = append(out, fmt.Sprintf("%s.dependencies names %q, which is not a step declared before %s: the steps run in declared order", s.path, d, s.name))
			}
		}
		before[s.name] = true
	}
	return out
}

func firstPositive(a, b float64) float64 {
	if a > 0 {
		return a
	}
	return b
}

// locateSteps finds each step's files under steps/<name>/ and records
// what a step lacks in Missing: its instruction, and a test.sh when
// neither the step nor the task-level tests/ has one.
func locateSteps(t *Task, tree *taskTree) {
	for i := range t.Steps {
		s := &t.Steps[i]
		base := "steps/" + s.Name + "/"
		if p, ok := tree.file(base + InstructionFile); ok {
			s.InstructionFile = p
			s.Prompt = normalizeText(tree.contents[base+InstructionFile])
		} else {
			t.Missing = append(t.Missing, base+InstructionFile)
		}
		s.TestsDir, _ = tree.dir(base + "tests")
		if p, ok := tree.file(base + "tests/test.sh"); ok {
			s.TestScript = p
		} else if t.TestScript != "" {
			s.TestScript = t.TestScript
		} else {
			t.Missing = append(t.Missing, base+"tests/test.sh")
		}
		s.SolutionDir, _ = tree.dir(base + "solution")
		s.SolutionScript, _ = tree.file(base + "solution/solve.sh")
		if s.SolutionScript == "" {
			t.Missing = append(t.Missing, base+"solution/solve.sh")
		}
		s.WorkdirDir, _ = tree.dir(base + "workdir")
		s.SetupScript, _ = tree.file(base + "workdir/" + StepSetupScript)
	}
	sort.Strings(t.Missing)
}

// StepSetupScript is the reserved file of a step's workdir/: run as the
// agent user in the working directory before the step's agent, then
// removed (as Harbor does).
const StepSetupScript = "setup.sh"

// stepRefusal is Refusal's rule for a multi-step task: every step needs
// its instruction (a prompt-needing harness), a test script, and, for the
// oracle, its solve.sh.
func (t *Task) stepRefusal(n Needs) string {
	for _, s := range t.Steps {
		base := "steps/" + s.Name + "/"
		if n.SolutionScript && s.SolutionScript == "" {
			return fmt.Sprintf("no reference solution for step %s: %ssolution/solve.sh is missing", s.Name, base)
		}
		if n.TestScript && s.TestScript == "" {
			return fmt.Sprintf("no verifier for step %s: neither %stests/test.sh nor tests/test.sh exists", s.Name, base)
		}
		if n.Prompt && strings.TrimSpace(s.Prompt) == "" {
			return fmt.Sprintf("no prompt for step %s: %s%s is missing or empty", s.Name, base, InstructionFile)
		}
	}
	return ""
}

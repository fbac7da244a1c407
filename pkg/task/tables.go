package task

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// A definition is read table by table: each table of task.toml, or mapping
// of task.md frontmatter (both parsed into the same value shapes by
// toml.go and yaml.go), has its own typed value below and a map from each
// key proctor reads to the reader of that key. Keys without a reader are
// recorded as unchecked (keys.go decides which of them are unknown).

// taskConfig is a definition read into typed tables, before it fills a Task.
type taskConfig struct {
	schemaVersion string // schema_version
	version       string // Harbor's older version key
	name          string // task.md's top-level name (BenchFlow)
	task          taskTable
	metadata      map[string]any // free-form
	agent         agentTable
	verifier      verifierTable
	sandbox       sandboxTable // [environment] or BenchFlow's sandbox
	oracle        oracleTable  // [solution] or BenchFlow's oracle
	source        string
	artifacts     []Artifact
	steps         []stepTable // [[steps]], in order
	// refusals are the reasons the task cannot run as written (content
	// proctor cannot run rather than run without): the first becomes
	// Task.Unsupported.
	refusals       []string
	rewardStrategy string // multi_step_reward_strategy
	multiRole      bool   // task.md with agents, scenes or user
}

func newTaskConfig() *taskConfig {
	return &taskConfig{
		agent:    agentTable{timeoutSec: DefaultAgentTimeoutSec},
		verifier: verifierTable{timeoutSec: DefaultVerifierTimeoutSec},
		sandbox:  sandboxTable{name: "environment", buildTimeoutSec: DefaultBuildTimeoutSec},
		oracle:   oracleTable{name: "solution"},
	}
}

// taskTable is [task] (Harbor's PackageInfo).
type taskTable struct {
	name        string
	hasName     bool // name is present (it wins over task.md's top-level name)
	description string
	keywords    []string
	authors     []Author
}

// agentTable is [agent].
type agentTable struct {
	timeoutSec float64 // seconds
	declared   bool    // timeout_sec is present
	user       string
	net        netSpec
}

// verifierTable is [verifier].
type verifierTable struct {
	timeoutSec float64 // seconds
	user       string
	env        map[string]any // before resolution
	net        netSpec
	mode       string        // environment_mode as written ("" = not set)
	modeSet    bool          // environment_mode is present
	sandbox    *sandboxTable // [verifier.environment], nil when absent
	collect    []Collect     // [[verifier.collect]]
}

// sandboxTable is [environment] (Harbor) or sandbox (BenchFlow).
type sandboxTable struct {
	name            string  // the key it was read from
	buildTimeoutSec float64 // seconds
	dockerImage     string
	workdir         string // absolute and clean, or ""
	cpus            float64
	memoryMB        int64
	storageMB       int64
	gpus            int
	net             netSpec
	env             map[string]any // before resolution
	mcpServers      []map[string]any
	skillsDir       string
	healthcheck     *Healthcheck
	os              string   // Harbor's os: "linux", "windows" or ""
	refusals        []string // content proctor cannot run (setup_commands)
}

// oracleTable is [solution] (Harbor) or oracle (BenchFlow).
type oracleTable struct {
	name       string         // the key it was read from
	env        map[string]any // before resolution
	timeoutSec float64        // BenchFlow's [oracle].timeout_sec (0 = the agent's)
}

// entry is one key of a table being read.
type entry struct {
	key  string         // the key within its table ("timeout_sec")
	path string         // its dotted path ("verifier.timeout_sec")
	v    any            // the parsed value
	tbl  map[string]any // the table holding it
}

// field reads one key of a table into the table's typed value.
type field[T any] func(r *configReader, t *T, e entry) error

// readTable reads the mapping v, the table at path ("" for the top level),
// into t with the readers of fields, in key order so the first error is the
// same on every run. A null table reads as empty; any other non-mapping is
// an error naming path. A key without a reader is recorded as unchecked.
func readTable[T any](r *configReader, t *T, path string, v any, fields map[string]field[T]) error {
	tbl, err := r.mapping(v, path)
	if err != nil {
		return err
	}
	for _, k := range sortedKeys(tbl) {
		e := entry{key: k, path: joinKey(path, k), v: tbl[k], tbl: tbl}
		f, ok := fields[k]
		if !ok {
			r.skip(e.path)
			continue
		}
		if err := f(r, t, e); err != nil {
			return err
		}
	}
	return nil
}

// table is the field reading a sub-table with its own fields.
func table[T, S any](sub func(*T) *S, fields map[string]field[S]) field[T] {
	return func(r *configReader, t *T, e entry) error {
		return readTable(r, sub(t), e.path, e.v, fields)
	}
}

// netField is the field of a network key (network_mode, allowed_hosts,
// egress) of a table whose network keys are n.
func netField[T any](n func(*T) *netSpec) field[T] {
	return func(r *configReader, t *T, e entry) error { return r.readNet(n(t), e.key, e.v, e.path) }
}

// skipField records the key as unchecked (read past, as Harbor or
// BenchFlow define it) after any effect of the field.
func skipField[T any](f func(r *configReader, t *T, e entry)) field[T] {
	return func(r *configReader, t *T, e entry) error {
		if f != nil {
			f(r, t, e)
		}
		r.skip(e.path)
		return nil
	}
}

// topFields reads the top level of a definition.
var topFields = map[string]field[taskConfig]{
	"schema_version": func(r *configReader, c *taskConfig, e entry) (err error) {
		c.schemaVersion, err = r.scalarString(e.v, e.path)
		return err
	},
	"version": func(r *configReader, c *taskConfig, e entry) (err error) {
		c.version, err = r.scalarString(e.v, e.path)
		return err
	},
	"metadata": func(r *configReader, c *taskConfig, e entry) (err error) {
		c.metadata, err = r.mapping(e.v, e.path)
		return err
	},
	"task": table(func(c *taskConfig) *taskTable { return &c.task }, taskFields),
	"name": func(r *configReader, c *taskConfig, e entry) (err error) {
		if !r.markdown {
			r.skip(e.path) // task.toml names the task in [task]
			return nil
		}
		c.name, err = r.str(e.v, e.path)
		return err
	},
	"agent":    table(func(c *taskConfig) *agentTable { return &c.agent }, agentFields),
	"verifier": table(func(c *taskConfig) *verifierTable { return &c.verifier }, verifierFields),
	"environment": func(r *configReader, c *taskConfig, e entry) error {
		return c.sandbox.read(r, e)
	},
	"sandbox": func(r *configReader, c *taskConfig, e entry) error {
		return c.sandbox.read(r, e)
	},
	"solution": func(r *configReader, c *taskConfig, e entry) error {
		c.oracle.name = e.key
		return readTable(r, &c.oracle, e.path, e.v, oracleFields)
	},
	"oracle": func(r *configReader, c *taskConfig, e entry) error {
		c.oracle.name = e.key
		return readTable(r, &c.oracle, e.path, e.v, oracleFields)
	},
	"source": func(r *configReader, c *taskConfig, e entry) (err error) {
		c.source, err = r.str(e.v, e.path)
		return err
	},
	"artifacts": func(r *configReader, c *taskConfig, e entry) (err error) {
		c.artifacts, err = r.artifacts(e.v, e.path)
		return err
	},
	"steps": func(r *configReader, c *taskConfig, e entry) error {
		return r.readSteps(c, e)
	},
	"multi_step_reward_strategy": func(r *configReader, c *taskConfig, e entry) (err error) {
		if e.v == nil {
			return nil
		}
		c.rewardStrategy, err = r.str(e.v, e.path)
		if err == nil && c.rewardStrategy != StepRewardMean && c.rewardStrategy != StepRewardFinal {
			err = r.errf(e.path, "must be %q or %q, not %q", StepRewardMean, StepRewardFinal, c.rewardStrategy)
		}
		return err
	},
	"agents": skipField(markMultiRole),
	"scenes": skipField(markMultiRole),
	"user":   skipField(markMultiRole),
}

func markMultiRole(r *configReader, c *taskConfig, e entry) {
	if r.markdown && e.v != nil {
		c.multiRole = true
	}
}

var taskFields = map[string]field[taskTable]{
	"name": func(r *configReader, t *taskTable, e entry) (err error) {
		t.hasName = true
		t.name, err = r.str(e.v, e.path)
		return err
	},
	"description": func(r *configReader, t *taskTable, e entry) (err error) {
		t.description, err = r.str(e.v, e.path)
		return err
	},
	"keywords": func(r *configReader, t *taskTable, e entry) (err error) {
		t.keywords, err = r.strList(e.v, e.path)
		return err
	},
	"authors": func(r *configReader, t *taskTable, e entry) (err error) {
		t.authors, err = r.authors(e.v, e.path)
		return err
	},
}

var agentFields = map[string]field[agentTable]{
	"timeout_sec": func(r *configReader, a *agentTable, e entry) (err error) {
		a.declared = e.v != nil
		a.timeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"user": func(r *configReader, a *agentTable, e entry) (err error) {
		a.user, err = r.user(e.v, e.path)
		return err
	},
	"network_mode":  netField(func(a *agentTable) *netSpec { return &a.net }),
	"allowed_hosts": netField(func(a *agentTable) *netSpec { return &a.net }),
	"egress":        netField(func(a *agentTable) *netSpec { return &a.net }),
}

var verifierFields = map[string]field[verifierTable]{
	"timeout_sec": func(r *configReader, v *verifierTable, e entry) (err error) {
		v.timeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"env": func(r *configReader, v *verifierTable, e entry) (err error) {
		v.env, err = r.mapping(e.v, e.path)
		return err
	},
	"user": func(r *configReader, v *verifierTable, e entry) (err error) {
		v.user, err = r.user(e.v, e.path)
		return err
	},
	"network_mode":  netField(func(v *verifierTable) *netSpec { return &v.net }),
	"allowed_hosts": netField(func(v *verifierTable) *netSpec { return &v.net }),
	"egress":        netField(func(v *verifierTable) *netSpec { return &v.net }),
	"environment_mode": func(r *configReader, v *verifierTable, e entry) (err error) {
		v.modeSet = true
		if e.v == nil {
			v.modeSet = false
			return nil
		}
		v.mode, err = r.str(e.v, e.path)
		if err == nil && v.mode != VerifierShared && v.mode != VerifierSeparate {
			err = r.errf(e.path, "must be %q or %q, not %q", VerifierShared, VerifierSeparate, v.mode)
		}
		return err
	},
	"environment": func(r *configReader, v *verifierTable, e entry) error {
		if e.v == nil {
			return nil
		}
		v.sandbox = &sandboxTable{name: e.path, buildTimeoutSec: DefaultBuildTimeoutSec}
		v.sandbox.net.table = e.path
		return readTable(r, v.sandbox, e.path, e.v, verifierSandboxFields)
	},
	"collect": func(r *configReader, v *verifierTable, e entry) (err error) {
		v.collect, err = r.collectHooks(e)
		return err
	},
}

func init() {
	// BenchFlow's native names for the separate verifier (task.md:
	// verifier.sandbox, verifier.sandbox_mode) read as Harbor's; both
	// spellings at once is an error naming the key.
	for alias, key := range map[string]string{"sandbox": "environment", "sandbox_mode": "environment_mode"} {
		read := verifierFields[key]
		verifierFields[alias] = func(r *configReader, v *verifierTable, e entry) error {
			if _, both := e.tbl[key]; both {
				return r.errf(e.path, "both %s and %s are declared; keep one", alias, key)
			}
			return read(r, v, e)
		}
	}
}

// verifierSandboxFields read [verifier.environment], the separate
// verifier's own environment (Harbor's EnvironmentConfig): the keys proctor
// applies to the verifier's container; the others are read past
// (unchecked).
var verifierSandboxFields = func() map[string]field[sandboxTable] {
	m := map[string]field[sandboxTable]{}
	for _, k := range []string{"build_timeout_sec", "docker_image", "cpus", "memory_mb", "memory", "allow_internet", "network_mode", "allowed_hosts", "egress"} {
		m[k] = sandboxFields[k]
	}
	return m
}()

var oracleFields = map[string]field[oracleTable]{
	"env": func(r *configReader, o *oracleTable, e entry) (err error) {
		o.env, err = r.mapping(e.v, e.path)
		return err
	},
	// BenchFlow's oracle budget (SolutionConfig.timeout_sec).
	"timeout_sec": func(r *configReader, o *oracleTable, e entry) (err error) {
		if e.v == nil {
			return nil
		}
		o.timeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
}

// read reads the sandbox table e (environment or sandbox).
func (s *sandboxTable) read(r *configReader, e entry) error {
	s.name = e.key
	s.net.table = e.key
	return readTable(r, s, e.path, e.v, sandboxFields)
}

var sandboxFields = map[string]field[sandboxTable]{
	"build_timeout_sec": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.buildTimeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"docker_image": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.dockerImage, err = r.str(e.v, e.path)
		return err
	},
	// BenchFlow's alias of docker_image (SandboxConfig: docker_image or
	// image); both at once is an error naming the key.
	"image": func(r *configReader, s *sandboxTable, e entry) (err error) {
		if _, both := e.tbl["docker_image"]; both {
			return r.errf(e.path, "both image and docker_image are declared; keep docker_image")
		}
		s.dockerImage, err = r.str(e.v, e.path)
		return err
	},
	// BenchFlow's setup commands run after the sandbox starts and before
	// the agent: proctor does not run them, so the task is refused rather
	// than run unseeded.
	"setup_commands": func(r *configReader, s *sandboxTable, e entry) error {
		if l, ok := e.v.([]any); ok && len(l) > 0 {
			s.refusals = append(s.refusals, e.path+" (commands run after the sandbox starts and before the agent) is not supported")
		}
		r.skip(e.path)
		return nil
	},
	"workdir": func(r *configReader, s *sandboxTable, e entry) error {
		wd, err := r.str(e.v, e.path)
		if err != nil || wd == "" {
			s.workdir = wd
			return err
		}
		if !strings.HasPrefix(wd, "/") {
			return r.errf(e.path, "workdir %q must be an absolute path", wd)
		}
		s.workdir = path.Clean(wd)
		return nil
	},
	"cpus": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.cpus, err = r.positive(e.v, e.path, "a finite number > 0 (CPUs)")
		return err
	},
	"memory_mb": func(r *configReader, s *sandboxTable, e entry) (err error) {
		if _, dep := e.tbl["memory"]; dep {
			return nil // the deprecated memory string wins, as in Harbor
		}
		s.memoryMB, err = r.integer(e.v, e.path, 1, MaxSizeMB, "megabytes")
		return err
	},
	"storage_mb": func(r *configReader, s *sandboxTable, e entry) (err error) {
		if _, dep := e.tbl["storage"]; dep {
			return nil
		}
		s.storageMB, err = r.integer(e.v, e.path, 1, MaxSizeMB, "megabytes")
		return err
	},
	"memory": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.memoryMB, err = r.deprecatedSize(e)
		return err
	},
	"storage": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.storageMB, err = r.deprecatedSize(e)
		return err
	},
	"gpus": func(r *configReader, s *sandboxTable, e entry) error {
		n, err := r.integer(e.v, e.path, 0, MaxGPUs, "GPUs")
		s.gpus = int(n)
		return err
	},
	"allow_internet": func(r *configReader, s *sandboxTable, e entry) error {
		b, err := r.boolean(e.v, e.path)
		s.net.allowInternetSet = true
		s.net.allowInternet = b
		if s.net.key == "" {
			s.net.key = e.path
		}
		return err
	},
	"network_mode":  netField(func(s *sandboxTable) *netSpec { return &s.net }),
	"allowed_hosts": netField(func(s *sandboxTable) *netSpec { return &s.net }),
	"egress":        netField(func(s *sandboxTable) *netSpec { return &s.net }),
	"env": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.env, err = r.mapping(e.v, e.path)
		return err
	},
	"mcp_servers": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.mcpServers, err = r.tableList(e.v, e.path)
		return err
	},
	"skills_dir": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.skillsDir, err = r.str(e.v, e.path)
		return err
	},
	"healthcheck": func(r *configReader, s *sandboxTable, e entry) (err error) {
		s.healthcheck, err = r.healthcheck(e)
		return err
	},
	// Harbor's os: read for the Harbor arms' rule on the verifier script
	// (tests/test.bat for windows), otherwise not interpreted (unchecked).
	"os": skipField(func(r *configReader, s *sandboxTable, e entry) {
		switch o, _ := e.v.(string); o {
		case "linux", "windows":
			s.os = o
		default:
			if e.v != nil {
				r.warnings = append(r.warnings, fmt.Sprintf("%s is %v, neither \"linux\" nor \"windows\" (as Harbor defines it); taken as linux", e.path, e.v))
			}
		}
	}),
}

// deprecatedSize reads the deprecated memory or storage size string e into
// megabytes, warning when the matching *_mb key disagrees (the string
// wins, as in Harbor).
func (r *configReader) deprecatedSize(e entry) (int64, error) {
	mb, err := r.size(e.v, e.path)
	if err != nil {
		return 0, err
	}
	if other, ok := e.tbl[e.key+"_mb"]; ok {
		if n, err := r.integer(other, e.path+"_mb", 1, MaxSizeMB, "megabytes"); err != nil || n != mb {
			r.warnings = append(r.warnings, fmt.Sprintf("%s (%d MB) and %s_mb disagree; %s wins, as in Harbor", e.path, mb, e.path, e.key))
		}
	}
	return mb, nil
}

// fill copies the typed tables c into t and applies the rules that cross
// tables: the agent's and verifier's network policies inherit the
// sandbox's, as Harbor resolves them; the env tables resolve their
// ${VAR} references (env.go).
func (r *configReader) fill(t *Task, c *taskConfig) error {
	t.SchemaVersion = c.schemaVersion
	if t.SchemaVersion == "" {
		t.SchemaVersion = c.version
	}
	t.TaskName = c.name
	if c.task.hasName {
		t.TaskName = c.task.name
	}
	t.Description, t.Keywords, t.Authors = c.task.description, c.task.keywords, c.task.authors
	t.Metadata = c.metadata
	t.AgentTimeoutSec, t.AgentUser = c.agent.timeoutSec, c.agent.user
	t.AgentTimeoutDeclared = c.agent.declared
	t.VerifierTimeoutSec, t.VerifierUser = c.verifier.timeoutSec, c.verifier.user
	s := c.sandbox
	t.BuildTimeoutSec, t.DockerImage, t.Workdir = s.buildTimeoutSec, s.dockerImage, s.workdir
	t.CPUs, t.MemoryMB, t.StorageMB, t.GPUs = s.cpus, s.memoryMB, s.storageMB, s.gpus
	t.MCPServers, t.SkillsDir, t.Healthcheck, t.OS = s.mcpServers, s.skillsDir, s.healthcheck, s.os
	t.Source, t.Artifacts = c.source, c.artifacts
	t.OracleTimeoutSec = c.oracle.timeoutSec
	t.MultiRole = c.multiRole

	var err error
	if t.Network, err = s.net.resolve(NetworkPolicy{Mode: NetworkPublic}); err != nil {
		return r.errf(s.net.key, "%v", err)
	}
	if t.AgentNetwork, err = c.agent.net.resolve(t.Network); err != nil {
		return r.errf(c.agent.net.key, "%v", err)
	}
	if err := r.fillVerifierMode(t, c); err != nil {
		return err
	}
	verifierBase := t.Network
	if vs := c.verifier.sandbox; vs != nil {
		// The separate verifier's own environment has its own baseline
		// policy (public when it declares none, as Harbor's
		// EnvironmentConfig); [verifier].network_mode overrides it.
		if verifierBase, err = vs.net.resolve(NetworkPolicy{Mode: NetworkPublic}); err != nil {
			return r.errf(vs.net.key, "%v", err)
		}
	}
	if t.VerifierNetwork, err = c.verifier.net.resolve(verifierBase); err != nil {
		return r.errf(c.verifier.net.key, "%v", err)
	}
	if s.net.allowInternetSet && s.net.mode != "" {
		r.warnings = append(r.warnings, fmt.Sprintf("%s.network_mode %q overrides the deprecated allow_internet", s.net.table, s.net.mode))
	}

	for _, n := range []netSpec{s.net, c.agent.net, c.verifier.net} {
		t.EgressInvalid = append(t.EgressInvalid, n.invalid...)
	}
	if vs := c.verifier.sandbox; vs != nil {
		t.EgressInvalid = append(t.EgressInvalid, vs.net.invalid...)
	}
	sort.Strings(t.EgressInvalid)

	ve := resolveEnv(c.verifier.env, "verifier.env", r.lookup)
	oe := resolveEnv(c.oracle.env, c.oracle.name+".env", r.lookup)
	se := resolveEnv(s.env, s.name+".env", r.lookup)
	t.VerifierEnv, t.OracleEnv, t.SandboxEnv = ve.values, oe.values, se.values
	t.UnresolvedVerifierEnv = mergeUnresolved(ve.unresolved)
	t.UnresolvedOracleEnv = mergeUnresolved(oe.unresolved)
	t.UnresolvedSandboxEnv = mergeUnresolved(se.unresolved)
	t.UnresolvedEnv = mergeUnresolved(ve.unresolved, oe.unresolved, se.unresolved)
	r.warnings = append(r.warnings, ve.warnings...)
	r.warnings = append(r.warnings, oe.warnings...)
	r.warnings = append(r.warnings, se.warnings...)
	r.fillSteps(t, c)
	if refusals := append(append(c.refusals, s.refusals...), stepRefusals(c)...); len(refusals) > 0 && t.Unsupported == "" {
		t.Unsupported = refusals[0]
	}
	return nil
}

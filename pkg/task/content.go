package task

import (
	"fmt"
	"path"
	"strings"
)

// Task content that changes how a cell runs, read as Harbor's TaskConfig
// defines it: the schema version, the environment's healthcheck, the
// verifier's environment mode and its collect hooks. What proctor cannot
// run as the task means it is refused per task (Task.Unsupported) with the
// reason, never run as if the key were absent.

// SupportedSchemaVersions are the task.toml / task.md schema versions
// proctor reads (Harbor 1.0 to 1.4, BenchFlow's "1"). Any other version
// may define content proctor would run as if it were absent: such a task
// is refused with the version named.
var SupportedSchemaVersions = []string{"1", "1.0", "1.1", "1.2", "1.3", "1.4"}

// Verifier environment modes, as Harbor's VerifierEnvironmentMode.
const (
	// VerifierShared runs the tests in the agent's own sandbox.
	VerifierShared = "shared"
	// VerifierSeparate runs the tests in a fresh container of the
	// verifier's own image, with only the work tree and /logs carried
	// over from the agent's sandbox.
	VerifierSeparate = "separate"
)

// VerifierDockerfile is the separate verifier's image definition, in the
// tests directory, which is its build context (as Harbor builds it).
const VerifierDockerfile = "Dockerfile"

// VerifierEnvironment is the separate verifier's environment
// ([verifier.environment], or a copy of the task's when absent, as Harbor
// resolves it).
type VerifierEnvironment struct {
	// Dockerfile is <tests>/Dockerfile, built with the tests directory as
	// its context; "" when absent.
	Dockerfile string `json:"dockerfile,omitempty"`
	// DockerImage is [verifier.environment].docker_image, used when there
	// is no Dockerfile.
	DockerImage string `json:"docker_image,omitempty"`
	// BuildTimeoutSec bounds the image build (seconds).
	BuildTimeoutSec float64 `json:"build_timeout_sec"`
	// CPUs and MemoryMB are the verifier container's limits (0: the
	// defaults).
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
}

// Collect is one [[verifier.collect]] hook (Harbor's
// VerifierCollectConfig): a shell command run in a service of the
// environment after the agent phase ends and before the verifier, to
// snapshot runtime state into files the verifier reads.
type Collect struct {
	Command string `json:"command"`
	// Service is the compose service it runs in (MainService by default:
	// the task container).
	Service string `json:"service"`
	// TimeoutSec bounds the command (seconds; Harbor's default 60).
	TimeoutSec float64 `json:"timeout_sec"`
	// User runs the command ("" = the container's default user).
	User string `json:"user,omitempty"`
}

// DefaultCollectTimeoutSec is Harbor's default collect hook budget.
const DefaultCollectTimeoutSec = 60.0

var collectFields = map[string]field[Collect]{
	"command": func(r *configReader, c *Collect, e entry) (err error) {
		c.Command, err = r.str(e.v, e.path)
		return err
	},
	"service": func(r *configReader, c *Collect, e entry) (err error) {
		c.Service, err = r.str(e.v, e.path)
		c.Service = strings.TrimSpace(c.Service)
		if err == nil && c.Service == "" {
			err = r.errf(e.path, "must not be empty")
		}
		return err
	},
	"timeout_sec": func(r *configReader, c *Collect, e entry) (err error) {
		c.TimeoutSec, err = r.timeout(e.v, e.path)
		return err
	},
	"user": func(r *configReader, c *Collect, e entry) (err error) {
		c.User, err = r.user(e.v, e.path)
		return err
	},
}

// collectHooks reads the [[verifier.collect]] list e; command is required.
func (r *configReader) collectHooks(e entry) ([]Collect, error) {
	tables, err := r.tableList(e.v, e.path)
	if err != nil {
		return nil, err
	}
	var out []Collect
	for i, tbl := range tables {
		p := fmt.Sprintf("%s[%d]", e.path, i)
		c := Collect{Service: MainService, TimeoutSec: DefaultCollectTimeoutSec}
		if err := readTable(r, &c, p, tbl, collectFields); err != nil {
			return nil, err
		}
		if strings.TrimSpace(c.Command) == "" {
			return nil, r.errf(joinKey(p, "command"), "is required and must not be empty")
		}
		out = append(out, c)
	}
	return out, nil
}

// fillVerifierMode resolves the verifier's environment mode as Harbor
// does (an explicit environment_mode wins; else [verifier.environment]
// implies separate; else shared), refuses shared with an environment of its
// own (Harbor's validation error), fills t's mode, separate environment
// and collect hooks, and refuses an unsupported schema version.
func (r *configReader) fillVerifierMode(t *Task, c *taskConfig) error {
	if t.SchemaVersion != "" && !supportedSchema(t.SchemaVersion) {
		t.Unsupported = fmt.Sprintf("schema_version %q is not one this version of proctor reads (%s): its task content could run as if it were absent",
			t.SchemaVersion, strings.Join(SupportedSchemaVersions, ", "))
	}
	v := c.verifier
	t.VerifierCollect = v.collect
	mode := v.mode
	if !v.modeSet {
		mode = VerifierShared
		if v.sandbox != nil {
			mode = VerifierSeparate
		}
	}
	if mode == VerifierShared && v.sandbox != nil {
		return r.errf("verifier.environment_mode", "environment_mode %q cannot have a [verifier.environment] of its own; omit it or set environment_mode = %q", VerifierShared, VerifierSeparate)
	}
	if mode != VerifierSeparate {
		return nil
	}
	t.VerifierMode = mode
	// Without [verifier.environment], a copy of the task's own.
	src := c.sandbox
	if v.sandbox != nil {
		src = *v.sandbox
	}
	t.VerifierEnvironment = &VerifierEnvironment{BuildTimeoutSec: src.buildTimeoutSec, CPUs: src.cpus, MemoryMB: src.memoryMB}
	if v.sandbox != nil {
		t.VerifierEnvironment.DockerImage = v.sandbox.dockerImage
	}
	return nil
}

func supportedSchema(v string) bool {
	for _, s := range SupportedSchemaVersions {
		if v == s {
			return true
		}
	}
	return false
}

// locateVerifierEnv finds the separate verifier's Dockerfile in the tests
// directory and refuses what proctor cannot run of the verifier's content:
// a separate verifier with no image (neither tests/Dockerfile nor
// docker_image), of a multi-step or compose task, and collect hooks of a
// multi-step task, in a service the task does not have or in a compose
// sidecar.
func locateVerifierEnv(t *Task, tree *taskTree) {
	refuse := func(format string, a ...any) {
		if t.Unsupported == "" {
			t.Unsupported = fmt.Sprintf(format, a...)
		}
	}
	if len(t.VerifierCollect) > 0 && len(t.Steps) > 0 {
		refuse("verifier.collect in a multi-step task is not supported")
	}
	for i, c := range t.VerifierCollect {
		if c.Service == MainService {
			continue
		}
		if !t.Compose.hasService(c.Service) {
			refuse("verifier.collect[%d]: service %q is not a service of the task's environment", i, c.Service)
		} else {
			refuse("verifier.collect[%d]: service %q: collect hooks in a compose sidecar are not supported (only %q)", i, c.Service, MainService)
		}
	}
	ve := t.VerifierEnvironment
	if t.VerifierMode != VerifierSeparate || ve == nil {
		return
	}
	testDir := "tests"
	if t.TestsDir != "" {
		testDir = path.Base(t.TestsDir)
		if p, ok := tree.file(testDir + "/" + VerifierDockerfile); ok {
			ve.Dockerfile = p
		}
	}
	switch {
	case len(t.Steps) > 0:
		refuse("verifier environment_mode %q: a separate verifier for a multi-step task is not supported", VerifierSeparate)
	case t.Compose != nil:
		refuse("verifier environment_mode %q: a separate verifier for a compose environment is not supported", VerifierSeparate)
	case ve.Dockerfile == "" && ve.DockerImage == "":
		refuse("verifier environment_mode %q: the verifier has no image: %s/%s is missing and verifier.environment.docker_image is not set", VerifierSeparate, testDir, VerifierDockerfile)
	}
}

// hasService reports whether the compose environment c (nil: none) has a
// sidecar service named name.
func (c *Compose) hasService(name string) bool {
	if c == nil {
		return false
	}
	for _, s := range c.Services {
		if s.Name == name {
			return true
		}
	}
	return false
}

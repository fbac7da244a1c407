package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
)

// hostProbeWalk bounds docker-probe-host's file system walk: a host's
// file system is far larger than a task image's, and a walk cut short
// leaves task_files and treatment untested (the probe fails), never
// closed.
const hostProbeWalk = 200_000

// onHost reports whether the probe runs in the host arms' sandbox
// (docker-probe-host).
func (a probeArm) onHost() bool { return a.ref.Kind == DockerProbeHost }

// hostStatuses adds to statuses (the probe program's, folded) the
// classes a host launch cannot seal that the probe program does not test
// itself (HostOpen beyond isoprobe.Classes: work_tree, host_filesystem),
// each open unless the task expects it (metadata.probe_expect), and
// reports whether none of them fails the probe. The classes the program
// tests (env, network, operator_config) keep what it found on this host.
func hostStatuses(statuses, expect map[string]string) bool {
	passed := true
	for c := range HostOpen {
		if slices.Contains(isoprobe.Classes, c) {
			continue
		}
		if _, ok := expect[c]; ok {
			statuses[c] = isoprobe.Expected
			continue
		}
		statuses[c] = isoprobe.Open
		passed = false
	}
	return passed
}

// hostProbeReason is docker-probe-host's reason: the failing classes,
// the host's own (hostStatuses) after the probe program's, else
// probeReason's.
func hostProbeReason(statuses, expect map[string]string) string {
	open := isoprobe.OpenClasses(statuses)
	for _, c := range slices.Sorted(maps.Keys(HostOpen)) {
		if !slices.Contains(isoprobe.Classes, c) && statuses[c] == isoprobe.Open {
			open = append(open, c+"="+isoprobe.Open)
		}
	}
	if len(open) > 0 {
		return "leaks on the host: " + strings.Join(open, ", ")
	}
	return probeReason(statuses, expect)
}

// runHost probes once on the host through RunUntrustedHost, as the host
// arms' agent: the same scratch tree, user, cgroup, environment and
// route to the model, the probe program (a copy of the static proctor
// binary in the tree) walking the host's file system from "/" with the
// workspace as its working directory. It returns the program's report
// and the isolation RunUntrustedHost vouches for.
func (pr probeRun) runHost(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (isoprobe.Report, sandbox.ExecResult, map[string]any, error) {
	s := &probeHostSolve{pr: pr, env: env, p: p}
	defer s.close()
	r, err := RunUntrustedHost(ctx, env, p, h, s)
	return probeReport(r, err, s.stdout.Bytes(), s.errLog, " on the host")
}

// probeHostSolve is the probe's part of RunUntrustedHost.
type probeHostSolve struct {
	pr     probeRun
	env    Env
	p      Placement
	dir    string // <root>/probe: the binary and probe.json
	agent  map[string]string
	stdout bytes.Buffer
	errLog *cellfs.Capture
	closed bool
}

// Stage copies the probe binary into <root>/probe (the agent's user can
// run it whatever the mode of its home on the host) and writes the
// probe's configuration there: the task's files, the skills to protect,
// the variables the agent is given (its environment is the probe's env
// allowlist) and the host values it must not see.
func (s *probeHostSolve) Stage(_ context.Context, u *HostRun) error {
	s.dir = filepath.Join(u.Root, "probe")
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		return err
	}
	if err := copyFileMode(s.pr.bin, filepath.Join(s.dir, "proctor"), os.O_EXCL, 0o755); err != nil {
		return events.Classed(events.ClassInfra, fmt.Errorf("copy the probe onto the host tree: %w", err))
	}
	t := s.env.Task()
	cfg := isoprobe.Config{
		Root: "/", Workdir: u.Workspace, Home: u.Home, Targets: s.pr.targets, Forbid: s.pr.forbid,
		Skip: []string{s.dir}, TimeoutSec: 3, MaxEntries: hostProbeWalk,
	}
	if s.p.Spec.Egress != nil {
		cfg.Allowlist = s.p.Spec.Egress.Allow
	}
	var err error
	if cfg.TaskFiles, err = taskFileSigs(t); err != nil {
		return events.Classed(events.ClassInfra, err)
	}
	cfg.Protect = protectedSkills(t, s.env.Spec().Harnesses, s.env.Spec().BaseDir)
	// What the agent's process gets: the process driver's allowlist of
	// the host's variables, the arm's, the scratch tree's and the proxy's.
	s.agent = withEnv(withEnv(claudeCLIEnv(s.env), map[string]string{
		"HOME": u.Home, "CLAUDE_CONFIG_DIR": u.ConfigDir, "TMPDIR": filepath.Join(u.Root, "tmp"),
	}), sandbox.ProxyEnv(u.Handle))
	given := maps.Clone(s.agent)
	for _, k := range process.EnvAllowlist {
		if v, ok := os.LookupEnv(k); ok {
			given[k] = v
		}
	}
	cfg.EnvAllowed = slices.Sorted(maps.Keys(given))
	cfg.EnvKey, cfg.EnvValues, cfg.EnvDropped = isoprobe.SealEnv(environList(s.env.Getenv, credentialEnv()...), given, credentialEnv())
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "probe.json"), b, 0o444)
}

// Command runs `proctor probe-inside` from the tree.
func (s *probeHostSolve) Command(_ context.Context, u *HostRun) (sandbox.ExecSpec, error) {
	dir := s.env.Dir()
	var err error
	if s.errLog, err = dir.OpenCapture("probe.stderr.log"); err != nil {
		return sandbox.ExecSpec{}, events.Classed(events.ClassInfra, err)
	}
	argv := []string{filepath.Join(s.dir, "proctor"), "probe-inside", "--config", filepath.Join(s.dir, "probe.json")}
	dir.Logf("probe: %s on the host as %q in %s (targets %s)", strings.Join(argv, " "), u.User, u.Workspace, s.pr.targets)
	return sandbox.ExecSpec{
		Cmd: argv, Env: s.agent, Timeout: probeTimeout,
		Stdout: &capWriter{w: &s.stdout, n: maxProbeReport}, Stderr: s.errLog,
	}, nil
}

func (s *probeHostSolve) Ended(sandbox.ExecResult) { s.close() }

func (s *probeHostSolve) close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.errLog != nil {
		_ = s.errLog.Close(s.env.Dir(), "")
	}
}

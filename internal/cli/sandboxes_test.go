package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// fakeSandbox is a registry row serving d.
func fakeSandbox(name string, d *sandboxfake.Driver) sandboxDriver {
	return sandboxDriver{name: name, about: "the scripted fake",
		open:  func(sandboxConfig) (sandbox.Driver, error) { return d, nil },
		ready: func(context.Context, sandbox.Driver) error { return nil }}
}

// TestRunOnTheSelectedSandbox: `tasks run --sandbox NAME` runs the cells
// on the driver the registry gives for NAME (a fake with every ability:
// the oracle passes without a container engine), and a driver that lacks
// an ability a harness needs refuses the run before anything starts,
// naming the ability and the harness: no sandbox started, no image
// built, no run recorded.
func TestRunOnTheSelectedSandbox(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := writeRoot(t, harborTask("fix-it", "version = \"1.0\"\n", nil))
	full := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "test.sh", Files: map[string]sandbox.FileResult{
		"/logs/verifier/reward.txt": sandboxfake.Regular("1\n")}}}}
	lacking := &sandboxfake.Driver{Off: []sandbox.Ability{sandbox.AbilityProcessKiller}}
	var stdout, stderr testutil.SyncBuffer
	g := testGlobals(t, &stdout, &stderr)
	g.sandboxes = append([]sandboxDriver{fakeSandbox("fake", full), fakeSandbox("lacking", lacking)}, sandboxDrivers...)
	flags := func(sandboxName string, harnesses ...string) *runFlags {
		f := &runFlags{tasksRoot: root, tasks: []string{"fix-it"}, models: []string{"default"}, repeats: 1,
			outputDir: t.TempDir(), agentGrace: 10, concurrency: 1, sandbox: sandboxName,
			limits: limitFlags{memoryMB: sandbox.DefaultMemoryMB, pids: sandbox.DefaultPidsLimit}}
		f.harnesses.vals = harnesses
		return f
	}

	if err := g.tasksRun(context.Background(), flags("fake", "oracle")); err != nil {
		t.Fatalf("a run on the fake: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "1 passed") || len(full.Started()) == 0 {
		t.Fatalf("the oracle on the fake: %q, %d sandboxes started", stdout.String(), len(full.Started()))
	}

	agentDir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agentDir, "agent.toml"), []byte("run = \"true\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr2 testutil.SyncBuffer
	g.stderr = &stderr2
	err := g.tasksRun(context.Background(), flags("lacking", "oracle", "agent:"+agentDir, "command:true"))
	var ue usageError
	if err == nil || !errors.As(err, &ue) {
		t.Fatalf("a run on a driver without ProcessKiller: %v, want a usage error", err)
	}
	for _, want := range []string{`"lacking"`, "ProcessKiller", "agent:" + agentDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "oracle") || strings.Contains(err.Error(), "command:") {
		t.Errorf("%v names a harness that needs no ProcessKiller", err)
	}
	if calls := lacking.Calls(); len(calls) != 0 {
		t.Errorf("the refused run used the driver: %v", calls)
	}
	if strings.Contains(stderr2.String(), "run ") {
		t.Errorf("the refused run was started: %s", stderr2.String())
	}

	if err := g.tasksRun(context.Background(), flags("nope", "oracle")); !errors.As(err, &ue) || !strings.Contains(err.Error(), "docker") {
		t.Errorf("an unknown --sandbox: %v, want a usage error listing the drivers", err)
	}
}

// TestGCNeedsACollector: gc on a driver that cannot collect says so, and
// on one that can removes the run's sandboxes.
func TestGCNeedsACollector(t *testing.T) {
	d := &sandboxfake.Driver{}
	h, err := d.Start(context.Background(), sandbox.Spec{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr testutil.SyncBuffer
	g := testGlobals(t, &stdout, &stderr)
	g.sandboxes = []sandboxDriver{fakeSandbox("fake", d), fakeSandbox("plain", nil)}
	g.sandboxes[1].open = func(sandboxConfig) (sandbox.Driver, error) { return sandboxfake.Plain{D: d}, nil }
	cmd := newGC(g)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs([]string{"--sandbox", "plain", "--run", "r1"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "Collector") {
		t.Errorf("gc on a driver without Collector: %v", err)
	}
	cmd = newGC(g)
	cmd.SetArgs([]string{"--sandbox", "fake", "--run", "r1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !d.Sandbox(h).Destroyed() || !strings.Contains(stdout.String(), "removed 1 container ") {
		t.Errorf("gc --run r1: %q, destroyed %v", stdout.String(), d.Sandbox(h).Destroyed())
	}
}

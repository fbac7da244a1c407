package cli

import (
	"bytes"
	"context"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
)

func runMain(t *testing.T, args ...string) (*artifact.Artifact, string) {
	t.Helper()
	return runMainIn(t, t.TempDir(), args...)
}

// runMainIn is runMain with the output directory out.
func runMainIn(t *testing.T, out string, args ...string) (*artifact.Artifact, string) {
	t.Helper()
	js := filepath.Join(out, "a.json")
	var stdout, stderr bytes.Buffer
	args = append(args, "--output-dir", out, "--out-json", js)
	if code := mainT(t, args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	a, err := artifact.Read(js)
	if err != nil {
		t.Fatal(err)
	}
	return a, out
}

// runMainsAtOnce runs `proctor <runs[i]...>` as runMain does, all at
// once, each on a store of its own, and returns their artifacts and
// output directories in order; t fails when one of them does. Runs that
// share nothing but the engine (and the environment t set) take the time
// of the longest instead of the sum.
func runMainsAtOnce(t *testing.T, runs ...[]string) ([]*artifact.Artifact, []string) {
	t.Helper()
	arts, outs, _ := runMainsAtOnceHomes(t, runs...)
	return arts, outs
}

// runMainsAtOnceHomes is runMainsAtOnce that also returns each run's
// store (its PROCTOR_HOME), for a test that reads what was stored.
func runMainsAtOnceHomes(t *testing.T, runs ...[]string) ([]*artifact.Artifact, []string, []string) {
	t.Helper()
	arts, outs := make([]*artifact.Artifact, len(runs)), make([]string, len(runs))
	homes := make([]string, len(runs))
	for i := range runs {
		outs[i], homes[i] = t.TempDir(), t.TempDir()
	}
	t.Run("runs", func(t *testing.T) {
		for i, args := range runs {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				setenv(t, "PROCTOR_HOME", homes[i])
				arts[i], _ = runMainIn(t, outs[i], args...)
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	return arts, outs, homes
}

func byCell(a *artifact.Artifact) map[string]artifact.Result {
	m := map[string]artifact.Result{}
	for _, r := range a.Results {
		m[r.Task+" "+r.Harness] = r
	}
	return m
}

// TestAgentArms runs both example agents beside the oracle with the
// scripted agent as the baseline, and checks the agents' telemetry, the
// comparison, the /root task scored and the events by subject.
func TestAgentArms(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	testutil.RequireImage(t, cli, "python:3.11-slim")
	home := t.TempDir()
	setenv(t, "PROCTOR_HOME", home)
	scripted, metrics := "agent:"+abs(t, "../../examples/agents/scripted"), "agent:"+abs(t, "../../examples/agents/metrics")
	command := "command:bash commands/has-solution.sh {task_path} {output_dir}"
	a, _ := runMain(t, "tasks", "run", "--tasks-root", examplesRoot(t), "--tasks", "fix-sum,count-words,noisy-daemon,home-workdir",
		"--harnesses", "oracle,"+scripted+","+metrics, "--baseline-harness", scripted, "--command-template", "bash commands/has-solution.sh {task_path} {output_dir}")
	rows := byCell(a)
	s := rows["fix-sum "+scripted]
	if s.Outcome != "passed" || s.Metrics.PromptTokens == nil || *s.Metrics.PromptTokens == 0 || s.Metrics.CostUSD == nil ||
		s.Metrics.ToolCalls["bash"] != 1 || s.Metrics.OperationCount != 3 || s.Metrics.OperationsByType["plan"] != 1 || s.Metrics.OperationsByType["harness"] != 1 {
		t.Errorf("scripted agent row: %+v", s)
	}
	if s.Metrics.Isolation["network"] != "internal" {
		t.Errorf("agent phase network: %v", s.Metrics.Isolation)
	}
	m := rows["fix-sum "+metrics]
	if m.Outcome != "failed" || m.Metrics.PromptTokens == nil || *m.Metrics.PromptTokens != 812 || m.Metrics.NCalls == nil || *m.Metrics.NCalls != 2 ||
		m.Metrics.AgentReported["exitReason"] != "completed" {
		t.Errorf("metrics agent row (tokens from metrics.json): %+v", m)
	}
	if r := rows["noisy-daemon "+metrics]; r.Outcome != "passed" {
		t.Errorf("metrics agent on a marker task: %+v", r)
	}
	// WORKDIR /root: the agents run there as uid 10001 and are scored (the
	// scripted agent's marker rule covers /root, the metrics agent's only /app).
	for h, want := range map[string]string{scripted: "passed", metrics: "failed"} {
		r := rows["home-workdir "+h]
		if r.Outcome != want || r.Metrics.Isolation["workdir"] != "/root" {
			t.Errorf("home-workdir under %s: %s %q isolation %v, want %s", h, r.Outcome, r.Error, r.Metrics.Isolation, want)
		}
	}
	if r := rows["home-workdir oracle"]; r.Outcome != "passed" {
		t.Errorf("home-workdir under the oracle: %+v", r)
	}
	// Every cell records its harness invocation: an oracle row is not "0 operations".
	if r := rows["fix-sum oracle"]; r.Metrics.OperationCount != 1 || r.Metrics.OperationsByType["harness"] != 1 || a.Summary.PerHarness["oracle"].Operations != 4 {
		t.Errorf("oracle operations: %+v (harness total %d)", r.Metrics, a.Summary.PerHarness["oracle"].Operations)
	}
	c := rows["fix-sum "+command]
	if c.Outcome != "passed" || c.Metrics.OperationsByType["file_found"] != 2 || c.Metrics.OperationsByType["checked"] != 1 {
		t.Errorf("command harness (reward.txt, PROCTOR_OP lines, operations file): %+v", c)
	}
	cmp := a.Summary.Comparisons[metrics]
	if cmp == nil || cmp.McNemar.NLost != 3 || cmp.McNemar.NGained != 0 || cmp.McNemar.NExcluded != 0 {
		t.Fatalf("comparison vs the scripted baseline: %+v", cmp)
	}
	// The command harness is compared too; agreeing on every pair, its
	// exact p is 1 and it stays in Holm's family.
	if cc := a.Summary.Comparisons[command]; cc == nil || cc.McNemar.NBothPassed != 4 || cc.McNemar.PExact == nil || *cc.McNemar.PExact != 1 ||
		cc.McNemar.Significant == nil || *cc.McNemar.Significant || cc.McNemar.CorrectionFamilySize != 2 {
		t.Errorf("command harness comparison: %+v", cc)
	}
	if _, ok := a.Summary.Comparisons["oracle"]; ok {
		t.Error("the oracle entered the comparisons")
	}
	// The agents' events are on the log by subject.
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(home, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n := 0
	err = b.Read(context.Background(), []string{"proctor.run." + a.Run.ID + ".cell.*.Usage"}, func(ev events.Envelope) error {
		if ev.Type != events.Usage {
			t.Errorf("%s on the Usage subject", ev.Type)
		}
		n++
		return nil
	})
	if err != nil || n < 6 {
		t.Fatalf("read %d Usage events (%v)", n, err)
	}
}

// TestAgentFailureModes: a budget overrun is a miss that leaves no process
// behind; an agent that exits without a word, or whose install fails, made
// no attempt (solver_error); an install runs once per image.
func TestAgentFailureModes(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	ag := func(name string) string { return "agent:" + abs(t, "testdata/agents/"+name) }
	// A copy of the installer with a unique agent.toml, so its install is
	// not already cached in the engine by an earlier run; its image is
	// removed afterwards.
	installer := t.TempDir()
	toml, err := os.ReadFile("testdata/agents/installer/agent.toml")
	if err != nil {
		t.Fatal(err)
	}
	toml = append(toml, []byte("# "+t.Name()+" "+events.NewID()+"\n")...)
	if err := os.WriteFile(filepath.Join(installer, "agent.toml"), toml, 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := harness.LoadAgent(installer)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := runMain(t, "tasks", "run", "--tasks-root", abs(t, "testdata/agent-root"), "--all", "--repeats", "2", "--concurrency", "4", "--agent-grace", "2",
		"--harnesses", strings.Join([]string{ag("sleeper"), ag("silent"), ag("badinstall"), "agent:" + installer}, ","))
	t.Cleanup(func() {
		// proctor-agent:<task image id[:12]>-<agent hash[:12]>
		ctx := context.Background()
		imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", "proctor-agent:*-"+spec.Hash[:12]))})
		if err != nil || len(imgs) != 1 {
			t.Errorf("the install image: %d found (%v)", len(imgs), err)
		}
		for _, im := range imgs {
			if _, err := cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true}); err != nil {
				t.Errorf("remove the install image %v: %v", im.RepoTags, err)
			}
		}
	})
	installs := 0
	for _, r := range a.Results {
		switch {
		case strings.HasSuffix(r.Harness, "/sleeper"):
			if r.Outcome != "solver_timeout" || !r.Metrics.SolverTimeout || r.Passed || r.ReturnCode == nil || *r.ReturnCode != 124 {
				t.Errorf("sleeper: %+v", r)
			}
			if r.Reward == nil || *r.Reward != 1 {
				t.Errorf("sleeper: processes of the agent survived the timeout (reward %v, verifier says: %s)", r.Reward, r.Error)
			}
		case strings.HasSuffix(r.Harness, "/silent"), strings.HasSuffix(r.Harness, "/badinstall"):
			if r.Outcome != "errored" || r.ErrorClass != "solver_error" || !r.Metrics.SolverError || r.Metrics.Error {
				t.Errorf("%s: %+v", r.Harness, r)
			}
		case r.Harness == "agent:"+installer:
			if r.Outcome != "passed" || r.Metrics.PromptTokens == nil || *r.Metrics.PromptTokens != 5 {
				t.Errorf("installer: %+v", r)
			}
			if _, err := os.Stat(filepath.Join(r.OutputDir, "install.log")); err == nil {
				installs++
			}
		}
	}
	if installs != 1 {
		t.Errorf("the install step ran %d times for one image, want 1", installs)
	}
	if s := a.Summary.PerHarness[ag("silent")]; s.Errored != 2 || s.Scored != 0 || s.PassRate != nil {
		t.Errorf("silent summary %+v", s)
	}
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

package harness_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// The harness conformance suite: every arm against the scripted fake
// sandbox, no container engine.

func arm(t *testing.T, name string) harness.Arm {
	t.Helper()
	a, err := harness.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func classOf(t *testing.T, err error) events.ErrorClass {
	t.Helper()
	c, ok := events.ClassOf(err)
	if !ok {
		t.Fatalf("error %v carries no class", err)
	}
	return c
}

// TestArmsRefuseBeforeAnyBuild: every arm refuses a blocked/unsupported
// task and one with unresolved env, with the class; each refuses what its
// needs lack (the oracle a task without solve.sh, the agent one without a
// prompt) and accepts a complete task.
func TestArmsRefuseBeforeAnyBuild(t *testing.T) {
	agentDir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	good := harnesstest.Task(t, "good", nil)
	env := harnesstest.Task(t, "env", harnesstest.Files{"task.toml": "version = \"1.0\"\n\n[verifier.env]\nTOKEN = \"${TOKEN}\"\n"})
	noSol := harnesstest.Task(t, "nosol", harnesstest.Files{"solution/solve.sh": ""})
	noPrompt := harnesstest.Task(t, "noprompt", harnesstest.Files{"instruction.md": ""})
	for _, name := range []string{"oracle", "agent:" + agentDir, "command:true"} {
		a := arm(t, name)
		if c, why := a.Refusal(good); c != "" || why != "" {
			t.Errorf("%s refuses a complete task: %s %s", name, c, why)
		}
	}
	for _, name := range []string{"oracle", "agent:" + agentDir} {
		if c, why := arm(t, name).Refusal(env); c != events.ClassUnresolvedEnv || !strings.Contains(why, "TOKEN") {
			t.Errorf("%s on unresolved env: %q %q", name, c, why)
		}
	}
	if c, why := arm(t, "oracle").Refusal(noSol); c != events.ClassRefused || !strings.Contains(why, "solve.sh") {
		t.Errorf("oracle without solve.sh: %q %q", c, why)
	}
	if c, why := arm(t, "agent:"+agentDir).Refusal(noPrompt); c != events.ClassRefused || why == "" {
		t.Errorf("agent without a prompt: %q %q", c, why)
	}
	if c, _ := arm(t, "command:true").Refusal(noSol); c != "" {
		t.Errorf("a command needs no solution, refused as %q", c)
	}
}

// TestEnvScopes: an unresolved env key errors only the cells of arms that
// get its table: [verifier.env] the arms that run the verifier (oracle,
// agents), [solution.env] the oracle alone, the sandbox table's env the
// arms whose solve runs in the task's sandbox; the probe and a command get
// none of them and run. (Before, one unresolved oracle variable errored
// every arm, the probe and the command included.)
func TestEnvScopes(t *testing.T) {
	agentDir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	agent := "agent:" + agentDir
	tasks := map[string]string{
		"verifier": "[verifier.env]\nV_TOKEN = \"${V_TOKEN}\"\n",
		"oracle":   "[solution.env]\nO_TOKEN = \"${O_TOKEN}\"\n",
		"sandbox":  "[environment.env]\nS_TOKEN = \"${S_TOKEN}\"\n",
	}
	// errored[table] lists the arms whose cells are errored.
	errored := map[string][]string{
		"verifier": {"oracle", agent, "docker-claude"},
		"oracle":   {"oracle"},
		"sandbox":  {"oracle", agent, "docker-claude"},
	}
	key := map[string]string{"verifier": "V_TOKEN", "oracle": "O_TOKEN", "sandbox": "S_TOKEN"}
	for table, toml := range tasks {
		tk := harnesstest.Task(t, "env-"+table, harnesstest.Files{"task.toml": "version = \"1.0\"\n\n" + toml})
		for _, name := range []string{"oracle", agent, "docker-claude", "docker-probe", "command:true"} {
			ref, err := harness.Parse(name)
			if err != nil {
				t.Fatal(err)
			}
			c, why := ref.Refusal(tk)
			keys := ref.UnresolvedEnv(tk)
			if slices.Contains(errored[table], name) {
				if c != events.ClassUnresolvedEnv || !strings.Contains(why, key[table]) || !slices.Equal(keys, []string{key[table]}) {
					t.Errorf("[%s] unresolved: %s gives %q %q, keys %v; want unresolved_env naming %s", table, name, c, why, keys, key[table])
				}
			} else if c != "" || keys != nil {
				t.Errorf("[%s] unresolved: %s gives %q %q, keys %v; want it to run (it does not get that table)", table, name, c, why, keys)
			}
		}
	}
}

// TestSetupCheckIsTheArms: the oracle is a setup check (never compared);
// agent and command arms are compared; Ref.Comparable follows the arm.
func TestSetupCheckIsTheArms(t *testing.T) {
	for name, want := range map[string]bool{"oracle": true, "agent:x": false, "command:true": false} {
		a := arm(t, name)
		if a.SetupCheck() != want || a.Ref().Comparable() == want {
			t.Errorf("%s: SetupCheck %v Comparable %v, want setup check %v", name, a.SetupCheck(), a.Ref().Comparable(), want)
		}
	}
	if (harness.Ref{Kind: harness.Probe}).Comparable() {
		t.Error("probe rows must never be compared")
	}
}

// TestOracleSolve: image recorded, solution copied to the stage, solve.sh
// run with the task's budget, the task's network policy, Finished data.
func TestOracleSolve(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solve.sh", Exit: 0, Stdout: "solved\n"}}}
	tk := harnesstest.Task(t, "t", nil)
	env := harnesstest.NewEnv(t, tk, "oracle", d)
	p, out, err := harnesstest.Run(context.Background(), arm(t, "oracle"), env)
	if err != nil {
		t.Fatal(err)
	}
	if got := env.Types(); !slices.Equal(got, []events.Type{events.ImageBuilt, events.Started}) {
		t.Errorf("events %v", got)
	}
	if p.Networks.Start != sandbox.NetworkBridge || p.Networks.Verify != sandbox.NetworkBridge || p.Spec.Image != "fake/t:latest" {
		t.Errorf("placement %+v", p)
	}
	f := out.Finished
	if f.ExitCode != 0 || f.Reason != "exit 0" || f.TimedOut || f.Isolation["network"] != "public" || !strings.Contains(f.StdoutTail, "solved") || out.Verdict != nil {
		t.Errorf("finished %+v verdict %v", f, out.Verdict)
	}
	execs := d.Execs()
	if len(execs) != 1 || execs[0].Spec.Timeout.Seconds() != 30 || execs[0].Spec.User != "" {
		t.Errorf("execs %+v", execs)
	}
	if in := d.CopiedIn(); len(in) != 1 || in[0][0] != tk.SolutionDir {
		t.Errorf("copied in %v", in)
	}
}

// TestOracleTimeout: a solve.sh stopped at its budget is Finished
// "timeout", not an error.
func TestOracleTimeout(t *testing.T) {
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "solve.sh", TimedOut: true}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "oracle", d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "oracle"), env)
	if err != nil {
		t.Fatal(err)
	}
	if f := out.Finished; !f.TimedOut || f.Reason != "timeout" || f.ExitCode != sandbox.TimeoutExitCode {
		t.Errorf("finished %+v", f)
	}
}

// TestOracleNetworkPlan: the oracle gets the task's policy; a solve with
// no network but a public verifier starts on the internal network (a
// --network none container can never join the bridge later).
func TestOracleNetworkPlan(t *testing.T) {
	cases := []struct {
		toml                string
		start, solve, verif string
	}{
		{"[agent]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"no-network\"\n", "none", "no-network", "none"},
		{"[agent]\nnetwork_mode = \"no-network\"\n", "internal", "no-network", "bridge"},
	}
	for _, c := range cases {
		tk := harnesstest.Task(t, "t", harnesstest.Files{"task.toml": "version = \"1.0\"\n" + c.toml})
		n := arm(t, "oracle").Networks(tk)
		if n.Start != c.start || n.Solve != c.solve || n.Verify != c.verif {
			t.Errorf("%q: networks %+v", c.toml, n)
		}
	}
	tk := harnesstest.Task(t, "t", nil)
	if n := arm(t, "agent:x").Networks(tk); n.Start != sandbox.NetworkInternal || n.Verify != sandbox.NetworkBridge {
		t.Errorf("agent networks %+v: an agent never gets the open network", n)
	}
}

// TestBuildFailureIsClassBuild: a failed build is recorded in ImageBuilt
// and ends Prepare with class build; a driver that cannot build at all is
// class sandbox.
func TestBuildFailureIsClassBuild(t *testing.T) {
	d := &sandboxfake.Driver{BuildErr: errors.New("no such base")}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "oracle", d)
	_, _, err := harnesstest.Run(context.Background(), arm(t, "oracle"), env)
	if c := classOf(t, err); c != events.ClassBuild {
		t.Errorf("class %q", c)
	}
	evs := env.Events()
	if len(evs) != 1 || evs[0].Type != events.ImageBuilt || !strings.Contains(evs[0].Data.(events.ImageBuiltData).Error, "no such base") {
		t.Errorf("events %+v", evs)
	}
	env = harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "oracle", sandboxfake.Plain{D: &sandboxfake.Driver{}})
	if _, _, err := harnesstest.Run(context.Background(), arm(t, "oracle"), env); classOf(t, err) != events.ClassSandbox {
		t.Errorf("plain driver: %v", err)
	}
}

const agentLines = `{"_tag":"Usage","input_tokens":10,"output_tokens":2}
the final answer
`

// TestAgentSolve: the agent runs as uid 10001 in its workdir on the
// internal network; its event lines become events (Started synthesised
// first), its text the response Message; leftovers of uid 10001 are
// killed; the agent is copied in at AgentMount.
func TestAgentSolve(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Stdout: agentLines}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	p, out, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	if got := env.Types(); !slices.Equal(got, []events.Type{events.ImageBuilt, events.Started, events.Usage, events.Message}) {
		t.Errorf("events %v", got)
	}
	if p.Workdir != "/app" || p.Spec.Network != sandbox.NetworkInternal {
		t.Errorf("placement %+v", p)
	}
	f := out.Finished
	if !f.Synthesized || f.NoAttempt || f.Isolation["user"] != harness.AgentUser || f.Isolation["network"] != "internal" {
		t.Errorf("finished %+v", f)
	}
	_, _, killed, _ := d.Counts()
	if !slices.Equal(killed, []string{harness.AgentUser}) {
		t.Errorf("KillAll for %v", killed)
	}
	var run *sandboxfake.Exec
	for _, e := range d.Execs() {
		if strings.Contains(strings.Join(e.Spec.Cmd, " "), "agent.sh") {
			run = &e
		}
	}
	if run == nil || run.Spec.User != harness.AgentUser || run.Spec.Env["PROCTOR_MODEL"] != "m" || run.Spec.Grace != sandbox.DefaultGrace {
		t.Errorf("agent exec %+v", run)
	}
	if b, err := os.ReadFile(env.Dir().Path("response.txt")); err != nil || !strings.Contains(string(b), "the final answer") {
		t.Errorf("response.txt %q %v", b, err)
	}
}

// TestAgentNoAttempt: an agent that exits at once without a line made no
// attempt, and the Finished says so.
func TestAgentNoAttempt(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Exit: 3}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	if f := out.Finished; !f.NoAttempt || f.Reason != "exit 3 before any event or output" {
		t.Errorf("finished %+v", f)
	}

	// What it said on stderr last is the reason a user reads first: a run
	// command the image cannot start names its missing interpreter.
	d = &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Exit: 127,
		Stderr: "warming up\nbash: line 1: python3: command not found\n\n"}}}
	env = harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	_, out, err = harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	if f, want := out.Finished, "exit 127 before any event or output; its stderr ends: bash: line 1: python3: command not found"; !f.NoAttempt || f.Reason != want {
		t.Errorf("finished %+v, want reason %q", f, want)
	}
}

// TestAgentTimeout: an agent stopped at its budget is Finished "timeout",
// even when it printed its own Finished reason.
func TestAgentTimeout(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", TimedOut: true, Stdout: `{"_tag":"Finished","reason":"done"}` + "\n"}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	if f := out.Finished; !f.TimedOut || f.Reason != "timeout" || f.Synthesized {
		t.Errorf("finished %+v", f)
	}
}

// TestAgentInstall: the install step makes a derived image the solve runs
// in; a failing install is solver_error (the agent made no attempt).
func TestAgentInstall(t *testing.T) {
	dir := harnesstest.Agent(t, "install = \"apt-get install -y jq\"\nrun = \"bash /opt/proctor/agent/agent.sh\"\n")
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "apt-get", Exit: 0}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	p, _, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, derived := d.Counts(); len(derived) != 1 || p.Spec.Image != derived[0] || !strings.HasPrefix(derived[0], "proctor-agent:") {
		t.Errorf("derived %v, solve image %s", derived, p.Spec.Image)
	}
	d = &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "apt-get", Exit: 100, Stdout: "E: unable"}}}
	env = harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	if _, _, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env); classOf(t, err) != events.ClassSolverError {
		t.Errorf("install failure: %v", err)
	}
}

// TestAgentWorkdirRule: an image WORKDIR of /root is the agent's working
// tree (chowned to uid 10001: that tree, not its parents); a system
// directory, / (an unset WORKDIR) and a WORKDIR whose symlinks resolve to
// one are refused before the agent starts, with an error naming it.
func TestAgentWorkdirRule(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	tk := harnesstest.Task(t, "t", harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\n"})

	d := &sandboxfake.Driver{Image: sandbox.ImageInfo{Workdir: "/root"}, Scripts: []sandboxfake.Script{{Match: "agent.sh", Stdout: "hi\n"}}}
	env := harnesstest.NewEnv(t, tk, "agent:"+dir, d)
	p, out, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil || p.Workdir != "/root" || out.Finished.Isolation["workdir"] != "/root" {
		t.Fatalf("workdir /root: placement %q, isolation %v, %v", p.Workdir, out.Finished.Isolation, err)
	}
	var chown, run string
	for _, e := range d.Execs() {
		line := strings.Join(e.Spec.Cmd, " ")
		switch {
		case strings.Contains(line, "chown -R"):
			chown = line
		case strings.Contains(line, "agent.sh"):
			run = e.Spec.Workdir + " " + e.Spec.User + " HOME=" + e.Spec.Env["HOME"]
		}
	}
	if !strings.Contains(chown, "chown -R 10001:10001 '/root' ") || strings.Contains(chown, " / ") {
		t.Errorf("chown: %q", chown)
	}
	if run != "/root 10001:10001 HOME=/tmp/proctor-agent-home" {
		t.Errorf("agent exec: %q", run)
	}

	for _, c := range []struct{ image, resolved, names string }{
		{"/etc", "", "/etc"},
		{"/usr/local/src", "", "/usr/local/src"},
		{"/work", "/etc/x\n", "/etc/x"},
	} {
		d := &sandboxfake.Driver{Image: sandbox.ImageInfo{Workdir: c.image}, Scripts: []sandboxfake.Script{{Match: "pwd -P", Stdout: c.resolved}}}
		env := harnesstest.NewEnv(t, tk, "agent:"+dir, d)
		_, _, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
		if err == nil || classOf(t, err) != events.ClassRefused || !strings.Contains(err.Error(), c.names) {
			t.Errorf("workdir %q (resolved %q): %v", c.image, c.resolved, err)
		}
		if c.resolved == "" && len(d.Started()) != 0 {
			t.Errorf("workdir %q: a sandbox started for a refused agent", c.image)
		}
		for _, e := range d.Execs() {
			if line := strings.Join(e.Spec.Cmd, " "); strings.Contains(line, "chown") || strings.Contains(line, "agent.sh") {
				t.Errorf("workdir %q: %q ran for a refused agent", c.image, line)
			}
		}
	}
	// An image without a WORKDIR works in /: refused, naming it.
	if _, err := harness.AgentWorkdir(tk, sandbox.ImageInfo{}); err == nil || !strings.Contains(err.Error(), "WORKDIR (unset) is /:") {
		t.Errorf("unset WORKDIR: %v", err)
	}
}

// TestAgentHostileMetrics: a metrics.json the agent made a symlink is
// never followed: the row says why it was ignored.
func TestAgentHostileMetrics(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{{Match: "agent.sh", Stdout: "hi\n", Files: map[string]sandbox.FileResult{
		"/agent-output/metrics.json": sandboxfake.Symlink("/agent-output/metrics.json", "/etc/shadow"),
	}}}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "agent:"+dir), env)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := out.Finished.AgentReported["error"].(string); !strings.Contains(e, "metrics.json ignored") {
		t.Errorf("agent_reported %v", out.Finished.AgentReported)
	}
	if slices.Contains(env.Types(), events.Usage) {
		t.Error("usage taken from an ignored metrics.json")
	}
}

// TestAgentNeedsKillAll: a driver that cannot kill an agent's leftovers
// never lets the solve end as if it could.
func TestAgentNeedsKillAll(t *testing.T) {
	dir := harnesstest.Agent(t, "run = \"bash /opt/proctor/agent/agent.sh\"\n")
	fake := &sandboxfake.Driver{}
	a := arm(t, "agent:"+dir)
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "agent:"+dir, fake)
	p, err := a.Prepare(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	p.Driver = sandboxfake.Plain{D: fake}
	h, _ := p.Driver.Start(context.Background(), p.Spec)
	if _, err := a.Solve(context.Background(), env, p, h); err == nil || !strings.Contains(err.Error(), "leftover") {
		t.Errorf("solve on a driver without KillAll: %v", err)
	}
}

// commandEnv runs a command arm whose host command, when it runs, writes
// reward (if not "") to its {output_dir}.
func commandRun(t *testing.T, sc sandboxfake.Script, reward string) (*harnesstest.Env, harness.Outcome, error) {
	t.Helper()
	sc.Match = "my-solver"
	sc.Do = func(spec sandbox.ExecSpec) error {
		if reward == "" {
			return nil
		}
		return os.WriteFile(filepath.Join(spec.Env["PROCTOR_OUTPUT_DIR"], "reward.txt"), []byte(reward), 0o644)
	}
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{sc}}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "command:my-solver {task_path}", d)
	_, out, err := harnesstest.Run(context.Background(), arm(t, "command:my-solver {task_path}"), env)
	return env, out, err
}

// TestCommandScoresItself: reward.txt in {output_dir} is the verdict;
// without one exit 0 passes and any other exit fails; a timeout fails.
func TestCommandScoresItself(t *testing.T) {
	cases := []struct {
		sc     sandboxfake.Script
		reward string
		want   float64
	}{
		{sandboxfake.Script{Exit: 0}, "0.5", 0.5},
		{sandboxfake.Script{Exit: 0}, "", 1},
		{sandboxfake.Script{Exit: 2}, "", 0},
		{sandboxfake.Script{TimedOut: true}, "", 0},
	}
	for _, c := range cases {
		env, out, err := commandRun(t, c.sc, c.reward)
		if err != nil {
			t.Fatal(err)
		}
		v := out.Verdict
		if v == nil || v.Reward == nil || *v.Reward != c.want {
			t.Errorf("%+v reward %q: verdict %+v", c.sc, c.reward, v)
		}
		if c.sc.TimedOut && out.Finished.Reason != "timeout" {
			t.Errorf("timed out command: %+v", out.Finished)
		}
		if got := env.Types(); !slices.Equal(got, []events.Type{events.Started}) {
			t.Errorf("events %v", got)
		}
	}
}

// TestCommandHostileReward: a reward.txt that is not a plain number is no
// verdict with the reason, never a pass.
func TestCommandHostileReward(t *testing.T) {
	_, out, err := commandRun(t, sandboxfake.Script{Exit: 0}, "1; echo pwned")
	if err != nil {
		t.Fatal(err)
	}
	if v := out.Verdict; v == nil || v.Reward != nil || v.Error == "" {
		t.Errorf("verdict %+v", v)
	}
}

// TestCommandExecFailureIsSandbox: a host command that cannot be run ends
// the cell with class sandbox.
func TestCommandExecFailureIsSandbox(t *testing.T) {
	_, _, err := commandRun(t, sandboxfake.Script{Err: errors.New("fork failed")}, "")
	if classOf(t, err) != events.ClassSandbox {
		t.Errorf("err %v", err)
	}
}

// TestEmitErrorIsReturned: when the event log is down the arm's Solve
// returns the log's error unclassed (the launcher retries the job).
func TestEmitErrorIsReturned(t *testing.T) {
	down := errors.New("log down")
	d := &sandboxfake.Driver{}
	env := harnesstest.NewEnv(t, harnesstest.Task(t, "t", nil), "oracle", d)
	a := arm(t, "oracle")
	p, err := a.Prepare(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	env.EmitErr = down
	h, _ := d.Start(context.Background(), p.Spec)
	if _, err := a.Solve(context.Background(), env, p, h); !errors.Is(err, down) {
		t.Errorf("err %v", err)
	}
}

// TestIsSetupCheck: the arms decide which harness names the artifact never
// compares: the oracle and the probe (by DESIGN §5, before it has an arm);
// agent and command arms are treatments; a name that does not parse is not
// a setup check.
func TestIsSetupCheck(t *testing.T) {
	for name, want := range map[string]bool{
		"oracle": true, "probe": true, "agent:examples/agents/scripted": false,
		"command:true": false, "command:echo a,b": false, "": false, "nonsense": false,
	} {
		if got := harness.IsSetupCheck(name); got != want {
			t.Errorf("IsSetupCheck(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestCoverageColumnsAreTheArms: `tasks coverage` has a column for every
// form of every registered kind (an optional part both ways, aliases
// left out), and each answers as the arm of that form refuses: a task
// without tests/test.sh is refused by the verifier-scored arms, not by
// the probe or a command.
func TestCoverageColumnsAreTheArms(t *testing.T) {
	cols := harness.CoverageRefusers()
	for _, in := range harness.Registry() {
		if strings.HasPrefix(in.Description, "an alias") {
			continue
		}
		syn := strings.NewReplacer("[", "", "]", "").Replace(in.Syntax)
		if cols[syn] == nil {
			t.Errorf("no coverage column %s for the registered %s", syn, in.Syntax)
		}
	}
	tk := harnesstest.Task(t, "t", harnesstest.Files{"tests/test.sh": ""})
	for col, name := range map[string]string{
		"oracle": "oracle", "agent:<dir>": "agent:x", "docker-claude": "docker-claude",
		"docker-claude-skill:<skill-path>": "docker-claude-skill:s", "docker-probe": "docker-probe", "command:<template>": "command:true",
	} {
		_, want := arm(t, name).Refusal(tk)
		if got := cols[col](tk); got != want {
			t.Errorf("%s: coverage %q, the arm's refusal %q", col, got, want)
		}
	}
	if cols["oracle"](tk) == "" || cols["docker-probe"](tk) != "" {
		t.Errorf("without tests/test.sh: oracle %q, docker-probe %q", cols["oracle"](tk), cols["docker-probe"](tk))
	}
}

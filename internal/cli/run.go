package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/internal/lifecycle"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/services/launcher"
	"github.com/proctor-eval/proctor/services/planner"
)

type runFlags struct {
	tasksRoot   string
	tasks       []string
	all         bool
	strict      bool
	harnesses   harnessList
	models      []string
	repeats     int
	retries     int
	baseline    string
	concurrency int
	outputDir   string
	outJSON     string
	outMD       string
	dryRun      bool
	imageMap    string
	sandbox     string
	limits      limitFlags
	node        string
	commandTpl  string
	agentGrace  float64
	probeTgts   string
	resume      string
	// changed reports whether a flag was given (cobra's Changed); nil
	// when the flags were set by a caller, not parsed.
	changed     func(flag string) bool
	noIntercept bool
	caps        events.RunCaps
	agentUser   string
}

// agentUserHelp is the help of --agent-user (tasks run, tasks check).
const agentUserHelp = "who the in-container agent arms (agent:, docker-claude, the probe, the cheats) solve as: sealed (uid 10001 owning only the working tree) or task (as Harbor: the task's [agent].user, else the image's USER, root included; use it to compare with published Harbor numbers; docs/harnesses.md#the-agents-user)"

func newTasksRun(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run --tasks-root DIR (--tasks a,b | --all) --harnesses oracle",
		Short: "Run a matrix of tasks × harnesses × models × repeats and write the task_runs.v1 artifact",
		Long: `Run every selected task through every harness, verify each attempt with the
task's own verifier in its Docker container, record everything in the event
log, and write the task_runs.v1 artifact (--out-json) and a Markdown report
(--out-md). With --nats the run is planned and executed by whatever proctor
services serve that NATS cluster; without it everything runs in this process.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.changed = cmd.Flags().Changed
			return g.tasksRun(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tasksRoot, "tasks-root", "", "directory holding task directories (required)")
	fl.StringSliceVar(&f.tasks, "tasks", nil, "task names to run (comma-separated)")
	fl.BoolVar(&f.all, "all", false, "run every task under --tasks-root")
	fl.BoolVar(&f.strict, "strict", false, "refuse tasks whose task.toml / task.md hold unknown tables or keys (default: warn and ignore them)")
	f.harnesses.vals = []string{"oracle"}
	fl.Var(&f.harnesses, "harnesses", "harnesses: oracle, agent:<dir>, command:<template> (comma-separated; repeatable; a command: entry runs to the end of its value, commas included)")
	fl.StringSliceVar(&f.models, "model", []string{"default"}, "model name(s) passed to agent harnesses")
	fl.IntVar(&f.repeats, "repeats", 1, "attempts per (task, harness, model)")
	fl.IntVar(&f.retries, "retries", 0, "run a cell errored with class build, sandbox or infra (a model provider failing before any attempt too: a 429, 5xx) again, up to N times, each a new attempt (never a scored cell, nor solver_error, refused or unresolved_env)")
	fl.StringVar(&f.baseline, "baseline-harness", "", "harness the others are compared with (McNemar, deltas)")
	fl.IntVar(&f.concurrency, "concurrency", launcher.DefaultConcurrency(), "cells run at once (2 × CPUs by default, the measured knee of container throughput)")
	fl.StringVar(&f.outputDir, "output-dir", "proctor-out", "directory for cell outputs; each run gets <output-dir>/<run-id>/")
	fl.StringVar(&f.outJSON, "out-json", "", "write the task_runs.v1 artifact here (default <output-dir>/<run-id>/task_runs.json)")
	fl.StringVar(&f.outMD, "out-md", "", "write the Markdown report here (default beside --out-json, .json replaced by .md; without --out-json <output-dir>/<run-id>/report.md)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "show the matrix and every refusal, build and run nothing")
	fl.StringVar(&f.imageMap, "image-map", g.getenv("PROCTOR_IMAGE_MAP"), "file mapping image references (registry mirror, local stand-ins); env PROCTOR_IMAGE_MAP")
	fl.StringVar(&f.sandbox, "sandbox", defaultSandbox, sandboxHelp()+"; a run whose harnesses need an ability it lacks is refused before it starts")
	fl.StringVar(&f.node, "node", "", "this machine's node name (default: host name)")
	fl.StringVar(&f.commandTpl, "command-template", "", "same as adding command:<template> to --harnesses")
	fl.Float64Var(&f.agentGrace, "agent-grace", 10, "seconds an agent gets between SIGTERM at its deadline and SIGKILL")
	fl.StringVar(&f.probeTgts, "probe-targets", g.getenv(harness.ProbeTargetsEnv), probeTargetsHelp)
	fl.StringVar(&f.agentUser, "agent-user", harness.AgentUserSealed, agentUserHelp)
	fl.BoolVar(&f.noIntercept, "no-intercept", false, "keep the egress proxy of the arms that call a model (docker-claude, docker-codex) a plain CONNECT tunnel: no model gateway, so the credentials enter the sandbox and no model call is observed")
	fl.StringVar(&f.resume, "resume", "", "continue `RUN` instead of starting one (as proctor runs resume RUN; --out-json, --out-md, --concurrency, --node, --image-map, --sandbox and the limits apply; a flag of the run's spec with another value than the run's is refused)")
	fl.Float64Var(&f.caps.MaxCostUSD, "max-cost-usd", 0, "pause the run once its cells cost this many US dollars (observed by the model gateway where it sees the calls, else as the agents report); 0 = no cap")
	fl.Float64Var(&f.caps.MaxErroredFraction, "max-errored-fraction", 0, "pause the run when more than this fraction of its done cells errored, once --errored-min-count cells are done (a provider outage, an image that never builds); 0 = no cap")
	fl.IntVar(&f.caps.ErroredMinCount, "errored-min-count", 5, "done cells before --max-errored-fraction applies")
	fl.IntVar(&f.caps.MaxErroredPerTask, "max-errored-per-task", 0, "pause the run when this many cells of one task errored (a per-task circuit breaker); 0 = no cap")
	f.limits.add(fl)
	return cmd
}

func (f *runFlags) spec(runID string) (events.RunSpec, error) {
	if f.tasksRoot == "" {
		return events.RunSpec{}, usageError{errors.New("--tasks-root is required")}
	}
	names := f.taskNames()
	if !f.all && len(names) == 0 {
		if len(f.tasks) > 0 {
			return events.RunSpec{}, usageError{fmt.Errorf("--tasks %q names no task", strings.Join(f.tasks, ","))}
		}
		return events.RunSpec{}, usageError{errors.New("pass --tasks a,b or --all")}
	}
	if f.all && len(f.tasks) > 0 {
		return events.RunSpec{}, usageError{errors.New("pass either --tasks or --all, not both")}
	}
	if !(f.agentGrace > 0) || math.IsInf(f.agentGrace, 0) {
		return events.RunSpec{}, usageError{fmt.Errorf("--agent-grace must be a finite number > 0 (seconds), not %v", f.agentGrace)}
	}
	if f.repeats < 1 {
		return events.RunSpec{}, usageError{errors.New("--repeats must be at least 1")}
	}
	if f.concurrency < 1 {
		return events.RunSpec{}, usageError{fmt.Errorf("--concurrency must be at least 1, not %d", f.concurrency)}
	}
	if f.retries < 0 {
		return events.RunSpec{}, usageError{errors.New("--retries must be 0 or more")}
	}
	if c := f.caps; c.MaxCostUSD < 0 || math.IsNaN(c.MaxCostUSD) || math.IsInf(c.MaxCostUSD, 0) || c.MaxErroredFraction < 0 || c.MaxErroredFraction >= 1 || math.IsNaN(c.MaxErroredFraction) || c.MaxErroredPerTask < 0 || c.ErroredMinCount < 0 {
		return events.RunSpec{}, usageError{errors.New("--max-cost-usd must be a finite number >= 0, --max-errored-fraction in [0, 1), --max-errored-per-task >= 0 and --errored-min-count >= 0")}
	}
	if _, err := isoprobe.ParseTargets(f.probeTgts); err != nil {
		return events.RunSpec{}, usageError{fmt.Errorf("--probe-targets: %w", err)}
	}
	agentUser, err := harness.ParseAgentUser(f.agentUser)
	if err != nil {
		return events.RunSpec{}, usageError{err}
	}
	root, err := filepath.Abs(f.tasksRoot)
	if err != nil {
		return events.RunSpec{}, err
	}
	if st, err := os.Stat(root); err != nil {
		return events.RunSpec{}, usageError{fmt.Errorf("--tasks-root %s: %w", f.tasksRoot, err)}
	} else if !st.IsDir() {
		return events.RunSpec{}, usageError{fmt.Errorf("--tasks-root %s: not a directory", f.tasksRoot)}
	}
	out, err := filepath.Abs(filepath.Join(f.outputDir, runID))
	if err != nil {
		return events.RunSpec{}, err
	}
	harnesses := f.harnessRefs()
	cwd, err := os.Getwd()
	if err != nil {
		return events.RunSpec{}, err
	}
	s := events.RunSpec{
		BaseDir:   cwd,
		TasksRoot: root, Tasks: names, All: f.all, Strict: f.strict, Harnesses: harnesses, Models: f.models,
		Repeats: f.repeats, BaselineHarness: f.baselineName(harnesses), OutputDir: out, AgentGraceSec: f.agentGrace,
		ProbeTargets: f.probeTgts, Retries: f.retries, NoIntercept: f.noIntercept, AgentUser: agentUser,
	}
	if f.caps.Any() {
		s.Caps = f.caps
		if s.Caps.ErroredMinCount == 0 {
			s.Caps.ErroredMinCount = 5 // the flag's default
		}
	}
	for _, p := range []*string{&f.outJSON, &f.outMD} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return s, err
			}
		}
	}
	s.OutJSON, s.OutMD = f.outJSON, f.outMD
	if f.imageMap != "" {
		m, err := sandbox.LoadImageMap(f.imageMap)
		if err != nil {
			return s, fmt.Errorf("--image-map: %w", err)
		}
		s.ImageMap = map[string]string{}
		for _, r := range m.Rules() {
			s.ImageMap[r.From] = r.To
		}
	}
	return s, nil
}

// harnessRefs are the harnesses of --harnesses and --command-template: a
// bare command entry (the task-runs seed's spelling) takes the template
// (command:<template>); without one the template is added as a harness.
// A --baseline-harness none of them names (harness.SameHarness) is added
// last, as the seed adds it (baselineAdded says so).
func (f *runFlags) harnessRefs() []string {
	harnesses := f.listed()
	if b := f.baselineAdded(); b != "" {
		harnesses = append(harnesses, b)
	}
	return harnesses
}

// listed are the harnesses of --harnesses and --command-template, without
// the baseline harnessRefs adds.
func (f *runFlags) listed() []string {
	harnesses := slices.Clone(f.harnesses.vals)
	if f.commandTpl != "" {
		if !f.harnesses.set {
			harnesses = nil
		}
		bare := false
		for i, h := range harnesses {
			var filled bool
			if harnesses[i], filled = harness.FillTemplate(h, f.commandTpl); filled {
				bare = true
			}
		}
		if !bare {
			harnesses = append(harnesses, harness.CommandRef(f.commandTpl))
		}
	}
	return harnesses
}

// baselineRef is --baseline-harness, a bare command given the template
// as in harnessRefs.
func (f *runFlags) baselineRef() string {
	b, _ := harness.FillTemplate(f.baseline, f.commandTpl)
	return b
}

// baselineName is the baseline's name in the run's spec: the name
// (harness.Ref.Name) of the harness of hs that --baseline-harness names,
// so the rows compared with it carry exactly that name; "" without
// --baseline-harness.
func (f *runFlags) baselineName(hs []string) string {
	b := f.baselineRef()
	if b == "" {
		return ""
	}
	for _, h := range hs {
		if harness.SameHarness(h, b) {
			if r, err := harness.Parse(h); err == nil {
				return r.Name
			}
		}
	}
	return b
}

// baselineAdded is the harness harnessRefs adds for --baseline-harness,
// "" when --harnesses names it.
func (f *runFlags) baselineAdded() string {
	if b := f.baselineRef(); b != "" && !slices.ContainsFunc(f.listed(), func(h string) bool { return harness.SameHarness(h, b) }) {
		return b
	}
	return ""
}

// resumeConflicts lists the flags given with --resume that are part of
// the run's spec (what it runs and how it is scored) with a value other
// than the one rec records: "--model m2 (the run has m1)". A resume
// continues the run as it was requested; the flags of how this process
// runs it (--concurrency, --node, --image-map, the limits, --out-json,
// --out-md) apply.
func (f *runFlags) resumeConflicts(rec bus.RunRecord) []string {
	if f.changed == nil {
		return nil
	}
	s := rec.Spec
	var out []string
	check := func(flag string, differs bool, given, run any) {
		if f.changed(flag) && differs {
			out = append(out, fmt.Sprintf("--%s %v (the run has %v)", flag, given, run))
		}
	}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	list := func(v []string) string { return strings.Join(v, ",") }
	check("tasks-root", abs(f.tasksRoot) != s.TasksRoot, abs(f.tasksRoot), s.TasksRoot)
	check("tasks", !slices.Equal(f.taskNames(), s.Tasks), list(f.taskNames()), list(s.Tasks))
	check("all", f.all != s.All, f.all, s.All)
	check("strict", f.strict != s.Strict, f.strict, s.Strict)
	// Harnesses compare as harnesses: the seed's alias of the run's
	// harness (docker-oracle for oracle) is the run's own value.
	hs := f.harnessRefs()
	same := slices.EqualFunc(hs, s.Harnesses, harness.SameHarness)
	if f.changed("command-template") && !f.changed("harnesses") {
		check("command-template", !same, list(hs), list(s.Harnesses))
	} else {
		check("harnesses", !same, list(hs), list(s.Harnesses))
	}
	check("model", !slices.Equal(f.models, s.Models), list(f.models), list(s.Models))
	check("repeats", f.repeats != s.Repeats, f.repeats, s.Repeats)
	check("retries", f.retries != s.Retries, f.retries, s.Retries)
	check("baseline-harness", !harness.SameHarness(f.baselineName(hs), s.BaselineHarness), f.baselineRef(), s.BaselineHarness)
	out2 := abs(filepath.Join(f.outputDir, rec.ID))
	check("output-dir", out2 != s.OutputDir, f.outputDir, filepath.Dir(s.OutputDir))
	check("agent-grace", f.agentGrace != s.AgentGraceSec, f.agentGrace, s.AgentGraceSec)
	check("probe-targets", f.probeTgts != s.ProbeTargets, f.probeTgts, s.ProbeTargets)
	check("agent-user", f.agentUser != harness.AgentUserMode(s), f.agentUser, harness.AgentUserMode(s))
	if f.changed("dry-run") && f.dryRun {
		out = append(out, "--dry-run (a resume runs the cells)")
	}
	return out
}

// taskNames are the names of --tasks, blanks dropped.
func (f *runFlags) taskNames() []string {
	var names []string
	for _, n := range f.tasks {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

func (g *globals) tasksRun(ctx context.Context, f *runFlags) error {
	if f.resume != "" {
		return g.resume(ctx, f.resume, &resumeFlags{outJSON: f.outJSON, outMD: f.outMD, node: f.node,
			imageMap: f.imageMap, sandbox: f.sandbox, concurrency: f.concurrency, limits: f.limits, conflicts: f.resumeConflicts})
	}
	runID := events.NewID()
	spec, err := f.spec(runID)
	if err != nil {
		return err
	}
	if b := f.baselineAdded(); b != "" {
		// A misspelt baseline is refused before the line that says it
		// will run.
		if _, err := harness.Parse(b); err != nil {
			return usageError{fmt.Errorf("--baseline-harness: %w", err)}
		}
		// The task-runs seed's line, word for word.
		fmt.Fprintf(g.stderr, "will also run the baseline harness %s\n", b)
	}
	// A driver that lacks an ability the harnesses need refuses the run
	// here, not cell by cell.
	if err := g.checkSandbox(f.sandbox, spec.Harnesses); err != nil {
		return err
	}
	if f.dryRun {
		return g.dryRun(runID, spec)
	}
	// Check the matrix before anything starts: a bad root or harness fails
	// here with the file and line, not inside a service.
	cells, err := g.matrix(spec)
	if err != nil {
		return err
	}
	g.warnTasks(cells)
	g.warnNotes(spec)
	g.warnUsers(spec)
	// Delegated arms check their tools once per run (--dry-run skips it).
	if err := harness.Preflight(ctx, spec.Harnesses); err != nil {
		return err
	}
	rec, err := g.execute(ctx, runID, spec, cells, f)
	if err != nil {
		return err
	}
	return g.printResult(rec)
}

// execute runs a checked spec to its end through the event log (the
// in-process services, or a cluster's with --nats) and returns the run's
// final index record. It takes the store (connectOwner), ends the dead
// runs it finds (recoverDead) and records the run with its identity for
// resume (lifecycle.Start).
// A run stopped by a signal or by a failing service of this process is
// abandoned (its containers removed, the artifact of what finished
// written) and returns ErrInterrupted or the service's error.
func (g *globals) execute(ctx context.Context, runID string, spec events.RunSpec, cells []planner.Cell, f *runFlags) (bus.RunRecord, error) {
	conn, err := g.connectOwner(ctx)
	if err != nil {
		return bus.RunRecord{}, err
	}
	defer conn.Close()
	dead := g.recoverDead(ctx, conn)
	host, _ := os.Hostname()
	identity, err := lifecycle.Identify(spec, cells, g.getenv)
	if err != nil {
		return bus.RunRecord{}, err
	}
	return g.drive(ctx, conn, runID, 0, cells, dead, stackConfig{node: f.node, concurrency: f.concurrency, imageMap: f.imageMap, sandbox: f.sandbox, services: allServices, limits: f.limits},
		func(ctx context.Context) error {
			if err := lifecycle.Start(ctx, conn.Bus, lifecycle.Request{RunID: runID, Spec: spec, Identity: identity,
				Owner: lifecycle.Owner(), Host: host, Version: version()}); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "run %s: %s → %s\n", runID, spec.TasksRoot, spec.OutputDir)
			return nil
		})
}

// drive runs a run to its end from this process: it starts the in-process
// services (without --nats; the planner primed with cells when non-nil),
// removes the containers of the dead runs recovered at start, calls begin
// (which publishes what starts the run: RunRequested, or RunResumed),
// renews the run's lease while it waits and follows the progress of its
// epoch (0 for a new run; a resume's, whose log holds the earlier epochs'
// RunFinished); it returns the run's final index record. A signal or a failed service ends
// the run (abandon).
func (g *globals) drive(ctx context.Context, conn *connection, runID string, epoch int, cells []planner.Cell, dead []string, sc stackConfig, begin func(context.Context) error) (bus.RunRecord, error) {
	runCtx, cancelServices := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelServices()
	defer harness.ForgetRunCA(runID) // the run's gateway CA lives in this process only
	grp, gctx := errgroup.WithContext(runCtx)
	var driver sandbox.Driver
	if g.natsURL == "" {
		start := g.startStack
		if g.startServices != nil {
			start = g.startServices
		}
		st, err := start(gctx, grp, conn.Bus, sc)
		if err != nil {
			return bus.RunRecord{}, err
		}
		driver = st.driver
		if st.planner != nil && cells != nil {
			st.planner.Prime(runID, cells) // the matrix is computed once per run
		}
	}
	g.gcDead(ctx, driver, dead)
	if err := begin(ctx); err != nil {
		return bus.RunRecord{}, err
	}
	leaseCtx, stopLease := context.WithCancel(ctx)
	defer stopLease()
	go lifecycle.HoldLease(leaseCtx, conn.Bus, runID)

	// On a cluster the workers store each cell's output directory; this
	// process writes it under --output-dir as the cell's verdict arrives.
	var outputs *outputFetcher
	outputsDone := make(chan struct{})
	outputsCtx, stopOutputs := context.WithCancel(ctx)
	defer stopOutputs()
	if g.natsURL != "" {
		if f, err := newOutputFetcher(ctx, conn.Bus, runID, ""); err == nil {
			outputs = f
			go func() {
				defer close(outputsDone)
				f.follow(outputsCtx)
			}()
		} else {
			fmt.Fprintf(g.stderr, "proctor: cell outputs will not be written (%v): `proctor runs fetch %s` writes them later\n", err, runID)
		}
	}
	if outputs == nil {
		close(outputsDone)
	}

	// The progress follower stops at RunFinished, or when it is told to:
	// a service that failed publishes no RunFinished, and the command
	// must not wait for one.
	progressCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		g.progress(progressCtx, conn.Bus, runID, epoch)
	}()

	waitErr := make(chan error, 1)
	var rec bus.RunRecord
	go func() {
		var err error
		rec, err = conn.WaitRun(ctx, runID)
		waitErr <- err
	}()
	var err error
	serviceFailed := false
	select {
	case err = <-waitErr:
	case <-gctx.Done():
		err = fmt.Errorf("a service stopped: %w", grp.Wait())
		serviceFailed = ctx.Err() == nil
	}
	interrupted := ctx.Err() != nil
	cancelServices()
	if werr := grp.Wait(); werr != nil && !errors.Is(werr, context.Canceled) && err == nil {
		err = werr
	}
	g.settle(driver, runID)
	if err != nil || interrupted {
		stopProgress() // no RunFinished is coming
	} else {
		// The run's record is final, so its RunFinished is in the log;
		// the follower gets a moment to print up to it.
		select {
		case <-progressDone:
		case <-time.After(progressGrace):
			stopProgress()
		}
	}
	<-progressDone
	stopOutputs()
	<-outputsDone
	if outputs != nil && err == nil && !interrupted {
		// What the follower missed or failed: every cell's last verdict.
		if _, _, ferr := outputs.all(ctx); ferr != nil {
			fmt.Fprintf(g.stderr, "proctor: some cell outputs were not written: %v\n(`proctor runs fetch %s` tries again)\n", ferr, runID)
		}
		if rerr := g.writeResultsHere(ctx, conn.Bus, runID); rerr != nil {
			fmt.Fprintf(g.stderr, "proctor: the artifact was not written here: %v (`proctor replay %s --out-json FILE` writes it)\n", rerr, runID)
		}
	}
	switch {
	case interrupted:
		g.abandon(conn.Bus, driver, runID, bus.StatusInterrupted)
		return rec, ErrInterrupted
	case serviceFailed:
		// The services of this process stopped: nothing else will end
		// the run, so it ends here as failed, with what finished.
		g.abandon(conn.Bus, driver, runID, bus.StatusFailed)
		return rec, err
	case err != nil:
		return rec, err
	}
	return rec, nil
}

// progressGrace bounds how long a finished run waits for its progress
// follower to reach RunFinished.
const progressGrace = 30 * time.Second

// settleWait bounds how long a run that ends waits for the container and
// network creates its engine has not answered yet (settler).
const settleWait = time.Minute

// settler is a driver whose engine may answer a create after the cell
// that asked gave up (the Docker driver): Settle waits until every such
// create is answered and what it made removed, or ctx ends, and returns
// how many are still unanswered.
type settler interface {
	Settle(ctx context.Context) int
}

// settle waits, once the services stopped, for the creates the engine
// answered too late for their cell (a Ctrl-C during a create, a slow
// engine), so that what they make is removed before this process exits;
// it says what it waits for and what is left.
func (g *globals) settle(driver sandbox.Driver, runID string) {
	d, ok := driver.(settler)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleWait)
	defer cancel()
	quick, qcancel := context.WithTimeout(ctx, time.Second)
	n := d.Settle(quick)
	qcancel()
	if n == 0 {
		return
	}
	fmt.Fprintf(g.stderr, "waiting up to %s for %d container or network creates the engine has not answered\n", settleWait, n)
	if n = d.Settle(ctx); n > 0 {
		fmt.Fprintf(g.stderr, "proctor: %d creates still unanswered by the engine; what they make carries the run's labels: `proctor gc --run %s` removes it\n", n, runID)
	}
}

func (g *globals) printResult(rec bus.RunRecord) error {
	var parts []string
	for _, k := range []string{"passed", "partial", "failed", "solver_timeout", "verifier_timeout", "verifier_error", "errored"} {
		if n := rec.Counts[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	fmt.Fprintf(g.stdout, "run %s %s: %s\n", rec.ID, rec.Status, strings.Join(parts, ", "))
	if rec.Artifact != "" {
		fmt.Fprintf(g.stdout, "artifact: %s\nreport:   %s\n", rec.Artifact, rec.Report)
	}
	g.warnUnusedImageMapRules(rec)
	g.firewallHint(rec)
	switch rec.Status {
	case bus.StatusInterrupted:
		fmt.Fprintf(g.stderr, "%s\n", resumeHint(rec.ID))
	case bus.StatusFailed:
		return fmt.Errorf("run %s failed: %s", rec.ID, rec.Error)
	case bus.StatusCancelled:
		return fmt.Errorf("run %s %s", rec.ID, rec.Error)
	}
	return nil
}

// resumeHint is what to do with an interrupted run: resume it, which runs
// again the cells the interruption left without a verdict and keeps the
// others (the log keeps both attempts).
func resumeHint(runID string) string {
	return fmt.Sprintf("`proctor runs resume %s` continues it: the cells the interruption left without a verdict run again, the others are kept", runID)
}

// warnUnusedImageMapRules prints, on stderr, the image-map rules no image
// of the run used, as the artifact lists them (run.image_map_unused).
func (g *globals) warnUnusedImageMapRules(rec bus.RunRecord) {
	if len(rec.Spec.ImageMap) == 0 || rec.Artifact == "" {
		return
	}
	a, err := artifact.Read(rec.Artifact)
	if err != nil || len(a.Run.ImageMapUnused) == 0 {
		return
	}
	fmt.Fprintf(g.stderr, "warning: --image-map: %d of %d rules matched no image of this run: %s\n",
		len(a.Run.ImageMapUnused), len(rec.Spec.ImageMap), strings.Join(a.Run.ImageMapUnused, ", "))
}

// matrix is planner.Matrix, the arms reading the command line's
// environment (getenv), with the errors that are the caller's input
// marked for exit code 2 (matrixError).
func (g *globals) matrix(spec events.RunSpec) ([]planner.Cell, error) {
	cells, err := planner.Matrix(spec, g.getenv)
	if err != nil {
		return nil, matrixError(err)
	}
	return cells, nil
}

// matrixError marks the errors of planner.Matrix that are the caller's
// input (unknown harness or task, nothing to run, unknown keys under
// --strict) for exit code 2; others pass unchanged.
func matrixError(err error) error {
	for _, sentinel := range []error{harness.ErrUnknown, task.ErrTaskNotFound, task.ErrNoTasks, task.ErrUnknownKeys} {
		if errors.Is(err, sentinel) {
			return usageError{err}
		}
	}
	return err
}

// warnTasks prints, once per task of the matrix, a warning line on
// stderr for each unknown definition key (ignored by the run, listed in
// its rows' metrics.unknown_keys) and each of its load warnings
// (task.Task.Warnings: a compose key dropped, a compose variable .env does
// not set, ...), the task named; an unknown key is said once.
func (g *globals) warnTasks(cells []planner.Cell) {
	seen := map[string]bool{}
	for _, c := range cells {
		t := c.Task
		if seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		said := map[string]bool{}
		for _, u := range t.UnknownKeys {
			said[u.String()+": ignored"] = true // the same key among the load warnings: said once, here
			fmt.Fprintf(g.stderr, "warning: %s: ignored (--strict refuses it)\n", textsafe.Line(t.Name+"/"+filepath.Base(t.DefinitionFile)+": "+u.String()))
		}
		for _, w := range t.Warnings {
			if said[w] {
				continue
			}
			fmt.Fprintf(g.stderr, "warning: %s\n", textsafe.Line(t.Name+": "+w))
		}
	}
}

// warnNotes prints, for a run of every task (--all), each directory
// discovery skipped under the root with its reason (task.Notes: a task.md
// without frontmatter, a symbolic link to a directory), as `tasks list`
// does, so a task whose task.md lost its frontmatter is not left out of
// the run in silence. A named task that is a note is already an error
// (task.Select).
func (g *globals) warnNotes(spec events.RunSpec) {
	if !spec.All {
		return
	}
	notes, err := task.Notes(spec.TasksRoot)
	if err != nil {
		return // the matrix read this root a moment ago; a root gone since fails the run there
	}
	for _, s := range notes {
		fmt.Fprintf(g.stderr, "warning: skipped %s\n", textsafe.Line(s.Dir+": "+s.Reason+" (not run)"))
	}
}

// warnUsers warns when an arm compared with the baseline runs its agent
// as another user than the baseline's (harness.UserMismatches), or in
// another place: on the host against the task container
// (harness.LocationMismatches).
func (g *globals) warnUsers(spec events.RunSpec) {
	for _, w := range append(harness.UserMismatches(spec), harness.LocationMismatches(spec)...) {
		fmt.Fprintf(g.stderr, "warning: %s\n", textsafe.Line(w))
	}
}

func (g *globals) dryRun(runID string, spec events.RunSpec) (err error) {
	cells, checks, err := planner.Preview(spec, g.getenv)
	if err != nil {
		return matrixError(err)
	}
	g.warnTasks(cells)
	g.warnNotes(spec)
	g.warnUsers(spec)
	// An arm that cannot run here (planner.Preview's checks: a missing
	// model key, a tool not installed) refuses every cell of its own with
	// the same reason: its cells say so in a word, and the reason is said
	// once for the arm, with the count, in the error the dry run ends with.
	armRefused := map[string]int{}
	for _, e := range checks {
		armRefused[e.Error()] = 0
	}
	runnable := 0
	for _, c := range cells {
		state := "run"
		if n, ok := armRefused[c.Refusal]; ok && c.Refusal != "" {
			armRefused[c.Refusal] = n + 1
			state = "errored (" + string(c.RefusalClass) + "): harness " + c.Harness.Name + " cannot run here (why: below)"
		} else if c.Refusal != "" {
			state = "errored (" + string(c.RefusalClass) + "): " + c.Refusal
		} else {
			runnable++
		}
		fmt.Fprintln(g.stdout, textsafe.Line(c.ID+"\t"+state))
	}
	fmt.Fprintf(g.stdout, "%d cells, %d would run, %d errored before any build\n", len(cells), runnable, len(cells)-runnable)
	if len(checks) > 0 {
		// The matrix is shown, but the run would stop before any cell:
		// the dry run says so, each arm's reason once, and fails as the
		// run would.
		counted := make([]error, len(checks))
		for i, e := range checks {
			n := armRefused[e.Error()]
			counted[i] = fmt.Errorf("%w (%d %s refused)", e, n, plural(n, "cell", "cells"))
		}
		defer func() {
			if err == nil {
				err = fmt.Errorf("tasks run would stop before any cell: %w", errors.Join(counted...))
			}
		}()
	}
	if spec.OutJSON == "" {
		return nil
	}
	a := plannedArtifact(runID, spec, cells)
	if err := artifact.WriteFile(spec.OutJSON, a); err != nil {
		return fmt.Errorf("--out-json: %w", err)
	}
	fmt.Fprintf(g.stderr, "dry run: wrote %s (%d cells planned, %d errored before any build)\n", spec.OutJSON, runnable, len(cells)-runnable)
	return nil
}

// plannedArtifact is the task_runs.v1 artifact run runID of spec would
// start from: its planning events (planner.CellEvents) projected, every
// cell that would run planned, every refused one errored as the run
// would write it (projection.PlannedArtifact).
func plannedArtifact(runID string, spec events.RunSpec, cells []planner.Cell) *artifact.Artifact {
	p := projection.NewProjector(runID)
	p.Apply(events.Must(events.RunRequested, runID, "", 0, lifecycle.Source, events.RunRequestedData{Spec: spec, ProctorVersion: version()}))
	for _, c := range cells {
		for _, e := range planner.CellEvents(runID, spec, c) {
			p.Apply(e)
		}
	}
	return p.PlannedArtifact(version())
}

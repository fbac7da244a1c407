// Package scalerig is the scale rig of deploy/scale (`make scale`): a
// real 3-node JetStream cluster of nats-server processes, the real
// planner and aggregator each as its own process (`proctor serve`), N
// simulated worker nodes (the real launcher and verifier services on a
// driver whose cells' solve and verify take configured wall time and
// print a configured number of agent events) and runs submitted by
// `proctor tasks run --nats` at a configured rate, all on this machine.
// It measures the control plane: cells an hour sustained, the CPU of the
// servers, planner and aggregator per 1,000 cells an hour, the dispatch
// latency, that every cell was projected exactly once and that each
// run's artifact equals a single node's for the same plan; with faults,
// it kills a NATS node, then worker nodes, then the aggregator (SIGKILL)
// during the run, restarts each and reports how long the pipeline took
// to recover. The worker nodes share nothing but NATS with the rest:
// each runs in a PROCTOR_HOME of its own, each run's tasks and agent are
// taken away once planned (inputHider), so workers load them from the
// trees the planner stored, and workers store each cell's output for the
// run's driver to write. It is a test kit: it drives the services with a
// scripted sandbox, never a real one.
package scalerig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Config sizes the rig. Its zero value is not usable: Defaults gives the
// issue's sizes.
type Config struct {
	// Dir is the rig's working directory (created): confs, stores, tasks,
	// outputs, each process's log.
	Dir string
	// NATSServer is the nats-server binary (go build
	// github.com/nats-io/nats-server/v2).
	NATSServer string
	// Self is the argv prefix that runs this package's Main (the
	// deploy/scale binary, or a test binary that dispatches to Main):
	// the rig starts the services, the workers and the runs' drivers as
	// Self + role + arguments.
	Self []string
	// Nodes is the NATS servers of the cluster (3).
	Nodes int
	// Workers is the simulated worker nodes, Concurrency each one's cell
	// slots.
	Workers, Concurrency int
	// Rate is the offered load in cells an hour: a run of Tasks ×
	// Repeats cells is submitted every Tasks×Repeats/Rate hours, for
	// Duration of wall time (at least one run).
	Rate     float64
	Duration time.Duration
	Tasks    int
	Repeats  int
	Sim      Sim
	// AckWait is the workers' job AckWait: how soon a killed worker's
	// jobs are delivered again.
	AckWait time.Duration
	// NodeLost is the aggregator's --node-lost.
	NodeLost time.Duration
	// Faults kills, during the run: one NATS node, then FaultWorkers
	// worker nodes, then the aggregator, each restarted after
	// FaultDown.
	Faults       bool
	FaultWorkers int
	FaultDown    time.Duration
	// Reference runs the plan once on a single node first (one
	// nats-server, one worker), and compares every run's artifact with
	// its.
	Reference bool
	// Profile writes CPU profiles of the planner and the aggregator into
	// Dir/profiles.
	Profile bool
	// StoreOutputs: each worker keeps its cells' output directories on
	// its own disk and stores each in the PROCTOR_TREES bucket before its
	// verdict, and each run's driver writes them under its --output-dir
	// (on in Defaults). Off, the workers write them at their planned
	// paths on this machine's disk: only to measure what storing costs.
	StoreOutputs bool
	// HideInputs starts every worker node in a mount namespace of its
	// own with an empty read-only tmpfs over Dir/inputs and
	// Dir/inputs.planned, so that no path a run was planned from ever
	// exists on a worker's view (Linux, CAP_SYS_ADMIN; on in Defaults).
	// The rig first checks that it can (a probe process); where it
	// cannot, or with HideInputs off, the workers see those paths until
	// the rename at each run's first CellPlanned, and a job taken before
	// it is a problem of the report.
	HideInputs bool
	// Log receives the rig's progress lines (nil: discarded).
	Log io.Writer
}

// Defaults returns the sizes: 3 servers, 50 workers of 4 slots,
// 10,000 cells an hour for 10 minutes in runs of 50 cells, 100 agent
// events a cell, solve 30 s and verify 5 s, faults on, outputs stored.
func Defaults() Config {
	return Config{
		Nodes: 3, Workers: 50, Concurrency: 4, Rate: 10000, Duration: 10 * time.Minute,
		Tasks: 10, Repeats: 5, Sim: Sim{Solve: 30 * time.Second, Verify: 5 * time.Second, Events: 100, FailEvery: 4},
		AckWait: 30 * time.Second, NodeLost: 45 * time.Second,
		Faults: true, FaultWorkers: 5, FaultDown: 5 * time.Second, Reference: true, StoreOutputs: true,
		HideInputs: true,
	}
}

// Validate checks the sizes.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("scalerig: Config.Dir is required")
	case c.NATSServer == "":
		return errors.New("scalerig: Config.NATSServer (the nats-server binary) is required")
	case len(c.Self) == 0:
		return errors.New("scalerig: Config.Self is required")
	case c.Nodes < 1:
		return fmt.Errorf("scalerig: nodes %d: want at least 1", c.Nodes)
	case c.Workers < 1 || c.Concurrency < 1:
		return fmt.Errorf("scalerig: workers %d and concurrency %d must be at least 1", c.Workers, c.Concurrency)
	case !(c.Rate > 0):
		return fmt.Errorf("scalerig: rate %v cells/h must be > 0", c.Rate)
	case c.Tasks < 1 || c.Repeats < 1:
		return fmt.Errorf("scalerig: tasks %d and repeats %d must be at least 1", c.Tasks, c.Repeats)
	case c.Faults && c.FaultWorkers >= c.Workers:
		return fmt.Errorf("scalerig: fault-workers %d must be fewer than the workers (%d)", c.FaultWorkers, c.Workers)
	}
	return c.Sim.Validate()
}

// rig is one run of the rig.
type rig struct {
	cfg              Config
	ps               procs
	inputs           string // Dir/inputs: each run's tasks root and agent directory
	hider            *inputHider
	hidden           bool // the workers start with the inputs hidden (Config.HideInputs, and the probe passed)
	logs             string
	logMu            sync.Mutex
	start            time.Time
	control, workers map[string]*proc
	nodes            []*natsNode
}

func (r *rig) logf(format string, a ...any) {
	if r.cfg.Log == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.cfg.Log, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, a...))
}

// Run runs the rig to its end (every submitted run finished, or ctx
// ended) and returns what it measured. Every process it started is
// stopped before it returns. The error is a failure of the rig itself
// (a process that would not start, a run whose driver failed); what the
// report finds wrong (a lost cell, an artifact that differs) is in the
// Report's Problems.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &rig{cfg: cfg, start: time.Now()}
	defer r.stopAll()
	r.inputs = filepath.Join(cfg.Dir, "inputs")
	r.logs = filepath.Join(cfg.Dir, "logs")
	for _, d := range []string{r.inputs, r.inputs + ".planned", r.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	rep := &Report{Config: cfg}
	if cfg.HideInputs {
		if err := r.probeHiding(); err != nil {
			r.logf("inputs: not hidden from the workers (%v); each run's are renamed away at its first CellPlanned, and checked", err)
		} else {
			r.hidden = true
			r.logf("inputs: hidden from every worker's view (a mount namespace of its own, an empty tmpfs over %s)", r.inputs)
		}
	}
	rep.InputsHidden = r.hidden
	var ref *normalized
	if cfg.Reference {
		var err error
		if ref, err = r.reference(ctx, rep); err != nil {
			return rep, fmt.Errorf("scalerig: the single-node reference run: %w", err)
		}
	}
	if err := r.cluster(ctx, rep, ref); err != nil {
		return rep, err
	}
	return rep, nil
}

// env is the environment of a process of the rig named name: its own
// PROCTOR_HOME, and the marker a test binary dispatches on.
func (r *rig) env(name string) []string {
	return []string{"PROCTOR_HOME=" + r.home(name), RoleEnv + "=1"}
}

// home is the PROCTOR_HOME of the process named name.
func (r *rig) home(name string) string { return filepath.Join(r.cfg.Dir, "home", name) }

// startNATS starts the nodes' servers and waits until each is healthy.
func (r *rig) startNATS(ctx context.Context, nodes []*natsNode, prefix string) error {
	for _, n := range nodes {
		if err := r.startNode(n, prefix); err != nil {
			return err
		}
	}
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := n.healthy(hctx); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) startNode(n *natsNode, prefix string) error {
	p, err := r.ps.start("nats", prefix+n.name, []string{r.cfg.NATSServer, "-c", n.conf}, nil, "", filepath.Join(r.logs, prefix+n.name+".log"))
	n.p = p
	return err
}

// startControl starts the planner and the aggregator, each its own
// `proctor serve` process.
func (r *rig) startControl(url, prefix string) error {
	if r.control == nil {
		r.control = map[string]*proc{}
	}
	for _, svc := range []string{"planner", "aggregator"} {
		if err := r.startService(url, prefix, svc); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) startService(url, prefix, svc string) error {
	argv := append(append([]string(nil), r.cfg.Self...), "proctor", "serve", svc, "--nats", url)
	if svc == "aggregator" && r.cfg.NodeLost > 0 {
		argv = append(argv, "--node-lost", r.cfg.NodeLost.String())
	}
	env := r.env(prefix + svc)
	if r.cfg.Profile && prefix == "" {
		dir := filepath.Join(r.cfg.Dir, "profiles")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		env = append(env, ProfileEnv+"="+filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", svc, time.Now().UnixNano())))
	}
	p, err := r.ps.start(svc, prefix+svc, argv, env, "", filepath.Join(r.logs, prefix+svc+".log"))
	if err != nil {
		return err
	}
	r.control[svc] = p
	return nil
}

// startWorker starts worker node name with slots cells. It runs in its
// PROCTOR_HOME, and is told of no path of the runs' inputs or outputs:
// it reads tasks and the agent from the trees the planner stored.
func (r *rig) startWorker(url, name string, slots int) error {
	s := r.cfg.Sim
	argv := append(append([]string(nil), r.cfg.Self...), "worker", "--nats", url, "--node", name,
		"--concurrency", fmt.Sprint(slots), "--solve", s.Solve.String(), "--verify", s.Verify.String(),
		"--events", fmt.Sprint(s.Events), "--fail-every", fmt.Sprint(s.FailEvery), "--ack-wait", r.cfg.AckWait.String(),
		"--claims", filepath.Join(r.logs, name+".claims"))
	if r.cfg.StoreOutputs {
		// Each worker keeps its cells' outputs on its own disk and
		// stores them in the bucket; the drivers write them under
		// their --output-dir.
		argv = append(argv, "--store-outputs")
	}
	if r.hidden {
		argv = append(argv, "--hide", strings.Join(r.hiddenDirs(), ","))
	}
	home := r.home(name)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	p, err := r.ps.startIn("worker", name, argv, r.env(name), home, filepath.Join(r.logs, name+".log"), r.hidden)
	if err != nil {
		return err
	}
	if r.workers == nil {
		r.workers = map[string]*proc{}
	}
	r.workers[name] = p
	return nil
}

// submission is one run submitted by a driver process.
type submission struct {
	n        int
	inputs   string // the run's tasks root and agent directory, under rig.inputs
	out      string
	p        *proc
	at       time.Time
	runID    string
	artifact string
	status   string
}

// submit starts the driver of run n: `proctor tasks run --nats` of the
// rig's plan, from a tasks root and an agent directory of its own under
// Dir/inputs/<n> (taken away once planned: inputHider), its outputs
// under Dir/out/<n>.
func (r *rig) submit(url, prefix string, n int) (*submission, error) {
	id := fmt.Sprintf("%s%04d", prefix, n)
	out := filepath.Join(r.cfg.Dir, "out", id)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	in := filepath.Join(r.inputs, id)
	tasks, agent := filepath.Join(in, "tasks"), filepath.Join(in, "agent")
	if err := writeTasks(tasks, agent, r.cfg.Tasks, r.cfg.Sim); err != nil {
		return nil, err
	}
	argv := append(append([]string(nil), r.cfg.Self...), "proctor", "tasks", "run", "--nats", url,
		"--tasks-root", tasks, "--all", "--harnesses", "agent:"+agent, "--repeats", fmt.Sprint(r.cfg.Repeats),
		"--retries", "3", "--output-dir", out)
	name := fmt.Sprintf("%sdriver%04d", prefix, n)
	p, err := r.ps.start("driver", name, argv, r.env(name), "", filepath.Join(out, "driver.log"))
	if err != nil {
		return nil, err
	}
	return &submission{n: n, inputs: in, out: out, p: p, at: time.Now()}, nil
}

// wait waits for the driver to end and reads the run's id, status and
// artifact from its output.
func (s *submission) wait(ctx context.Context) error {
	select {
	case <-s.p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b, _ := os.ReadFile(s.p.log)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "artifact: "); ok {
			s.artifact = strings.TrimSpace(rest)
		}
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "run" && strings.HasSuffix(f[2], ":") {
			s.runID, s.status = f[1], strings.TrimSuffix(f[2], ":")
		}
	}
	if s.p.err != nil || s.runID == "" {
		return fmt.Errorf("run %d: driver %v (log %s)", s.n, s.p.err, s.p.log)
	}
	return nil
}

// stopAll stops every process still running: drivers and workers first,
// then the services, then the servers.
func (r *rig) stopAll() {
	r.ps.mu.Lock()
	all := append([]*proc(nil), r.ps.all...)
	r.ps.mu.Unlock()
	for _, role := range []string{"driver", "worker", "planner", "aggregator", "nats"} {
		var wg sync.WaitGroup
		for _, p := range all {
			if p.role == role && p.alive() {
				wg.Add(1)
				go func() { defer wg.Done(); r.ps.stop(p, 10*time.Second) }()
			}
		}
		wg.Wait()
	}
}

// hiddenDirs are the directories hidden from the workers' view: the
// runs' inputs, where they were planned, and where the rig moves them.
func (r *rig) hiddenDirs() []string { return []string{r.inputs, r.inputs + ".planned"} }

// probeHiding checks that a worker can be started with the inputs
// hidden: it leaves a file in Dir/inputs, starts Self's hide-check role
// in a mount namespace of its own, which hides the directories and
// fails if it sees anything in them or can write there, and then checks
// that the file is still there on the rig's view (nothing propagated).
func (r *rig) probeHiding() error {
	mark := filepath.Join(r.inputs, ".probe")
	if err := os.WriteFile(mark, []byte("planned inputs\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(mark)
	log := filepath.Join(r.logs, "hide-check.log")
	argv := append(append([]string(nil), r.cfg.Self...), "hide-check", strings.Join(r.hiddenDirs(), ","))
	p, err := r.ps.startIn("probe", "hide-check", argv, r.env("hide-check"), "", log, true)
	if err != nil {
		return err
	}
	<-p.done
	if p.err != nil {
		out, _ := os.ReadFile(log)
		return fmt.Errorf("hide-check: %v: %s", p.err, strings.TrimSpace(string(out)))
	}
	if _, err := os.Stat(mark); err != nil {
		return fmt.Errorf("the rig no longer sees %s after hiding it from a worker: %w", mark, err)
	}
	return nil
}

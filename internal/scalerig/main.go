package scalerig

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proctor-eval/proctor/internal/cli"
)

// RoleEnv is set in the environment of every process the rig starts, so
// a test binary standing in for the deploy/scale binary knows to call
// Main instead of running its tests.
const RoleEnv = "PROCTOR_SCALE_ROLE"

// ProfileEnv names the file a `proctor` role writes its CPU profile to.
const ProfileEnv = "PROCTOR_SCALE_CPUPROFILE"

// Main runs the role args[0] names and returns the exit code:
//
//	rig [flags]      the rig (Run), its report on stdout
//	worker [flags]   one simulated worker node (RunWorker)
//	hide-check DIRS  hides the comma-separated DIRS (hidePaths) and
//	                 fails unless each is then empty and read-only
//	proctor ARGS...  the proctor command line (cli.Main), with a CPU
//	                 profile written to $PROCTOR_SCALE_CPUPROFILE if set
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: scale (rig|worker|proctor) ...")
		return 2
	}
	switch args[0] {
	case "proctor":
		return proctorMain(args[1:], stdout, stderr)
	case "worker":
		return workerMain(args[1:], stderr)
	case "rig":
		return rigMain(args[1:], stdout, stderr)
	case "hide-check":
		return hideCheckMain(args[1:], stderr)
	}
	fmt.Fprintf(stderr, "scale: unknown role %q (rig, worker, proctor)\n", args[0])
	return 2
}

func proctorMain(args []string, stdout, stderr io.Writer) int {
	if p := os.Getenv(ProfileEnv); p != "" {
		f, err := os.Create(p)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	return cli.Main(args, stdout, stderr)
}

func workerMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg WorkerConfig
	fs.StringVar(&cfg.NATS, "nats", "", "the cluster's URLs, comma-separated")
	fs.StringVar(&cfg.Node, "node", "", "the node's name")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "cell slots")
	fs.DurationVar(&cfg.AckWait, "ack-wait", 0, "the launcher's and verifier's job AckWait (0: 60 s)")
	fs.DurationVar(&cfg.Sim.Solve, "solve", 30*time.Second, "a cell's simulated solve")
	fs.DurationVar(&cfg.Sim.Verify, "verify", 5*time.Second, "a cell's simulated tests")
	fs.IntVar(&cfg.Sim.Events, "events", 100, "agent events a cell's solve prints")
	fs.IntVar(&cfg.Sim.FailEvery, "fail-every", 0, "a cell whose id hashes to a multiple of this fails (0: none)")
	fs.IntVar(&cfg.Sim.OutputBytes, "output-bytes", 0, "bytes of a file each cell's tests leave in its output")
	fs.BoolVar(&cfg.StoreOutputs, "store-outputs", false, "keep cell outputs on this node's disk and store each in the PROCTOR_TREES bucket before its verdict")
	verbose := fs.Bool("v", false, "log the services' debug lines")
	hide := fs.String("hide", "", "directories to hide from this node (comma-separated; an empty tmpfs over each): it must be started in a mount namespace of its own")
	claims := fs.String("claims", "", "append a line for each launch job's first claim to this file: run, cell, ns from stored to taken")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *hide != "" {
		if err := hidePaths(strings.Split(*hide, ",")); err != nil {
			fmt.Fprintln(stderr, "worker:", err)
			return 1
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *claims != "" {
		f, err := os.OpenFile(*claims, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(stderr, "worker:", err)
			return 1
		}
		defer f.Close()
		cfg.Logger = slog.New(claimHandler{next: cfg.Logger.Handler(), mu: &sync.Mutex{}, w: f})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := RunWorker(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return 1
	}
	return 0
}

// RigFlags registers the rig's flags on fs over cfg (its values are the
// defaults).
func RigFlags(fs *flag.FlagSet, cfg *Config) {
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "working directory (created; confs, stores, logs, outputs)")
	fs.StringVar(&cfg.NATSServer, "nats-server", cfg.NATSServer, "the nats-server binary")
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "NATS servers in the cluster")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "simulated worker nodes")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "cell slots of each worker")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered load, cells an hour")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long runs are submitted (wall time)")
	fs.IntVar(&cfg.Tasks, "tasks", cfg.Tasks, "tasks of the plan")
	fs.IntVar(&cfg.Repeats, "repeats", cfg.Repeats, "repeats of each task: a run is tasks × repeats cells")
	fs.DurationVar(&cfg.Sim.Solve, "solve", cfg.Sim.Solve, "a cell's simulated solve")
	fs.DurationVar(&cfg.Sim.Verify, "verify", cfg.Sim.Verify, "a cell's simulated tests")
	fs.IntVar(&cfg.Sim.Events, "events", cfg.Sim.Events, "agent events a cell's solve prints")
	fs.IntVar(&cfg.Sim.FailEvery, "fail-every", cfg.Sim.FailEvery, "a cell whose id hashes to a multiple of this fails (0: none)")
	fs.DurationVar(&cfg.AckWait, "ack-wait", cfg.AckWait, "the workers' job AckWait")
	fs.DurationVar(&cfg.NodeLost, "node-lost", cfg.NodeLost, "the aggregator's --node-lost")
	fs.BoolVar(&cfg.Faults, "faults", cfg.Faults, "kill a NATS node, then worker nodes, then the aggregator during the run")
	fs.IntVar(&cfg.FaultWorkers, "fault-workers", cfg.FaultWorkers, "worker nodes the second fault kills")
	fs.DurationVar(&cfg.FaultDown, "fault-down", cfg.FaultDown, "how long a killed process stays down")
	fs.BoolVar(&cfg.Reference, "reference", cfg.Reference, "run the plan on a single node first and compare every artifact with its")
	fs.BoolVar(&cfg.Profile, "profile", cfg.Profile, "write CPU profiles of the planner and the aggregator under DIR/profiles")
	fs.BoolVar(&cfg.HideInputs, "hide-inputs", cfg.HideInputs, "start each worker in a mount namespace of its own with an empty tmpfs over DIR/inputs, so no planned path exists on its view (Linux, CAP_SYS_ADMIN; where that fails, or false: the runs' inputs are renamed away at their first CellPlanned and a job taken before is a problem)")
	fs.BoolVar(&cfg.StoreOutputs, "store-outputs", cfg.StoreOutputs, "workers store each cell's output in the PROCTOR_TREES bucket and the drivers write it under their --output-dir (false: workers write it at its planned path, to measure what storing costs)")
}

func rigMain(args []string, stdout, stderr io.Writer) int {
	cfg := Defaults()
	fs := flag.NewFlagSet("rig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	RigFlags(fs, &cfg)
	report := fs.String("report", "", "also write the report to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg.Self = []string{self}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(os.TempDir(), fmt.Sprintf("proctor-scale-%d", time.Now().Unix()))
	}
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg.Log = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg)
	var text bytes.Buffer
	if rep != nil {
		rep.Write(&text)
		if cfg.Profile {
			topProfiles(filepath.Join(cfg.Dir, "profiles"), &text)
		}
	}
	fmt.Fprintf(&text, "logs and outputs: %s\n", cfg.Dir)
	_, _ = stdout.Write(text.Bytes())
	if *report != "" {
		werr := os.MkdirAll(filepath.Dir(*report), 0o755)
		if werr == nil {
			werr = os.WriteFile(*report, text.Bytes(), 0o644)
		}
		if werr != nil {
			fmt.Fprintln(stderr, "scale: --report:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "scale:", err)
		return 1
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// topProfiles prints `go tool pprof -top` of each profile in dir, when go
// is on PATH.
func topProfiles(dir string, w io.Writer) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.pprof"))
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			continue // the profile of a process killed with SIGKILL
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", f).CombinedOutput()
		cancel()
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return
			}
			fmt.Fprintf(w, "\n%s: %v\n", f, err)
			continue
		}
		fmt.Fprintf(w, "\nprofile %s\n%s", filepath.Base(f), out)
	}
}

// hideCheckMain hides the comma-separated directories of args[0] from
// this process and fails unless each is then empty and refuses a new
// file: the probe of rig.probeHiding.
func hideCheckMain(args []string, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" {
		fmt.Fprintln(stderr, "usage: scale hide-check DIR[,DIR...]")
		return 2
	}
	dirs := strings.Split(args[0], ",")
	if err := hidePaths(dirs); err != nil {
		fmt.Fprintln(stderr, "hide-check:", err)
		return 1
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil || len(ents) > 0 {
			fmt.Fprintf(stderr, "hide-check: %s holds %d entries after hiding it (%v)\n", d, len(ents), err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(d, "written"), nil, 0o644); err == nil {
			fmt.Fprintf(stderr, "hide-check: %s took a new file after hiding it\n", d)
			return 1
		}
	}
	return 0
}

package scalerig

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/verify"
	"github.com/proctor-eval/proctor/services/launcher"
	"github.com/proctor-eval/proctor/services/verifier"
)

// Sim is what a simulated cell does: its agent's solve runs Solve of
// wall time and prints Events event lines spread over it (a Started
// line, Events-2 Message lines, a Finished line: Events agent events in
// the log), and its verifier's tests run Verify. A cell's reward is 0
// when the FNV-1a hash of its task and repeat is divisible by FailEvery
// (0: never), else 1, so a plan has a fixed mix of passed and failed
// rows whatever directory its agent was planned from.
type Sim struct {
	Solve, Verify time.Duration
	Events        int
	FailEvery     int
	// OutputBytes is the size of a file the tests leave beside the
	// reward (/logs/verifier/output.bin, incompressible): a cell output
	// large enough to take a while to store.
	OutputBytes int
}

// Validate checks the durations and counts.
func (s Sim) Validate() error {
	if s.Solve < 0 || s.Verify < 0 {
		return fmt.Errorf("scalerig: solve %v and verify %v must be >= 0", s.Solve, s.Verify)
	}
	if s.Events < 2 {
		return fmt.Errorf("scalerig: events %d: want at least 2 (Started and Finished)", s.Events)
	}
	if s.OutputBytes < 0 {
		return fmt.Errorf("scalerig: output bytes %d must be >= 0", s.OutputBytes)
	}
	if s.FailEvery < 0 {
		return fmt.Errorf("scalerig: fail-every %d must be >= 0", s.FailEvery)
	}
	return nil
}

// Reward is the reward Sim gives cell (1 or 0): by its task and repeat,
// the first and last fields of its id ("<task>/<harness>/<model>/<repeat>"),
// since the harness names the agent's directory, which differs between
// the rig's runs.
func (s Sim) Reward(cell string) int {
	if s.FailEvery == 0 {
		return 1
	}
	task, _, _ := strings.Cut(cell, "/")
	h := fnv.New32a()
	_, _ = io.WriteString(h, task+"/"+cell[strings.LastIndexByte(cell, '/')+1:])
	if h.Sum32()%uint32(s.FailEvery) == 0 {
		return 0
	}
	return 1
}

// OutputBin is the file of Sim.OutputBytes the simulated tests leave.
const OutputBin = "/logs/verifier/output.bin"

// noise is n incompressible bytes seeded by cell.
func noise(cell string, n int) string {
	h := fnv.New64a()
	_, _ = io.WriteString(h, cell)
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return string(b)
}

// AgentScript is the agent's run script name: the command the simulated
// driver answers as the agent's solve.
const AgentScript = "agent.sh"

// simDriver is sandboxfake's Driver (every optional ability, nothing run)
// whose agent solve and verifier tests take Sim's wall time: the solve
// prints Sim's event lines to the exec's stdout as it goes, the tests
// leave the cell's reward. Everything else is the fake's.
type simDriver struct {
	*sandboxfake.Driver
	sim Sim
}

var _ sandbox.Driver = (*simDriver)(nil)

// newSimDriver returns the driver of a worker node.
// Its handles carry the process id: a node's processes never share one.
func newSimDriver(sim Sim) *simDriver {
	return &simDriver{Driver: &sandboxfake.Driver{Prefix: fmt.Sprintf("fake-%d-", os.Getpid())}, sim: sim}
}

func (d *simDriver) Exec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
	line := strings.Join(spec.Cmd, " ")
	switch {
	case strings.Contains(line, "tests/test.sh") || strings.Contains(line, "/verifier/test.sh"):
		if err := wait(ctx, spec.Timeout, d.sim.Verify); err != nil {
			return sandbox.ExecResult{ExitCode: sandbox.TimeoutExitCode, TimedOut: true, Duration: spec.Timeout}, nil
		}
		cell := ""
		if h != nil {
			cell = h.State["cell"]
		}
		d.Sandbox(h).Put(verify.RewardTxt, sandboxfake.Regular(fmt.Sprintf("%d\n", d.sim.Reward(cell))))
		if d.sim.OutputBytes > 0 {
			d.Sandbox(h).Put(OutputBin, sandboxfake.Regular(noise(cell, d.sim.OutputBytes)))
		}
		return d.Driver.Exec(ctx, h, spec)
	case strings.Contains(line, AgentScript):
		// The fake records the call and refuses a destroyed or frozen
		// sandbox; no script matches, so it runs nothing.
		if r, err := d.Driver.Exec(ctx, h, spec); err != nil || r.ExitCode != 0 {
			return r, err
		}
		start := time.Now()
		if err := d.solve(ctx, spec); err != nil {
			return sandbox.ExecResult{ExitCode: sandbox.TimeoutExitCode, TimedOut: true, Duration: time.Since(start)}, nil
		}
		return sandbox.ExecResult{Duration: time.Since(start)}, nil
	}
	return d.Driver.Exec(ctx, h, spec)
}

// solve prints the agent's event lines evenly over Sim.Solve; it returns
// an error when ctx or the exec's timeout ends it first.
func (d *simDriver) solve(ctx context.Context, spec sandbox.ExecSpec) error {
	out := spec.Stdout
	if out == nil {
		out = io.Discard
	}
	n := d.sim.Events
	step := d.sim.Solve / time.Duration(n)
	var deadline <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(max(step, time.Microsecond))
	defer tick.Stop()
	for i := range n {
		var l string
		switch i {
		case 0:
			l = `{"_tag":"Started","model":"sim"}`
		case n - 1:
			l = `{"_tag":"Finished","reason":"done"}`
		default:
			l = fmt.Sprintf(`{"_tag":"Message","role":"assistant","text":"step %d of the simulated agent"}`, i)
		}
		if _, err := io.WriteString(out, l+"\n"); err != nil {
			return err
		}
		if step > 0 {
			select {
			case <-tick.C: // the simulated agent's pace
			case <-deadline:
				return errors.New("timed out")
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// wait sleeps d (the simulated work), or returns an error when timeout
// (0: none) or ctx ends first.
func wait(ctx context.Context, timeout, d time.Duration) error {
	if timeout > 0 && d > timeout {
		return errors.New("timed out")
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C: // the simulated work's duration
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WorkerConfig configures one simulated worker node.
type WorkerConfig struct {
	// NATS is the cluster's URL list (comma-separated).
	NATS string
	// Node is the node name of its launcher and verifier.
	Node string
	// Concurrency is the node's cell slots (launcher and verifier share
	// them, as `proctor serve launcher verifier` does).
	Concurrency int
	// AckWait is the launcher's and verifier's job AckWait (0: 60 s).
	AckWait time.Duration
	Sim     Sim
	Logger  *slog.Logger
	// StoreOutputs: the node keeps its cells' output directories on its
	// own disk and stores each in the PROCTOR_TREES bucket before its
	// verdict, as `proctor serve` does (the driver does not see the
	// node's disk).
	StoreOutputs bool
}

// RunWorker runs the real launcher and verifier services of one node on
// the simulated driver until ctx ends, wired as `proctor serve launcher
// verifier` wires them (one driver, shared slots). It returns nil at
// ctx's end, else the first service's error.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	if err := cfg.Sim.Validate(); err != nil {
		return err
	}
	if cfg.Node == "" || cfg.Concurrency < 1 {
		return fmt.Errorf("scalerig: worker needs a node name and concurrency >= 1 (got %q, %d)", cfg.Node, cfg.Concurrency)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := bus.Connect(ctx, cfg.NATS, log)
	if err != nil {
		return err
	}
	defer b.Close()
	d := newSimDriver(cfg.Sim)
	slots := launcher.NewSlots(cfg.Concurrency)
	l, err := launcher.New(launcher.Config{Node: cfg.Node, Concurrency: cfg.Concurrency, AckWait: cfg.AckWait, Logger: log, Host: d.Driver, Slots: slots, StoreOutputs: cfg.StoreOutputs}, b, d)
	if err != nil {
		return err
	}
	v, err := verifier.New(verifier.Config{Node: cfg.Node, Concurrency: cfg.Concurrency, AckWait: cfg.AckWait, Logger: log, Slots: slots, StoreOutputs: cfg.StoreOutputs}, b, d)
	if err != nil {
		return err
	}
	grp, gctx := errgroup.WithContext(ctx)
	grp.Go(func() error { return l.Run(gctx) })
	grp.Go(func() error { return v.Run(gctx) })
	err = grp.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Package harnesstest runs harness arms without a container engine: an
// in-memory harness.Env that records the events an arm emits, a Run that
// drives an arm as the launcher does (Prepare, Start, Solve, RecordEgress,
// Destroy), and
// task fixtures written to a temp directory. With sandboxfake it is the
// harness conformance suite's toolkit; a new arm's test uses it in a few
// lines (docs/ADDING_A_HARNESS.md).
package harnesstest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// Event is one event an arm emitted.
type Event struct {
	Type events.Type
	Data any
	At   time.Time
}

// Env is an in-memory harness.Env.
type Env struct {
	Run, Cell string
	TaskV     *task.Task
	PlanV     events.CellPlannedData
	SpecV     events.RunSpec
	DirV      cellfs.Dir
	D, H      sandbox.Driver
	// EmitErr, when set, is returned by every Emit (the event log down).
	EmitErr error
	// Vars are proctor's environment as the arm reads it (Getenv): a
	// variable Vars holds shadows the process's ("" unsets it).
	Vars map[string]string
	// Trees, when set, fetches a stored tree by digest
	// (harness.TreeFetcher): a worker that does not see the planned
	// paths of PlanV.Trees. Unset, FetchTree fails.
	Trees func(ctx context.Context, digest string) (string, error)

	mu     sync.Mutex
	events []Event
}

// NewEnv returns an Env for task tk run by harness name under model
// "m", with its cell directory in a temp dir and d as both the container
// and the host driver.
func NewEnv(t testing.TB, tk *task.Task, name string, d sandbox.Driver) *Env {
	t.Helper()
	dir := cellfs.Dir(t.TempDir())
	if err := dir.Ensure(); err != nil {
		t.Fatal(err)
	}
	return &Env{
		Run: "run1", Cell: tk.Name + "/" + name + "/m/1", TaskV: tk,
		PlanV: events.CellPlannedData{Harness: name, Model: "m", TaskDir: tk.Dir, TaskRevision: tk.Revision, OutputDir: string(dir)},
		SpecV: events.RunSpec{TasksRoot: filepath.Dir(tk.Dir), BaseDir: filepath.Dir(tk.Dir)},
		DirV:  dir, D: d, H: d,
	}
}

func (e *Env) RunID() string                { return e.Run }
func (e *Env) CellID() string               { return e.Cell }
func (e *Env) Node() string                 { return "test" }
func (e *Env) Task() *task.Task             { return e.TaskV }
func (e *Env) Plan() events.CellPlannedData { return e.PlanV }
func (e *Env) Spec() events.RunSpec         { return e.SpecV }
func (e *Env) Dir() cellfs.Dir              { return e.DirV }
func (e *Env) Driver() sandbox.Driver       { return e.D }
func (e *Env) Host() sandbox.Driver         { return e.H }

// Getenv reads Vars, else the process's environment.
func (e *Env) Getenv(k string) string {
	if v, ok := e.Vars[k]; ok {
		return v
	}
	return os.Getenv(k)
}

// FetchTree calls Trees (harness.TreeFetcher); without Trees it fails.
func (e *Env) FetchTree(ctx context.Context, digest string) (string, error) {
	if e.Trees == nil {
		return "", errors.New("harnesstest: no tree store (Env.Trees)")
	}
	return e.Trees(ctx, digest)
}

var _ harness.TreeFetcher = (*Env)(nil)

// Emit records the event after checking that its data encodes.
func (e *Env) Emit(ctx context.Context, t events.Type, data any, at time.Time) error {
	if e.EmitErr != nil {
		return e.EmitErr
	}
	if _, err := events.New(t, e.Run, e.Cell, 1, "test", data); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, Event{Type: t, Data: data, At: at})
	return nil
}

// Events returns the events emitted so far, in order.
func (e *Env) Events() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.events...)
}

// Types returns the types of the events emitted so far, in order.
func (e *Env) Types() []events.Type {
	var ts []events.Type
	for _, ev := range e.Events() {
		ts = append(ts, ev.Type)
	}
	return ts
}

// Run drives arm as the launcher does: Prepare, Start on the placement's
// driver, Solve, RecordEgress, Destroy. The error is Prepare's, Start's,
// Solve's or RecordEgress's.
func Run(ctx context.Context, arm harness.Arm, env *Env) (harness.Placement, harness.Outcome, error) {
	p, err := arm.Prepare(ctx, env)
	if err != nil {
		return p, harness.Outcome{}, err
	}
	h, err := p.Driver.Start(ctx, p.Spec)
	if err != nil {
		return p, harness.Outcome{}, err
	}
	defer p.Driver.Destroy(context.WithoutCancel(ctx), h)
	out, err := arm.Solve(ctx, env, p, h)
	if rerr := harness.RecordEgress(ctx, env, p.Driver, h); rerr != nil && err == nil {
		err = rerr
	}
	return p, out, err
}

// Files maps a path relative to a task directory to its contents; a mode
// of 0o755 is given to files ending in .sh.
type Files map[string]string

// Task writes a Harbor task named name (task.toml, instruction.md,
// environment/Dockerfile, solution/solve.sh, tests/test.sh, then files,
// which override or add; an empty value deletes) under a temp tasks root
// and loads it.
func Task(t testing.TB, name string, files Files) *task.Task {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, name)
	all := Files{
		"task.toml":              "version = \"1.0\"\n\n[agent]\ntimeout_sec = 30\n\n[verifier]\ntimeout_sec = 30\n",
		"instruction.md":         "Write hello to /app/out.txt.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"solution/solve.sh":      "echo hello > /app/out.txt\n",
		"tests/test.sh":          "echo 1 > /logs/verifier/reward.txt\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for rel, body := range all {
		if body == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if filepath.Ext(p) == ".sh" {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// Agent writes an agent directory with agent.toml body and returns its
// absolute path.
func Agent(t testing.TB, toml string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.sh"), []byte("echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Package planner turns a RunRequested event into the run's matrix: one
// CellPlanned event per (task, harness, model, repeat), a CellRefused event
// for every cell a harness refuses before any build, a RunPlanned event with
// the cell count, and one launch job per runnable cell.
package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/task"
)

// Source is the envelope source of the planner's events.
const Source = "planner"

// Config configures the planner. The zero value is usable.
type Config struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// StoreTrees stores every tree a run reads (each task revision, each
	// agent and skill directory) in the PROCTOR_TREES bucket as it is
	// planned, so workers need not see the planner's paths (a cluster
	// without a shared file system). A single-process run leaves it off.
	StoreTrees bool
	// Getenv reads proctor's environment for the arms' checks (Matrix);
	// nil means os.Getenv.
	Getenv func(string) string
}

// Service is the planner.
type Service struct {
	bus        *bus.Bus
	log        *slog.Logger
	storeTrees bool
	getenv     func(string) string

	mu     sync.Mutex
	primed map[string][]Cell // run id → its matrix, computed by the caller
}

// Prime hands the planner the matrix of runID that its caller already
// computed from the same spec (`tasks run` checks the matrix before it
// publishes RunRequested), so the tasks are loaded and hashed once per run.
// Plan uses it once and forgets it; a planner in another process, which
// was primed with nothing, computes the matrix itself.
func (s *Service) Prime(runID string, cells []Cell) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.primed == nil {
		s.primed = map[string][]Cell{}
	}
	s.primed[runID] = cells
}

// matrix returns the primed matrix of runID, else Matrix(spec, getenv).
func (s *Service) matrix(runID string, spec events.RunSpec) ([]Cell, error) {
	s.mu.Lock()
	cells, ok := s.primed[runID]
	delete(s.primed, runID)
	s.mu.Unlock()
	if ok {
		return cells, nil
	}
	return Matrix(spec, s.getenv)
}

// New returns a planner on b.
func New(cfg Config, b *bus.Bus) (*Service, error) {
	if b == nil {
		return nil, errors.New("planner: nil bus")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{bus: b, log: log.With("service", Source), storeTrees: cfg.StoreTrees, getenv: cfg.Getenv}, nil
}

// Cell is one planned cell.
type Cell struct {
	ID      string
	Task    *task.Task
	Harness harness.Ref
	Model   string
	Repeat  int
	// RefusalClass and Refusal are set when the harness refuses the task
	// before any build.
	RefusalClass events.ErrorClass
	Refusal      string
	// Trees are the stored directories the cell reads besides its task
	// (set by a planner that stores trees).
	Trees []events.InputTree
}

// Matrix builds the run's cells from a spec, in task, harness, model,
// repeat order. It fails as a whole when discovery fails (with spec.Strict,
// an unknown definition key fails it too: task.ErrUnknownKeys), a task name
// is unknown (task.ErrTaskNotFound), nothing is selected (task.ErrNoTasks,
// naming the root and what was skipped there), or a harness reference does
// not parse, or a harness cannot run here (its Check, which reads
// proctor's environment through getenv, nil meaning os.Getenv: a missing
// CLI or credential).
func Matrix(spec events.RunSpec, getenv func(string) string) ([]Cell, error) {
	cells, checks, err := matrix(spec, getenv)
	if err != nil {
		return nil, err
	}
	if len(checks) > 0 {
		return nil, checks[0]
	}
	return cells, nil
}

// Preview is Matrix for --dry-run: a harness that cannot run here does
// not stop it; that harness's cells are refused with the reason, and
// checks holds each such harness's error (the run itself would stop on
// the first).
func Preview(spec events.RunSpec, getenv func(string) string) (cells []Cell, checks []error, err error) {
	return matrix(spec, getenv)
}

func matrix(spec events.RunSpec, getenv func(string) string) ([]Cell, []error, error) {
	if len(spec.Harnesses) == 0 {
		return nil, nil, errors.New("no harness given (--harnesses oracle)")
	}
	var refs []harness.Ref
	var checks []error
	seen, unusable := map[string]bool{}, map[string]string{}
	for _, h := range spec.Harnesses {
		r, err := harness.Parse(h)
		if err != nil {
			return nil, nil, err
		}
		arm, err := harness.For(r)
		if err != nil {
			return nil, nil, err
		}
		if err := arm.Check(spec.BaseDir, getenv); err != nil {
			err = fmt.Errorf("harness %s: %w", r.Name, err)
			checks = append(checks, err)
			unusable[r.Name] = err.Error()
		}
		if seen[r.Name] {
			return nil, nil, fmt.Errorf("harness %q given twice", r.Name)
		}
		seen[r.Name] = true
		refs = append(refs, r)
	}
	if spec.BaselineHarness != "" && !seen[spec.BaselineHarness] {
		return nil, nil, fmt.Errorf("baseline harness %q is not among --harnesses %s", spec.BaselineHarness, strings.Join(spec.Harnesses, ","))
	}
	if spec.BaselineHarness != "" && harness.IsSetupCheck(spec.BaselineHarness) {
		// Its rows check the setup, not a treatment: they never enter a
		// comparison (DESIGN §8), so the run would have none.
		return nil, nil, fmt.Errorf("baseline harness %q checks the setup (the task's solution or a probe) and is never compared: name an agent harness", spec.BaselineHarness)
	}
	if _, err := harness.ParseAgentUser(spec.AgentUser); err != nil {
		return nil, nil, err
	}
	loader := task.Loader{Strict: spec.Strict}
	d, err := loader.Discover(spec.TasksRoot)
	if err != nil {
		return nil, nil, err
	}
	tasks := d.Tasks
	if !spec.All {
		if len(spec.Tasks) == 0 {
			return nil, nil, fmt.Errorf("%w selected: pass --tasks a,b or --all", task.ErrNoTasks)
		}
		if tasks, err = task.Select(d, spec.Tasks); err != nil {
			return nil, nil, err
		}
	}
	if len(tasks) == 0 {
		return nil, nil, noTasks(d)
	}
	models := spec.Models
	if len(models) == 0 {
		models = []string{"default"}
	}
	repeats := max(spec.Repeats, 1)
	var cells []Cell
	for _, t := range tasks {
		for _, r := range refs {
			class, reason := r.RefusalIn(spec, t)
			if why, ok := unusable[r.Name]; ok {
				class, reason = events.ClassRefused, why
			}
			for _, m := range models {
				for rep := 1; rep <= repeats; rep++ {
					cells = append(cells, Cell{
						ID: events.CellID(t.Name, r.Name, m, rep), Task: t, Harness: r, Model: m, Repeat: rep,
						RefusalClass: class, Refusal: reason,
					})
				}
			}
		}
	}
	return cells, checks, nil
}

// CellEvents are the events that plan cell c of run runID: its
// CellPlanned, and its CellRefused when the harness refuses the task
// before any build. The planner publishes them; a dry run folds them into
// the artifact the run would start from.
func CellEvents(runID string, spec events.RunSpec, c Cell) []events.Envelope {
	out := []events.Envelope{events.Must(events.CellPlanned, runID, c.ID, 1, Source, events.CellPlannedData{
		Task: c.Task.Name, Harness: c.Harness.Name, Model: c.Model, Repeat: c.Repeat,
		TaskDir: c.Task.Dir, TaskRevision: c.Task.Revision, TaskMeta: taskMeta(c.Task),
		OutputDir: CellDir(spec.OutputDir, c), UnknownKeys: unknownKeys(c.Task),
		SetupCheck: !c.Harness.Comparable(), HarnessKind: string(c.Harness.Kind),
		Trees: c.Trees,
	})}
	if c.Refusal != "" {
		out = append(out, events.Must(events.CellRefused, runID, c.ID, 1, Source, events.CellRefusedData{
			ErrorClass: string(c.RefusalClass), Reason: c.Refusal, UnresolvedEnv: unresolved(c),
		}))
	}
	return out
}

// noTasks is the error of a root without any task: it names the root and
// what discovery skipped there (author's notes, symlinked directories).
func noTasks(d *task.Discovery) error {
	if len(d.Skipped) == 0 {
		return fmt.Errorf("%w under %s: no directory there holds a task.toml or a task.md", task.ErrNoTasks, d.Root)
	}
	var why []string
	for i, s := range d.Skipped {
		if i == 5 {
			why = append(why, fmt.Sprintf("and %d more", len(d.Skipped)-i))
			break
		}
		why = append(why, s.Dir+": "+s.Reason)
	}
	return fmt.Errorf("%w under %s: every candidate was skipped (%s)", task.ErrNoTasks, d.Root, strings.Join(why, "; "))
}

// CellDir is the directory of a cell's files under a run's output dir:
// <output_dir>/<task>/<harness>/<model>/<repeat>, with characters that are
// awkward in paths (':', '/', '{', ' ' in harness names) replaced by '_'.
func CellDir(outputDir string, c Cell) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
				return r
			}
			return '_'
		}, s)
	}
	return filepath.Join(outputDir, filepath.FromSlash(c.Task.Name), clean(c.Harness.Name), clean(c.Model), fmt.Sprint(c.Repeat))
}

// Run consumes RunRequested events until ctx ends. A run already planned
// (its index record is past "requested") is skipped, so a redelivered
// request never plans twice.
func (s *Service) Run(ctx context.Context) error {
	cons, err := s.bus.EventConsumer(ctx, "planner", events.TypeFilter(events.RunRequested), time.Minute)
	if err != nil {
		return err
	}
	return s.bus.Serve(ctx, cons, 1, 20*time.Second, func(ctx context.Context, m jetstream.Msg) {
		e, err := events.Decode(m.Data())
		if err != nil {
			s.log.Error("bad RunRequested", "err", err)
			_ = m.Term()
			return
		}
		if err := s.handle(ctx, e); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("plan", "run", e.RunID, "err", err)
			_ = m.Nak()
			return
		}
		_ = m.Ack()
	})
}

func (s *Service) handle(ctx context.Context, e events.Envelope) error {
	rec, err := s.bus.GetRun(ctx, e.RunID)
	if err == nil && rec.Status != bus.StatusRequested {
		return nil
	}
	var d events.RunRequestedData
	if err := events.Into(e, &d); err != nil {
		return err
	}
	return s.Plan(ctx, e.RunID, d.Spec)
}

// Plan publishes the matrix of one run. A spec that cannot be planned ends
// the run: RunPlanned carries the error and zero cells.
func (s *Service) Plan(ctx context.Context, runID string, spec events.RunSpec) error {
	cells, err := s.matrix(runID, spec)
	if err != nil {
		s.log.Warn("run cannot be planned", "run", runID, "err", err)
		if perr := s.bus.PublishAll(ctx, events.Must(events.RunPlanned, runID, "", 0, Source, events.RunPlannedData{Error: err.Error()})); perr != nil {
			return perr
		}
		return s.bus.UpdateRun(ctx, runID, func(r *bus.RunRecord) { r.Status = bus.StatusRunning; r.Error = err.Error() })
	}
	if s.storeTrees {
		if cells, err = StoreInputs(ctx, s.bus, spec, cells, s.getenv); err != nil {
			if !bus.Transient(err) && ctx.Err() == nil {
				s.log.Warn("run cannot be planned", "run", runID, "err", err)
				if perr := s.bus.PublishAll(ctx, events.Must(events.RunPlanned, runID, "", 0, Source, events.RunPlannedData{Error: err.Error()})); perr != nil {
					return perr
				}
				return s.bus.UpdateRun(ctx, runID, func(r *bus.RunRecord) { r.Status = bus.StatusRunning; r.Error = err.Error() })
			}
			return err
		}
	}
	var taskNames []string
	seenTask := map[string]bool{}
	for _, c := range cells {
		if !seenTask[c.Task.Name] {
			seenTask[c.Task.Name] = true
			taskNames = append(taskNames, c.Task.Name)
		}
		for _, e := range CellEvents(runID, spec, c) {
			if err := s.bus.Publish(ctx, e); err != nil {
				return err
			}
		}
	}
	if err := s.bus.PublishAll(ctx, events.Must(events.RunPlanned, runID, "", 0, Source, events.RunPlannedData{Cells: len(cells), Tasks: taskNames})); err != nil {
		return err
	}
	// A cell cancelled before it was planned (`runs cancel` of a run
	// still requested) is errored here, class cancelled: no launch job.
	// A paused run's jobs are published; launchers hold them.
	rec, err := s.bus.GetRun(ctx, runID)
	if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return err
	}
	for _, c := range dispatchOrder(cells) {
		if c.Refusal != "" {
			continue
		}
		if d, ok := rec.Control.CellCancelled(c.ID); ok {
			if err := s.bus.Publish(ctx, events.Must(events.CellErrored, runID, c.ID, 1, Source, events.CellErroredData{
				ErrorClass: string(events.ClassCancelled), Error: (&bus.Cancelled{Control: d}).Error(),
			})); err != nil {
				return err
			}
			continue
		}
		if err := s.bus.PublishWork(ctx, events.LaunchSubject, runID+"/"+c.ID, events.LaunchJob{RunID: runID, CellID: c.ID}); err != nil {
			return err
		}
	}
	if err := s.bus.Flush(ctx); err != nil {
		return err
	}
	s.log.Info("planned", "run", runID, "cells", len(cells), "tasks", len(taskNames))
	return s.bus.UpdateRun(ctx, runID, func(r *bus.RunRecord) { r.Status = bus.StatusRunning; r.Cells = len(cells) })
}

// unresolved lists the env keys that errored the cell: those of the env
// tables its harness gets (harness.Ref.UnresolvedEnv).
func unresolved(c Cell) []string {
	if c.RefusalClass == events.ClassUnresolvedEnv {
		return c.Harness.UnresolvedEnv(c.Task)
	}
	return nil
}

// unknownKeys lists the dotted keys of t's unknown definition keys.
func unknownKeys(t *task.Task) []string {
	var out []string
	for _, u := range t.UnknownKeys {
		out = append(out, u.Key)
	}
	return out
}

// taskMeta keeps the metadata the dataset export promotes to columns.
func taskMeta(t *task.Task) map[string]any {
	m := map[string]any{}
	for _, k := range []string{"difficulty", "category", "tags"} {
		if v, ok := t.Metadata[k]; ok {
			m[k] = v
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

package planner

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// StoreInputs stores in the PROCTOR_TREES bucket every tree the run's
// runnable cells read, each once (a tree the bucket already holds is not
// uploaded: 10,000 cells of 89 tasks store 89 task trees): a task under
// its revision, which must still be the revision it was loaded with, and
// the directories of its harness's identity inputs (agent and skill
// directories) under their digests, which it returns as each cell's
// Trees. getenv reads proctor's environment for the arms' inputs (nil:
// os.Getenv).
// A planner that stores trees calls it for every run; resume and requeue
// call it for the cells they run again, whose trees `proctor gc` removes
// once the run ended.
func StoreInputs(ctx context.Context, b *bus.Bus, spec events.RunSpec, cells []Cell, getenv func(string) string) ([]Cell, error) {
	store, err := trees.Open(ctx, b)
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	byHarness := map[string][]events.InputTree{}
	for i, c := range cells {
		if c.Refusal != "" {
			continue
		}
		if !done[c.Task.Dir] {
			digest, err := trees.PutWithin(ctx, b, store, c.Task.Dir, spec.TasksRoot)
			if err != nil {
				return nil, fmt.Errorf("store task %s: %w", c.Task.Name, err)
			}
			if digest != c.Task.Revision {
				return nil, fmt.Errorf("task %s changed while the run was planned (revision %.12s, stored %.12s)", c.Task.Name, c.Task.Revision, digest)
			}
			done[c.Task.Dir] = true
		}
		in, ok := byHarness[c.Harness.Name]
		if !ok {
			if in, err = storeHarness(ctx, b, store, spec, c.Harness, getenv); err != nil {
				return nil, err
			}
			byHarness[c.Harness.Name] = in
		}
		cells[i].Trees = in
	}
	return cells, nil
}

// storeHarness stores the directories among the harness's identity
// inputs (a file, such as a pinned CLI binary, is the worker's own).
func storeHarness(ctx context.Context, b *bus.Bus, store jetstream.ObjectStore, spec events.RunSpec, r harness.Ref, getenv func(string) string) ([]events.InputTree, error) {
	arm, err := harness.For(r)
	if err != nil {
		return nil, err
	}
	inputs, err := arm.IdentityInputs(spec.BaseDir, getenv)
	if err != nil {
		return nil, fmt.Errorf("harness %s: %w", r.Name, err)
	}
	var out []events.InputTree
	for _, in := range inputs {
		if fi, err := os.Stat(in.Path); err != nil || !fi.IsDir() {
			continue
		}
		digest, err := trees.Put(ctx, b, store, in.Path)
		if err != nil {
			return nil, fmt.Errorf("harness %s: store %s: %w", r.Name, in.Name, err)
		}
		out = append(out, events.InputTree{Name: in.Name, Path: in.Path, Digest: digest})
	}
	return out, nil
}

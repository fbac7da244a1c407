package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/services/planner"
)

// Identity is a run's identity: the hash of its declared inputs, and the
// inputs by the name resume reports when one changed ("task fix-sum
// revision", "harness agent:x agent dir", "cells (tasks × harnesses ×
// models × repeats)").
type Identity struct {
	Hash   string
	Inputs map[string]string
}

// Identify hashes a run's declared inputs: every task's revision, the
// content of every file and directory each harness arm brings into its
// cells (harness.Arm.IdentityInputs: agent and skill directories, the
// pinned CLI binaries, resolved against spec.BaseDir, a CLI's path
// read through getenv, nil meaning os.Getenv), and the set of
// cell ids (tasks × harnesses × models × repeats), and who the agents
// run as (--agent-user, when it is not sealed). Output paths, the
// machine and the time are no part of it: a resumed run is the same run
// wherever it continues. An input that cannot be read is an error naming
// the harness.
func Identify(spec events.RunSpec, cells []planner.Cell, getenv func(string) string) (Identity, error) {
	inputs, err := declaredInputs(spec, cells, getenv)
	if err != nil {
		return Identity{}, err
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(inputs)) {
		fmt.Fprintf(h, "%s=%s\n", k, inputs[k])
	}
	return Identity{Hash: "sha256:" + hex.EncodeToString(h.Sum(nil)), Inputs: inputs}, nil
}

// declaredInputs maps each declared input, by the name resume reports
// when it changed, to its value.
func declaredInputs(spec events.RunSpec, cells []planner.Cell, getenv func(string) string) (map[string]string, error) {
	in := map[string]string{}
	var ids []string
	arms := map[string]bool{}
	for _, c := range cells {
		ids = append(ids, c.ID)
		in["task "+c.Task.Name+" revision"] = c.Task.Revision
		if arms[c.Harness.Name] {
			continue
		}
		arms[c.Harness.Name] = true
		arm, err := harness.For(c.Harness)
		if err != nil {
			return nil, err
		}
		files, err := arm.IdentityInputs(spec.BaseDir, getenv)
		if err != nil {
			return nil, fmt.Errorf("harness %s: %w", c.Harness.Name, err)
		}
		for _, f := range files {
			sum, err := harness.HashInput(f.Path)
			if err != nil {
				return nil, fmt.Errorf("harness %s: %s: %w", c.Harness.Name, f.Name, err)
			}
			in["harness "+c.Harness.Name+" "+f.Name] = sum
		}
	}
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintln(h, id)
	}
	in["cells (tasks × harnesses × models × repeats)"] = hex.EncodeToString(h.Sum(nil))
	// Who the agents run as changes what they can do; sealed, the
	// default, is no input, so the identity of a run recorded before
	// --agent-user existed is unchanged.
	if m := harness.AgentUserMode(spec); m != harness.AgentUserSealed {
		in["agent user (--agent-user)"] = m
	}
	return in, nil
}

// Changes names the declared inputs that differ between was and now
// ("task x revision changed (was …, now …)", "… is new", "… is gone"),
// sorted.
func Changes(was, now map[string]string) []string {
	var diffs []string
	for k, v := range now {
		if old, ok := was[k]; !ok {
			diffs = append(diffs, k+" is new")
		} else if old != v {
			diffs = append(diffs, fmt.Sprintf("%s changed (was %.12s, now %.12s)", k, old, v))
		}
	}
	for k := range was {
		if _, ok := now[k]; !ok {
			diffs = append(diffs, k+" is gone")
		}
	}
	sort.Strings(diffs)
	return diffs
}

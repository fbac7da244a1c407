package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/services/planner"
)

// Identity is a run's identity: the hash of its declared inputs, and the
// inputs by the name resume reports when one changed ("task fix-sum
// revision", "harness agent:x content", "cells (tasks × harnesses ×
// models × repeats)").
type Identity struct {
	Hash   string
	Inputs map[string]string
}

// Identify hashes a run's declared inputs: for every cell (in matrix
// order) its task and task revision, harness reference and the content of
// an agent harness's directory, model and repeat. Output paths, the
// machine and the time are no part of it: a resumed run is the same run
// wherever it continues.
func Identify(spec events.RunSpec, cells []planner.Cell) (Identity, error) {
	inputs, err := declaredInputs(spec, cells)
	if err != nil {
		return Identity{}, err
	}
	h := sha256.New()
	keys := make([]string, 0, len(inputs))
	for k := range inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, inputs[k])
	}
	return Identity{Hash: "sha256:" + hex.EncodeToString(h.Sum(nil)), Inputs: inputs}, nil
}

// declaredInputs maps each declared input, by the name resume reports
// when it changed, to its value.
func declaredInputs(spec events.RunSpec, cells []planner.Cell) (map[string]string, error) {
	in := map[string]string{}
	var ids []string
	for _, c := range cells {
		ids = append(ids, c.ID)
		in["task "+c.Task.Name+" revision"] = c.Task.Revision
		if c.Harness.Kind == harness.Agent {
			sum, err := dirHash(spec.BaseDir, c.Harness.Arg)
			if err != nil {
				return nil, fmt.Errorf("harness %s: %w", c.Harness.Name, err)
			}
			in["harness "+c.Harness.Name+" content"] = sum
		}
	}
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintln(h, id)
	}
	in["cells (tasks × harnesses × models × repeats)"] = hex.EncodeToString(h.Sum(nil))
	return in, nil
}

// dirHash hashes the names and contents of the regular files directly in
// dir (relative to base).
func dirHash(base, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(base, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
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

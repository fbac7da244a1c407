package scalerig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// removedInputs is a run's inputs taken away: its tasks root and agent
// directory, planned from dir, were renamed away at removed, after the
// run's first CellPlanned (stamped planned).
type removedInputs struct {
	dir              string
	planned, removed time.Time
}

// inputHider takes each run's inputs away once the planner has read them,
// so that no worker can read a task or the agent at its planned path and
// every worker loads them from the trees the planner stored. Each run is
// planned from a directory of its own under root (root/<name>/tasks and
// root/<name>/agent), which only its driver and the planner are told of.
// The planner reads and stores every tree of a run before it publishes
// the run's CellPlanned events, and publishes the launch jobs only after
// all of them and RunPlanned are stored; so at a run's first CellPlanned
// the hider renames the run's directory into gone (a rename: the planned
// paths vanish at once) and records when. The rename races the planner's
// publishing of the jobs; where the workers run with the inputs hidden
// from their view (Config.HideInputs) that race is harmless, elsewhere
// whether every launch job was taken after the rename is checked from
// the launchers' claim lines (rig.check), never assumed.
type inputHider struct {
	root, gone string
	nc         *nats.Conn

	mu      sync.Mutex
	removed map[string]removedInputs // run id →
	errs    []string
}

// hideInputs starts the hider of the inputs under root on the server at
// url (a NATS node no fault kills). It subscribes to the CellPlanned
// events as they are published (a core subscription sees a message as the
// server takes it, before the stream has stored it).
func hideInputs(url, root string) (*inputHider, error) {
	h := &inputHider{root: root, gone: root + ".planned", removed: map[string]removedInputs{}}
	if err := os.MkdirAll(h.gone, 0o755); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, nats.Name("scale rig: inputs"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("scalerig: connect %s: %w", url, err)
	}
	if _, err := nc.Subscribe(events.TypeFilter(events.CellPlanned), h.planned); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	h.nc = nc
	return h, nil
}

func (h *inputHider) close() { h.nc.Close() }

// planned renames away the inputs of the run of a CellPlanned message.
func (h *inputHider) planned(m *nats.Msg) {
	var e events.Envelope
	var d events.CellPlannedData
	if err := json.Unmarshal(m.Data, &e); err != nil {
		return
	}
	if err := events.Into(e, &d); err != nil {
		return
	}
	rel, err := filepath.Rel(h.root, d.TaskDir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return // not a run of the rig's
	}
	name, _, _ := strings.Cut(rel, string(filepath.Separator))
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.removed[e.RunID]; ok {
		return
	}
	dir := filepath.Join(h.root, name)
	if err := os.Rename(dir, filepath.Join(h.gone, name)); err != nil {
		h.errs = append(h.errs, fmt.Sprintf("run %s: take its inputs away: %v", e.RunID, err))
		return
	}
	h.removed[e.RunID] = removedInputs{dir: dir, planned: e.At, removed: time.Now()}
}

// get returns what was taken away of run.
func (h *inputHider) get(run string) (removedInputs, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ri, ok := h.removed[run]
	return ri, ok
}

// problems are the renames that failed.
func (h *inputHider) problems() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}

// checkNoSharing fills rep with what shows the nodes shared nothing but
// NATS: every run's inputs were taken away after planning and, unless
// they were hidden from every worker's view, before any of its launch
// jobs was taken; each worker that took a cell holds the
// cell's trees in its own cache (so it fetched them: it could read them
// nowhere else); the bucket holds each tree once; and, with StoreOutputs,
// every cell's verdict names a stored output object and the run's driver
// wrote that output under its --output-dir.
func (r *rig) checkNoSharing(ctx context.Context, rep *Report, b *bus.Bus, st *logStats, subs []*submission) {
	problem := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	rep.Problems = append(rep.Problems, r.hider.problems()...)
	var lags []time.Duration
	for _, s := range subs {
		if s.runID == "" {
			continue
		}
		ri, ok := r.hider.get(s.runID)
		if !ok {
			problem("run %s: its inputs were never taken away after planning", s.runID)
			continue
		}
		rep.InputsRemoved++
		lags = append(lags, ri.removed.Sub(ri.planned))
	}
	rep.RemoveP50, rep.RemoveMax = percentile(lags, 0.5), percentile(lags, 1)

	claims, _ := readClaims(r.logs, "w") // its error is check's
	var early, noTree []string
	for _, c := range claims {
		if ri, ok := r.hider.get(c.run); ok && c.at.After(ri.removed) {
			rep.ClaimsAfterRemoval++
		} else if ok {
			early = append(early, fmt.Sprintf("%s took run %s cell %s %.3f s before its inputs were taken away", c.worker, c.run, c.cell, ri.removed.Sub(c.at).Seconds()))
		}
		var cl *cellLog
		if rl := st.runs[c.run]; rl != nil {
			cl = rl.byCell[c.cell]
		}
		if cl == nil || cl.revision == "" {
			noTree = append(noTree, fmt.Sprintf("run %s cell %s: no CellPlanned", c.run, c.cell))
			continue
		}
		cache := filepath.Join(r.home(c.worker), "trees")
		missing := ""
		for _, d := range append([]string{cl.revision}, cl.trees...) {
			if fi, err := os.Stat(filepath.Join(cache, d)); err != nil || !fi.IsDir() {
				missing = d
				break
			}
		}
		if missing != "" {
			noTree = append(noTree, fmt.Sprintf("%s took run %s cell %s and has no tree %.12s in its cache", c.worker, c.run, c.cell, missing))
			continue
		}
		rep.ClaimsWithTrees++
	}
	if r.hidden {
		// No worker's view ever held the inputs: a job taken before
		// the rename could not read them either.
		rep.ClaimsBeforeRemoval = len(early)
	} else {
		some(rep, "launch jobs taken before their run's inputs were taken away", early)
	}
	some(rep, "launch jobs whose worker holds not all of the cell's trees", noTree)
	homes, _ := filepath.Glob(filepath.Join(r.cfg.Dir, "home", "w*", "trees"))
	for _, h := range homes {
		ents, _ := os.ReadDir(h)
		n := 0
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				n++
			}
		}
		rep.TreesFetched += n
		if n > 0 {
			rep.FetchingWorkers++
		}
	}

	store, err := trees.Lookup(ctx, b)
	if err != nil {
		problem("the %s bucket: %v", trees.Bucket, err)
		return
	}
	infos, err := store.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		problem("list the %s bucket: %v", trees.Bucket, err)
	}
	for _, in := range infos {
		if strings.HasPrefix(in.Name, "cell/") {
			rep.OutputObjects++
			rep.OutputBytes += int64(in.Size)
		} else {
			rep.TreesStored++
		}
	}
	if !r.cfg.StoreOutputs {
		return
	}
	var unnamed, unwritten []string
	for _, s := range subs {
		rl := st.runs[s.runID]
		if s.runID == "" || rl == nil {
			continue
		}
		for id, c := range rl.byCell {
			switch {
			case c.verdict && c.output:
				rep.OutputsNamed++
			case c.verdict:
				unnamed = append(unnamed, fmt.Sprintf("run %s cell %s", s.runID, id))
			}
		}
		rows, err := artifactRows(s.artifact)
		if err != nil {
			continue // check's problem
		}
		for _, row := range rows {
			in := strings.HasPrefix(row.OutputDir, s.out+string(filepath.Separator))
			if _, err := os.Stat(filepath.Join(row.OutputDir, "logs", "verifier", "reward.txt")); err != nil || !in {
				unwritten = append(unwritten, fmt.Sprintf("run %s cell %s: %s (under %s: %v)", s.runID, row.CellID, row.OutputDir, s.out, in))
				continue
			}
			rep.OutputsWritten++
		}
	}
	some(rep, "verdicts name no stored output", unnamed)
	some(rep, "cells' outputs are not in their driver's --output-dir", unwritten)
}

// some adds one problem for list, when it is not empty: how many, and
// the first.
func some(rep *Report, what string, list []string) {
	if len(list) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d %s, the first: %s", len(list), what, list[0]))
	}
}

package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// RunsPage is the JSON of /runs.json: one page of the run index, newest
// first, after the status and harness filters.
type RunsPage struct {
	Runs   []RunItem `json:"runs"`
	Paging Paging    `json:"paging"`
	// Statuses and Harnesses are the filter values present in the index.
	Statuses  []string `json:"statuses"`
	Harnesses []string `json:"harnesses"`
}

// RunItem is one run of the index with its live state.
type RunItem struct {
	bus.RunRecord
	// Stale is true when the run has not finished and no proctor process
	// serves this store: the process that ran it died.
	Stale bool `json:"stale,omitempty"`
	// Pending is true while the run's events are still being read: its
	// states and progress are the index record's until they are.
	Pending bool `json:"pending,omitempty"`
	// States counts cells by outcome, running or queued (from the log).
	States map[string]int `json:"states,omitempty"`
	// Progress is per harness, with its pass rate over scored cells.
	Progress []projection.HarnessProgress `json:"progress,omitempty"`
}

func terminal(status string) bool {
	return bus.TerminalStatus(status)
}

func (s *Server) runsJSON(w http.ResponseWriter, r *http.Request) {
	v, err := s.runs(r.Context(), r)
	writeJSON(w, v, err)
}

func (s *Server) runs(ctx context.Context, r *http.Request) (*RunsPage, error) {
	lg, err := s.log(ctx)
	if err != nil {
		return nil, settle(lg, err)
	}
	recs, err := lg.Bus.ListRuns(ctx)
	if err != nil {
		return nil, settle(lg, err)
	}
	status, harness := r.URL.Query().Get("status"), r.URL.Query().Get("harness")
	statuses, harnesses := map[string]bool{}, map[string]bool{}
	var keep []bus.RunRecord
	for _, rec := range recs {
		st := rec.Status
		statuses[st] = true
		for _, h := range rec.Spec.Harnesses {
			harnesses[h] = true
		}
		if (status == "" || status == st) && (harness == "" || slices.Contains(rec.Spec.Harnesses, harness)) {
			keep = append(keep, rec)
		}
	}
	pg, lo, hi := pageOf(r, "page", len(keep))
	out := &RunsPage{Runs: []RunItem{}, Paging: pg, Statuses: append([]string{}, slices.Sorted(maps.Keys(statuses))...),
		Harnesses: append([]string{}, slices.Sorted(maps.Keys(harnesses))...)}
	for _, rec := range keep[lo:hi] {
		it := RunItem{RunRecord: rec, States: rec.Counts}
		l, err := s.lives.get(ctx, rec.ID, rec.Epoch)
		switch {
		case errors.Is(err, errPending):
			it.Pending = true
		case err != nil:
			return nil, settle(lg, err)
		default:
			l.mu.Lock()
			it.Progress = l.p.Progress()
			if l.p.Planned() {
				it.States = l.p.States()
			}
			it.Stale = stale(lg, l, rec)
			l.mu.Unlock()
		}
		out.Runs = append(out.Runs, it)
	}
	return out, nil
}

// stale reports whether a run that has not finished has no process left
// to finish it: this process serves the store itself (lg) and the run's
// last event is older than that. Call with l.mu held.
func stale(lg Log, l *live, rec bus.RunRecord) bool {
	return lg.Owned && !l.p.Finished() && !terminal(rec.Status) && l.lastAt.Before(lg.Since)
}

// RunPage is the JSON of /runs/RUN.json.
type RunPage struct {
	Record   bus.RunRecord `json:"record"`
	Stale    bool          `json:"stale,omitempty"`
	Finished bool          `json:"finished"`
	// Events is the number of the run's events applied so far.
	Events   int                          `json:"events"`
	States   map[string]int               `json:"states"`
	Progress []projection.HarnessProgress `json:"progress"`
	// Harnesses in projection.HarnessOrder: the baseline, the run's order, then by name.
	Harnesses []string `json:"harnesses"`
	// Summary is the artifact's summary.per_harness without per_task (the
	// grid carries that); Comparisons is summary.comparisons.
	Summary     map[string]*HarnessView         `json:"summary"`
	Comparisons map[string]*artifact.Comparison `json:"comparisons,omitempty"`
	// ComparisonsPlain says, per compared harness, what its comparison
	// shows in one plain sentence (artifact.PlainComparison), as the
	// report says it before the statistics.
	ComparisonsPlain map[string]string `json:"comparisons_plain,omitempty"`
	Baseline         string            `json:"baseline,omitempty"`
	// SummaryPending is true while the comparisons and figures are being
	// (re)built in the background; the page asks again.
	SummaryPending bool        `json:"summary_pending"`
	Figures        []FigureRef `json:"figures"`
	// Grid is one page of tasks with every cell of each.
	Grid   []GridRow `json:"grid"`
	Paging Paging    `json:"paging"`
	// Control is the run's control state and actions (pause, cancel,
	// continue, requeue, caps).
	Control ControlView `json:"control"`
}

// HarnessView is a harness's summary without its per-task table.
type HarnessView struct {
	N          int                  `json:"n"`
	Errored    int                  `json:"errored"`
	Scored     int                  `json:"scored"`
	Passed     int                  `json:"passed"`
	PassRate   *float64             `json:"pass_rate"`
	PassRateCI *[2]float64          `json:"pass_rate_ci"`
	Cost       artifact.CostSummary `json:"cost"`
	// Suspect counts the cells whose solve left files that shadow the
	// verifier's runner or standard modules (scored as they were).
	Suspect int `json:"suspect"`
	// ClaimedButFailed counts the cells whose agent claimed success while
	// the verifier scored them below 1 (artifact.Result.Overclaimed).
	ClaimedButFailed int `json:"claimed_but_failed"`
}

// FigureRef names one SVG figure and where the viewer serves it.
type FigureRef struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	URL   string `json:"url"`
}

// GridRow is one task: its cells per harness, in repeat order.
type GridRow struct {
	Task  string                `json:"task"`
	Cells map[string][]GridCell `json:"cells"`
}

// GridCell is one cell's state (an outcome, running or queued) and reward.
type GridCell struct {
	ID     string   `json:"id"`
	State  string   `json:"state"`
	Reward *float64 `json:"reward"`
	// Suspect marks a cell with tamper findings (artifact.Result.Suspect).
	Suspect bool `json:"suspect,omitempty"`
	// ClaimedButFailed marks a cell whose agent claimed success while the
	// verifier scored it below 1 (artifact.Result.Overclaimed): ⚠️.
	ClaimedButFailed bool `json:"claimed_but_failed,omitempty"`
}

// runRecord returns the index record of a run, or the record its events
// imply; 404 when neither exists.
func runRecord(ctx context.Context, lg Log, id string) (bus.RunRecord, bool, error) {
	rec, err := lg.Bus.GetRun(ctx, id)
	if err == nil {
		return rec, true, nil
	}
	if !errors.Is(err, bus.ErrNotFound) {
		return rec, false, err
	}
	seq, err := lg.Bus.LastSeq(ctx, events.RunFilter(id))
	if err != nil {
		return rec, false, err
	}
	if seq == 0 {
		return rec, false, httpError{http.StatusNotFound, fmt.Sprintf("run %s: not in the run index and no events in the log", id)}
	}
	return bus.RunRecord{ID: id}, false, nil
}

func (s *Server) runJSON(w http.ResponseWriter, r *http.Request, id string) {
	v, err := s.run(r.Context(), r, id)
	writeJSON(w, v, err)
}

// runData is what a run page shows apart from paging and the
// background-built comparisons, computed once per projection version.
type runData struct {
	version   int
	states    map[string]int
	progress  []projection.HarnessProgress
	summary   map[string]*HarnessView
	harnesses []string
	tasks     []string
	byTask    map[string]map[string][]GridCell
}

// data returns the run's runData for the current version. Call with mu
// held.
func (l *live) data() *runData {
	if l.view != nil && l.view.version == l.version {
		return l.view
	}
	d := &runData{version: l.version, states: map[string]int{}, progress: l.p.Progress(),
		summary: map[string]*HarnessView{}, byTask: map[string]map[string][]GridCell{}}
	for _, h := range d.progress {
		for k, n := range h.States {
			d.states[k] += n
		}
	}
	rows, states := l.p.Rows()
	rows = detach(rows)
	// The per-harness summary is cheap and always current; the
	// comparisons (bootstrap) come from the last background build. While
	// the run goes it counts done cells only: a running or queued cell is
	// not missing data yet.
	var done []artifact.Result
	for i, row := range rows {
		if states[i] != projection.StateRunning && states[i] != projection.StateQueued {
			done = append(done, row)
		}
	}
	for h, hs := range artifact.Summarize(done) {
		d.summary[h] = &HarnessView{N: hs.N, Errored: hs.Errored, Scored: hs.Scored, Passed: hs.Passed,
			PassRate: hs.PassRate, PassRateCI: hs.PassRateCI, Cost: hs.Cost, Suspect: hs.Suspect, ClaimedButFailed: hs.ClaimedButFailed}
	}
	// Harness order: the baseline, the spec's (the plan's), then any
	// other by name.
	names := slices.Clone(l.p.Spec().Harnesses)
	for i, row := range rows {
		names = append(names, row.Harness)
		t := d.byTask[row.Task]
		if t == nil {
			t = map[string][]GridCell{}
			d.byTask[row.Task] = t
		}
		t[row.Harness] = append(t[row.Harness], GridCell{ID: row.CellID, State: states[i], Reward: row.Reward, Suspect: row.Suspect(), ClaimedButFailed: row.Overclaimed()})
	}
	d.harnesses = projection.HarnessOrder(l.p.Spec(), names)
	d.tasks = slices.Sorted(maps.Keys(d.byTask))
	l.view = d
	return d
}

func (s *Server) run(ctx context.Context, r *http.Request, id string) (*RunPage, error) {
	lg, err := s.log(ctx)
	if err != nil {
		return nil, settle(lg, err)
	}
	rec, indexed, err := runRecord(ctx, lg, id)
	if err != nil {
		return nil, settle(lg, err)
	}
	l, err := s.lives.get(ctx, id, rec.Epoch)
	if err != nil {
		return nil, settle(lg, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.p
	if !indexed {
		rec = p.Record()
	}
	d := l.data()
	a, figs, building := l.artifact(s.cfg.Version)
	out := &RunPage{Record: rec, Finished: p.Finished(), Events: l.version, States: d.states, Progress: d.progress,
		Summary: d.summary, Harnesses: d.harnesses, Figures: []FigureRef{}, Grid: []GridRow{},
		Baseline: p.Spec().BaselineHarness, SummaryPending: building || a == nil}
	out.Stale = stale(lg, l, rec)
	out.Control = ControlView{State: p.Control(), Allowed: s.cfg.Control}
	for _, c := range p.Controls() {
		out.Control.Actions = append(out.Control.Actions, c.String())
	}
	if a != nil {
		out.Comparisons = a.Summary.Comparisons
		for h, c := range out.Comparisons {
			if c == nil {
				continue
			}
			if out.ComparisonsPlain == nil {
				out.ComparisonsPlain = map[string]string{}
			}
			out.ComparisonsPlain[h] = artifact.PlainComparison(h, c)
		}
	}
	for _, f := range figs {
		out.Figures = append(out.Figures, FigureRef{Name: f.Name, Title: f.Title,
			URL: "/runs/" + url.PathEscape(id) + "/figures/" + f.Name})
	}
	pg, lo, hi := pageOf(r, "page", len(d.tasks))
	out.Paging = pg
	for _, t := range d.tasks[lo:hi] {
		out.Grid = append(out.Grid, GridRow{Task: t, Cells: d.byTask[t]}) // cells in cell id order
	}
	return out, nil
}

func (s *Server) figure(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("run"), r.PathValue("name")
	lg, err := s.log(r.Context())
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	rec, _, err := runRecord(r.Context(), lg, id)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	l, err := s.lives.get(r.Context(), id, rec.Epoch)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	l.mu.Lock()
	_, figs, _ := l.artifact(s.cfg.Version)
	l.mu.Unlock()
	for _, f := range figs {
		if f.Name == name {
			w.Header().Set("Content-Type", "image/svg+xml")
			w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = w.Write(f.SVG)
			return
		}
	}
	http.Error(w, "no figure "+name+" for this run (yet)", http.StatusNotFound)
}

// LiveUpdate is one Server-Sent Event ("progress") of /runs/RUN/live:
// the run's progress and the cells whose state changed since the last
// update on this stream (on the first, those that changed since the
// viewer caught up with the log; the page's JSON carries the rest).
type LiveUpdate struct {
	Status   string                       `json:"status"`
	Finished bool                         `json:"finished"`
	Events   int                          `json:"events"`
	States   map[string]int               `json:"states"`
	Progress []projection.HarnessProgress `json:"progress"`
	Cells    []GridCell                   `json:"cells"`
}

// liveEvery coalesces updates: at most one per this interval.
const liveEvery = 250 * time.Millisecond

func (s *Server) liveStream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("run")
	lg, err := s.log(ctx)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	rec, indexed, err := runRecord(ctx, lg, id)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	l, err := s.lives.get(ctx, id, rec.Epoch)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	sent, lastVer := 0, -1
	heartbeat := time.NewTicker(15 * time.Second)
	defer heartbeat.Stop()
	for {
		l.mu.Lock()
		wake := l.wake
		var u *LiveUpdate
		if l.version != lastVer {
			lastVer = l.version
			status := rec.Status
			if !indexed || l.p.Finished() {
				status = l.p.Record().Status
			}
			u = &LiveUpdate{Status: status, Finished: l.p.Finished(), Events: l.version, States: l.p.States(), Progress: l.p.Progress(), Cells: []GridCell{}}
			done := map[string]bool{}
			for _, cid := range l.changes[sent:] {
				if done[cid] {
					continue
				}
				done[cid] = true
				row, _ := l.p.Row(cid)
				u.Cells = append(u.Cells, GridCell{ID: cid, State: l.p.CellState(cid), Reward: row.Reward})
			}
			sent = len(l.changes)
		}
		l.mu.Unlock()
		if u != nil {
			data, _ := json.Marshal(u)
			if _, err := fmt.Fprintf(w, "event: progress\ndata: %s\n\n", data); err != nil {
				return
			}
			fl.Flush()
			if u.Finished {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			continue
		case <-wake:
		}
		// Coalesce a burst of events into one update.
		t := time.NewTimer(liveEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

package projection

import (
	"maps"
	"slices"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Cell states of a live projection that are not outcomes.
const (
	// StateQueued is a planned cell with no event of its own yet.
	StateQueued = "queued"
	// StateRunning is a cell whose solve began (an event beside the
	// preparation events, see Preparing) and no terminal event yet.
	StateRunning = "running"
)

// HarnessProgress is one harness's share of a run so far, as `proctor
// watch` and `proctor runs show` print it. Done cells are counted as the
// artifact counts rows (artifact.Result.Errored decides errored versus
// scored), so once the run has finished the counts equal the artifact's
// summary.per_harness.<h> n, errored, scored and passed.
type HarnessProgress struct {
	Harness string `json:"harness"`
	// Cells is the number of planned cells of the harness.
	Cells   int `json:"cells"`
	Queued  int `json:"queued"`
	Running int `json:"running"`
	// Done cells have their terminal event; after RunFinished every cell
	// is done (unfinished ones are errored rows, as in the artifact).
	Done    int `json:"done"`
	Errored int `json:"errored"`
	Scored  int `json:"scored"`
	Passed  int `json:"passed"`
	// PassRate is Passed / Scored, nil while nothing is scored.
	PassRate *float64 `json:"pass_rate"`
	// States counts the harness's cells by outcome (done cells) or by
	// StateQueued / StateRunning.
	States map[string]int `json:"states"`
}

// HarnessOrder returns names in the order a run shows its harnesses: the
// baseline harness of spec first, then the others as spec's harnesses
// list them (the plan's order, --harnesses), then any other by name.
// Names given twice are listed once.
func HarnessOrder(spec events.RunSpec, names []string) []string {
	rank := map[string]int{}
	if spec.BaselineHarness != "" {
		rank[spec.BaselineHarness] = 0
	}
	for i, h := range spec.Harnesses {
		if _, ok := rank[h]; !ok {
			rank[h] = i + 1
		}
	}
	out := slices.Compact(slices.Sorted(slices.Values(names)))
	slices.SortStableFunc(out, func(a, b string) int {
		ra, oka := rank[a]
		rb, okb := rank[b]
		switch {
		case oka && okb:
			return ra - rb
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0 // both unlisted: by name, as sorted
	})
	return out
}

// Progress returns the progress of every harness with a planned cell,
// in HarnessOrder. A cell is done once it has its terminal event
// or the run has finished; it is running once an event of its current
// attempt beside the preparation events (Preparing) arrived; otherwise it
// is queued (a cell whose image is built waits for a slot). Cells whose CellPlanned event
// is missing are left out, as Artifact leaves them out. It costs one pass
// over the cells; call it when a cell's CellState or a run-level event
// changed, not after every event.
func (p *Projector) Progress() []HarnessProgress {
	by := map[string]*HarnessProgress{}
	for _, id := range slices.Sorted(maps.Keys(p.cells)) {
		c := p.cells[id]
		if c.plan.Task == "" {
			continue
		}
		h := by[c.plan.Harness]
		if h == nil {
			h = &HarnessProgress{Harness: c.plan.Harness, States: map[string]int{}}
			by[c.plan.Harness] = h
		}
		h.Cells++
		switch {
		case p.settled(c):
			r := p.row(id)
			h.Done++
			h.States[r.Outcome]++
			if r.Errored() {
				h.Errored++
				continue
			}
			h.Scored++
			if r.Passed {
				h.Passed++
			}
		case c.active:
			h.Running++
			h.States[StateRunning]++
		default:
			h.Queued++
			h.States[StateQueued]++
		}
	}
	out := make([]HarnessProgress, 0, len(by))
	for _, name := range HarnessOrder(p.Spec(), slices.Collect(maps.Keys(by))) {
		h := by[name]
		if h.Scored > 0 {
			h.PassRate = ptr(float64(h.Passed) / float64(h.Scored))
		}
		out = append(out, *h)
	}
	return out
}

// States counts every planned cell by outcome (done cells), StateRunning
// or StateQueued; the sum over Progress's States.
func (p *Projector) States() map[string]int {
	out := map[string]int{}
	for _, h := range p.Progress() {
		for k, n := range h.States {
			out[k] += n
		}
	}
	return out
}

// Cells returns the ids of the planned cells, sorted.
func (p *Projector) Cells() []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(p.cells)) {
		if p.cells[id].plan.Task != "" {
			out = append(out, id)
		}
	}
	return out
}

// CellState is the state of one cell: its outcome once done (see
// Progress), else StateRunning or StateQueued; "" for a cell the
// projection has not seen planned.
func (p *Projector) CellState(cellID string) string {
	c := p.cells[cellID]
	switch {
	case c == nil || c.plan.Task == "":
		return ""
	case p.settled(c):
		return p.row(cellID).Outcome
	case c.active:
		return StateRunning
	}
	return StateQueued
}

// Record is the run index record the projection implies: id, status (the
// RunFinished status; StatusRunning while a planned run has no
// RunFinished, StatusRequested before planning), spec, cells, counts by
// outcome, started and finished times (RFC 3339, from RunRequested and
// RunFinished) and the planning error. Artifact and Report are left empty:
// they are where a process wrote files, which the log does not say.
func (p *Projector) Record() bus.RunRecord {
	r := bus.RunRecord{ID: p.runID, Status: bus.StatusRequested, Spec: p.Spec(), Error: p.PlanError()}
	if p.planned != nil {
		r.Status, r.Cells = bus.StatusRunning, p.planned.Cells
	}
	if p.finished != nil {
		r.Status = bus.StatusFinished
		if p.finished.Status != "" {
			r.Status = p.finished.Status
		}
		if r.Error == "" {
			r.Error = p.finished.Error
		}
	}
	if len(p.cells) > 0 {
		r.Counts = p.Counts()
	}
	if !p.startedAt.IsZero() {
		r.StartedAt = p.startedAt.UTC().Format(time.RFC3339Nano)
	}
	if !p.finishedAt.IsZero() {
		r.FinishedAt = p.finishedAt.UTC().Format(time.RFC3339Nano)
	}
	return r
}

package projection

import "github.com/proctor-eval/proctor/pkg/artifact"

// Row returns the artifact row a planned cell projects to so far, as
// Artifact would write it (a cell without a terminal event is an errored
// row); false for a cell the projection has not seen planned.
func (p *Projector) Row(cellID string) (artifact.Result, bool) {
	c := p.cells[cellID]
	if c == nil || c.plan.Task == "" {
		return artifact.Result{}, false
	}
	return p.row(cellID), true
}

// Plan returns a planned cell's CellPlanned data; false for a cell the
// projection has not seen planned.
func (p *Projector) Plan(cellID string) (PlannedCell, bool) {
	c := p.cells[cellID]
	if c == nil || c.plan.Task == "" {
		return PlannedCell{}, false
	}
	return PlannedCell{Task: c.plan.Task, Harness: c.plan.Harness, Model: c.plan.Model,
		Repeat: c.plan.Repeat, Attempt: c.attempt, OutputDir: c.plan.OutputDir}, true
}

// PlannedCell is where a cell sits in the matrix and where its files go.
type PlannedCell struct {
	Task      string `json:"task"`
	Harness   string `json:"harness"`
	Model     string `json:"model"`
	Repeat    int    `json:"repeat"`
	Attempt   int    `json:"attempt"`
	OutputDir string `json:"output_dir"`
}

// Rows returns the row and the state (as CellState gives it) of every
// planned cell, in cell id order, computing each row once.
func (p *Projector) Rows() ([]artifact.Result, []string) {
	ids := p.Cells()
	rows, states := make([]artifact.Result, 0, len(ids)), make([]string, 0, len(ids))
	for _, id := range ids {
		c, r := p.cells[id], p.row(id)
		state := r.Outcome
		switch {
		case p.settled(c):
		case c.active:
			state = StateRunning
		default:
			state = StateQueued
		}
		rows, states = append(rows, r), append(states, state)
	}
	return rows, states
}

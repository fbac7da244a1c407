package planner

import (
	"slices"
	"testing"

	"github.com/proctor-eval/proctor/pkg/task"
)

// TestDispatchOrderRoundRobin: launch jobs go round-robin over tasks in
// plan order (a's first cell, b's first, c's, a's second, ...), every
// cell once, a task with fewer cells dropping out.
func TestDispatchOrderRoundRobin(t *testing.T) {
	mk := func(name string, n int) []Cell {
		var out []Cell
		for i := 1; i <= n; i++ {
			out = append(out, Cell{ID: name + string(rune('0'+i)), Task: &task.Task{Name: name}})
		}
		return out
	}
	cells := slices.Concat(mk("a", 3), mk("b", 1), mk("c", 2))
	var got []string
	for _, c := range dispatchOrder(cells) {
		got = append(got, c.ID)
	}
	want := []string{"a1", "b1", "c1", "a2", "c2", "a3"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

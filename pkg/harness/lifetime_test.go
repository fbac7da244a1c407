package harness

import (
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/task"
)

// TestLifetime: a task container lives for its solve and verify budgets
// (every step's, for a multi-step task) plus ten minutes of slack, and
// never less than 1800 s (short budgets used to give 12 minutes; a
// multi-step task's container lived for one step's budgets only).
func TestLifetime(t *testing.T) {
	cases := []struct {
		name string
		t    task.Task
		want time.Duration
	}{
		{"short budgets", task.Task{AgentTimeoutSec: 60, VerifierTimeoutSec: 60}, 30 * time.Minute},
		{"long budgets", task.Task{AgentTimeoutSec: 3600, VerifierTimeoutSec: 600}, 80 * time.Minute},
		{"steps", task.Task{AgentTimeoutSec: 60, VerifierTimeoutSec: 60, Steps: []task.Step{
			{AgentTimeoutSec: 1800, VerifierTimeoutSec: 600}, {AgentTimeoutSec: 1800, VerifierTimeoutSec: 600},
		}}, 90 * time.Minute},
	}
	for _, c := range cases {
		if got := lifetime(&c.t); got != c.want {
			t.Errorf("%s: lifetime %s, want %s", c.name, got, c.want)
		}
	}
}

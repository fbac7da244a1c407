package harness

import (
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/task"
)

// SetBenchKill shrinks, for one test, the margin proctor gives bench past
// its hard deadline and the grace between SIGTERM and SIGKILL.
func SetBenchKill(t testing.TB, margin, grace time.Duration) {
	old := delegateTimes
	delegateTimes.benchOuterMargin, delegateTimes.benchKillGrace = margin, grace
	t.Cleanup(func() { delegateTimes = old })
}

// BenchKill are the outer margin and kill grace in force.
func BenchKill() (margin, grace time.Duration) {
	return delegateTimes.benchOuterMargin, delegateTimes.benchKillGrace
}

// BenchHardDeadline is benchHardDeadline.
func BenchHardDeadline(t *task.Task, agent, mode string) float64 {
	return benchHardDeadline(t, agent, mode)
}

// ReviewRubricError is reviewRubricError.
func ReviewRubricError(b []byte) string { return reviewRubricError(b) }

// BenchStderrReason is benchStderrReason.
func BenchStderrReason(head, tail string) string { return benchStderrReason(head, tail) }

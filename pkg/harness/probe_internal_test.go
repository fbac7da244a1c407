package harness

import (
	"reflect"
	"testing"

	"github.com/proctor-eval/proctor/pkg/task"
)

// TestProbeRuns: a single-step task is probed once; a multi-step task in
// its first step's sandbox and again at each step whose agent runs as
// another user than the step probed before, after the uploads of every
// step up to it.
func TestProbeRuns(t *testing.T) {
	if got := probeRuns(&task.Task{}, func(*task.Step) string { return "10001:10001" }); len(got) != 1 || got[0].step != nil {
		t.Fatalf("single step: %+v", got)
	}
	tk := &task.Task{Steps: []task.Step{{Name: "a"}, {Name: "b"}, {Name: "c", AgentUser: "root"}, {Name: "d", AgentUser: "root"}, {Name: "e"}}}
	sealed := probeRuns(tk, func(*task.Step) string { return "10001:10001" })
	if len(sealed) != 1 || sealed[0].step.Name != "a" {
		t.Fatalf("every step as one user: %+v", sealed)
	}
	declared := probeRuns(tk, func(s *task.Step) string {
		if s.AgentUser != "" {
			return s.AgentUser
		}
		return "10001:10001"
	})
	type run struct {
		step, user string
		upload     []string
	}
	var got []run
	for _, r := range declared {
		x := run{step: r.step.Name, user: r.user}
		for _, s := range r.upload {
			x.upload = append(x.upload, s.Name)
		}
		got = append(got, x)
	}
	want := []run{{"a", "10001:10001", []string{"a"}}, {"c", "root", []string{"b", "c"}}, {"e", "10001:10001", []string{"d", "e"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("steps as their declared users: %+v, want %+v", got, want)
	}
}

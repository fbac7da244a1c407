package harness

import (
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/task"
)

// The probe on a multi-step task: which steps it probes, and the task as
// each probed step's agent sees it.

// ProbeStep is one probed step of a multi-step task.
type ProbeStep struct {
	Name string `json:"name"`
	User string `json:"user"`
	// Uploaded are the steps whose workdir/ was uploaded (and setup.sh
	// run) before this probe, in order.
	Uploaded []string        `json:"uploaded,omitempty"`
	Report   isoprobe.Report `json:"report"`
}

// probeRuns are the probes of task t: one for a single-step task; for a
// multi-step task, one in the sandbox of its first step and one for each
// later step whose agent runs as another user (user says who) than the
// step probed before it. Every step shares the one sandbox and image, so
// what else differs between steps is what their workdir/ and setup.sh
// add: each probe comes after the uploads of every step up to its own.
// A later step that keeps the user is not probed again (its grader files
// are looked for from the first step on).
func probeRuns(t *task.Task, user func(*task.Step) string) []probeStepRun {
	if len(t.Steps) == 0 {
		return []probeStepRun{{user: user(nil)}}
	}
	var out []probeStepRun
	var pending []*task.Step
	for i := range t.Steps {
		s := &t.Steps[i]
		pending = append(pending, s)
		u := user(s)
		if i == 0 || u != out[len(out)-1].user {
			out = append(out, probeStepRun{step: s, user: u, upload: pending})
			pending = nil
		}
	}
	return out
}

// probeStepRun is one probe of probeRuns: the step (nil for a
// single-step task), its user, and the steps whose workdir/ is uploaded
// before it (those with none are skipped by the upload).
type probeStepRun struct {
	step   *task.Step
	user   string
	upload []*task.Step
}

// stepView is the task as a step's agent sees it (its instruction and
// budget), for the probe of that step.
type stepView struct {
	Env
	s *task.Step
}

func (v stepView) Task() *task.Task {
	t := *v.Env.Task()
	t.Prompt, t.InstructionFile = v.s.Prompt, v.s.InstructionFile
	t.AgentTimeoutSec, t.AgentUser = v.s.AgentTimeoutSec, v.s.AgentUser
	return &t
}

package harness

import (
	"slices"
	"sync"

	"github.com/proctor-eval/proctor/pkg/task"
)

// claudeSession carries the Claude Code CLI's session from one step of a
// multi-step cell to the next, for a step that declares
// inherit_prior_session (task.Step.InheritPriorSession): the id of the
// session the previous step's CLI ran, read from its stream's init event.
// Safe for concurrent use; one per cell (Prepare makes it).
type claudeSession struct {
	mu sync.Mutex
	id string
}

func (s *claudeSession) get() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

func (s *claudeSession) set(id string) {
	if s == nil || id == "" {
		return
	}
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
}

// sessionArgs adapts the CLI's argv to the task's steps: when a later step
// of the task continues its predecessor's session, every step keeps its
// session (no --no-session-persistence; the transcript stays in the
// agent's HOME, which the verifier never reads), and a step that inherits
// resumes the previous step's session (--resume ID), so its agent has the
// conversation of the step before, not only its files. It returns the argv
// and the id resumed ("" when none). A single-step task's argv is left as
// it is.
func sessionArgs(argv []string, t *task.Task, sess *claudeSession) ([]string, string) {
	inherits := slices.ContainsFunc(t.Steps, func(s task.Step) bool { return s.InheritPriorSession })
	if !inherits {
		return argv, ""
	}
	out := slices.DeleteFunc(slices.Clone(argv), func(a string) bool { return a == "--no-session-persistence" })
	id := ""
	if t.InheritPriorSession {
		id = sess.get()
	}
	if id != "" {
		out = append(out, "--resume", id)
	}
	return out, id
}

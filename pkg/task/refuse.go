package task

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// AgentWorkRoot is where in-container agents work (DESIGN §4): /app or a
// directory inside it.
const AgentWorkRoot = "/app"

// WorkdirAllowedForAgent reports whether an in-container agent may work in
// dir: true for /app and anything inside it (after cleaning, so /app/../root
// is refused), false for every other path, a relative path and "". The
// launcher applies the same rule to the image's WORKDIR after a build.
func WorkdirAllowedForAgent(dir string) bool {
	if !strings.HasPrefix(dir, "/") {
		return false
	}
	c := path.Clean(dir)
	return c == AgentWorkRoot || strings.HasPrefix(c, AgentWorkRoot+"/")
}

// Needs is what a harness requires of a task, decided from the task files
// alone before any build.
type Needs struct {
	// SolutionScript: the reference solution (solution/solve.sh or
	// oracle/solve.sh) is run.
	SolutionScript bool `json:"solution_script,omitempty"`
	// TestScript: the task's verifier (tests/test.sh or verifier/test.sh)
	// scores the cell.
	TestScript bool `json:"test_script,omitempty"`
	// Image: the cell runs in the task's Docker image (environment/Dockerfile
	// or docker_image).
	Image bool `json:"image,omitempty"`
	// Prompt: an agent is given the task's instruction.
	Prompt bool `json:"prompt,omitempty"`
	// AgentWorkdir: an in-container agent works in the task's working
	// directory, which must be /app or inside it.
	AgentWorkdir bool `json:"agent_workdir,omitempty"`
	// Steps: the harness runs a multi-step task's steps in order in one
	// sandbox; a harness without it refuses a task with [[steps]].
	Steps bool `json:"steps,omitempty"`
	// Compose: the harness starts a compose environment's services
	// (task.Compose) beside the task container; a harness without it
	// refuses a compose task.
	Compose bool `json:"compose,omitempty"`
}

// What each kind of harness needs (DESIGN §5). Harness names map onto these
// in HarnessNeeds.
var (
	// NeedsOracle: the reference solution in the task container, scored by
	// the task verifier.
	NeedsOracle = Needs{SolutionScript: true, TestScript: true, Image: true, Steps: true, Compose: true}
	// NeedsContainerAgent: an agent inside the task container (agent:<dir>,
	// claude-code), scored by the task verifier.
	NeedsContainerAgent = Needs{TestScript: true, Image: true, Prompt: true, AgentWorkdir: true, Steps: true, Compose: true}
	// NeedsProbe: the isolation probe runs in exactly the sandbox an agent
	// arm gets; it is not scored by the verifier.
	NeedsProbe = Needs{Image: true, AgentWorkdir: true, Compose: true}
	// NeedsCommand: a host command given the task path; it scores itself.
	NeedsCommand = Needs{}
)

// HarnessNeeds maps the harness kinds of DESIGN §5 to their needs; "agent"
// stands for every agent:<dir> harness. Coverage reports a refusal column
// per entry.
var HarnessNeeds = map[string]Needs{
	"oracle":      NeedsOracle,
	"agent":       NeedsContainerAgent,
	"claude-code": NeedsContainerAgent,
	"probe":       NeedsProbe,
	"command":     NeedsCommand,
}

// Refusal returns why a harness with needs n must refuse t, or "" when it
// can run it. A refused cell is errored (missing data) with this reason,
// never a verdict. In order: an unsupported task (a compose file proctor refuses) and a
// blocked one (a symlink leaving the tasks root) are refused by every
// harness; then a compose task for a harness that cannot start its
// services; then the missing solution script, test script, image, prompt;
// then, for in-container agents, a working directory outside /app — the
// workdir key, else the Dockerfile's final WORKDIR when the file alone
// decides it (the image's own WORKDIR is checked after the build).
//
// Unresolved env (UnresolvedEnv) is not a refusal: such a cell is errored
// with its own class (unresolved_env) before any build.
func (t *Task) Refusal(n Needs) string {
	if t.Unsupported != "" {
		return t.Unsupported
	}
	if t.Blocked != "" {
		return t.Blocked
	}
	if t.Compose != nil && !n.Compose {
		return fmt.Sprintf("compose environment (%s): this harness cannot run compose services", path.Base(t.Compose.File))
	}
	if len(t.Steps) > 0 {
		if !n.Steps {
			return fmt.Sprintf("multi-step task (%d steps): this harness cannot run steps", len(t.Steps))
		}
		if why := t.stepRefusal(n); why != "" {
			return why
		}
		n.SolutionScript, n.TestScript, n.Prompt = false, false, false
	}
	if n.SolutionScript && t.SolutionScript == "" {
		return fmt.Sprintf("no reference solution: %s is missing", t.missingLike("solve.sh"))
	}
	if n.TestScript && t.TestScript == "" {
		return fmt.Sprintf("no verifier: %s is missing", t.missingLike("test.sh"))
	}
	if n.Image && t.Dockerfile == "" && t.DockerImage == "" {
		return "no image: environment/Dockerfile is missing and no docker_image is set"
	}
	if n.Prompt && strings.TrimSpace(t.Prompt) == "" {
		if t.Layout == LayoutHarbor {
			return "no prompt: instruction.md is missing or empty"
		}
		return "no prompt: the task.md body is empty"
	}
	if n.AgentWorkdir {
		wd, from := t.Workdir, "workdir"
		if wd == "" {
			wd, from = t.DockerfileWorkdir, "environment/Dockerfile WORKDIR"
		}
		if wd != "" && !WorkdirAllowedForAgent(wd) {
			return fmt.Sprintf("working directory %s (%s) is outside /app, where in-container agents work", wd, from)
		}
	}
	return ""
}

func (t *Task) missingLike(base string) string {
	for _, m := range t.Missing {
		if strings.HasSuffix(m, "/"+base) {
			return m
		}
	}
	return base
}

// Refusals returns Refusal for every harness in needs (HarnessNeeds when
// nil), leaving out the harnesses that can run t.
func (t *Task) Refusals(needs map[string]Needs) map[string]string {
	if needs == nil {
		needs = HarnessNeeds
	}
	out := map[string]string{}
	names := make([]string, 0, len(needs))
	for h := range needs {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		if r := t.Refusal(needs[h]); r != "" {
			out[h] = r
		}
	}
	return out
}

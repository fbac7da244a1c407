package harness_test

import (
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// TestSolveUser: sealed is uid 10001 whatever the task declares; task is
// the declared [agent].user, else the image's USER, else root, each with
// where it came from; a step's [steps.agent].user wins over the task's.
func TestSolveUser(t *testing.T) {
	sealed := events.RunSpec{}
	taskMode := events.RunSpec{AgentUser: harness.AgentUserTask}
	declared := harnesstest.Task(t, "declared", harnesstest.Files{
		"task.toml": "version = \"1.0\"\n[agent]\nuser = \"agent\"\ntimeout_sec = 30\n",
	})
	plain := harnesstest.Task(t, "plain", nil)
	steps := harnesstest.Task(t, "steps", harnesstest.Files{
		"task.toml": "version = \"1.1\"\n[agent]\nuser = \"agent\"\n" +
			"[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n[steps.agent]\nuser = \"root\"\n",
		"instruction.md":              "",
		"steps/one/instruction.md":    "one\n",
		"steps/one/tests/test.sh":     "echo 1 > /logs/verifier/reward.txt\n",
		"steps/two/instruction.md":    "two\n",
		"steps/two/tests/test.sh":     "echo 1 > /logs/verifier/reward.txt\n",
		"steps/one/solution/solve.sh": "true\n",
		"steps/two/solution/solve.sh": "true\n",
	})
	imgUser := sandbox.ImageInfo{User: "app"}
	for _, c := range []struct {
		name       string
		spec       events.RunSpec
		t          *task.Task
		img        sandbox.ImageInfo
		user, from string
	}{
		{"sealed ignores the declared user", sealed, declared, imgUser, harness.AgentUser, "sealed"},
		{"sealed ignores the image's USER", sealed, plain, imgUser, harness.AgentUser, "sealed"},
		{"task: declared user", taskMode, declared, imgUser, "agent", "agent.user"},
		{"task: the image's USER", taskMode, plain, imgUser, "app", "the image's USER"},
		{"task: root when nothing is set", taskMode, plain, sandbox.ImageInfo{}, "0", "root: the image sets no USER"},
		{"task: step one keeps the task's", taskMode, stepView(steps, 0), sandbox.ImageInfo{}, "agent", "agent.user"},
		{"task: step two declares root", taskMode, stepView(steps, 1), sandbox.ImageInfo{}, "root", "agent.user"},
	} {
		u, from := harness.SolveUser(c.spec, c.t, c.img)
		if u != c.user || from != c.from {
			t.Errorf("%s: SolveUser = %q (%s), want %q (%s)", c.name, u, from, c.user, c.from)
		}
	}
}

// stepView is t as its step i's solve sees it (the launcher's stepTask,
// for the user).
func stepView(t *task.Task, i int) *task.Task {
	v := *t
	v.AgentUser = t.Steps[i].AgentUser
	return &v
}

// TestParseAgentUser: the two modes, "" as sealed, anything else an error
// naming both.
func TestParseAgentUser(t *testing.T) {
	for in, want := range map[string]string{"": "sealed", "sealed": "sealed", "task": "task"} {
		if got, err := harness.ParseAgentUser(in); err != nil || got != want {
			t.Errorf("ParseAgentUser(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := harness.ParseAgentUser("root")
	if err == nil || !strings.Contains(err.Error(), "sealed") || !strings.Contains(err.Error(), "task") {
		t.Errorf("ParseAgentUser(root) = %v, want an error naming sealed and task", err)
	}
}

// TestRefusalInUnderTaskUser: a working directory the sealed rule refuses
// because the agent would own it (/home, /var, /etc/app, /usr/src/app) runs
// under --agent-user task, where nothing is chowned; proctor's own
// directories and / stay refused under both; arms that run no
// in-container agent are unchanged.
func TestRefusalInUnderTaskUser(t *testing.T) {
	taskMode := events.RunSpec{AgentUser: harness.AgentUserTask}
	for _, c := range []struct {
		workdir      string
		sealed, task bool // refused
	}{
		{"/home", true, false},
		{"/usr/src/app", true, false},
		{"/var", true, false},
		{"/etc/app", true, false},
		{"/app", false, false},
		{"/", true, true},
		{"/tests", true, true},
		{"/logs/agent/x", true, true},
		{"/proc/1", true, true},
	} {
		tk := harnesstest.Task(t, "wd", harnesstest.Files{
			"task.toml": "version = \"1.0\"\n[environment]\nworkdir = \"" + c.workdir + "\"\n",
		})
		for _, h := range []string{"agent:a", "docker-claude", "docker-probe"} {
			r, err := harness.Parse(h)
			if err != nil {
				t.Fatal(err)
			}
			_, sealedWhy := r.RefusalIn(events.RunSpec{}, tk)
			_, taskWhy := r.RefusalIn(taskMode, tk)
			if (sealedWhy != "") != c.sealed || (taskWhy != "") != c.task {
				t.Errorf("%s %s: refused sealed %q, task %q; want refused sealed %v, task %v", h, c.workdir, sealedWhy, taskWhy, c.sealed, c.task)
			}
			if _, why := r.Refusal(tk); why != sealedWhy {
				t.Errorf("%s %s: Refusal %q differs from RefusalIn sealed %q", h, c.workdir, why, sealedWhy)
			}
		}
	}
}

// TestUserMismatches: a run warns when an arm compared with the baseline
// runs its agent as another user (a delegated Harbor arm, always the
// task's, against docker-claude under sealed; a host command); arms of
// one mode, the setup checks and a run without a baseline give none.
func TestUserMismatches(t *testing.T) {
	spec := func(mode, base string, hs ...string) events.RunSpec {
		return events.RunSpec{AgentUser: mode, BaselineHarness: base, Harnesses: hs}
	}
	for _, c := range []struct {
		name string
		spec events.RunSpec
		want []string // harness names warned about
	}{
		{"one mode", spec("", "docker-claude", "docker-claude", "agent:a", "oracle", "docker-probe"), nil},
		{"no baseline", spec("", "", "docker-claude", "claude-code"), nil},
		{"harbor against sealed", spec("", "docker-claude", "docker-claude", "claude-code"), []string{"claude-code"}},
		{"harbor against task", spec("task", "docker-claude", "docker-claude", "claude-code"), nil},
		{"host command", spec("task", "agent:a", "agent:a", "command:true"), []string{"command:true"}},
	} {
		got := harness.UserMismatches(c.spec)
		if len(got) != len(c.want) {
			t.Errorf("%s: %d warnings %q, want %d (%v)", c.name, len(got), got, len(c.want), c.want)
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(got[i], "harness "+w+" ") || !strings.Contains(got[i], c.spec.BaselineHarness) {
				t.Errorf("%s: warning %q does not name %s and the baseline %s", c.name, got[i], w, c.spec.BaselineHarness)
			}
		}
	}
}

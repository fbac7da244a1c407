package sandboxfake_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxtest"
)

// fixture plants the ability checks' state in the fake's model.
type fixture struct{ d *sandboxfake.Driver }

func (f fixture) Plant(_ context.Context, h *sandbox.Handle, entries []sandboxtest.Entry) error {
	s := f.d.Sandbox(h)
	for _, e := range entries {
		switch {
		case e.Link != "":
			s.Put(e.Path, sandboxfake.Symlink(e.Path, e.Link))
		case e.Kind == "dir":
			s.Mkdir(e.Path)
		case e.Kind == "fifo":
			s.Put(e.Path, sandboxfake.Special(e.Path, "fifo"))
		case e.Kind == "device":
			s.Put(e.Path, sandboxfake.Special(e.Path, "character device"))
		case e.Size > 0:
			s.Put(e.Path, sandbox.FileResult{Data: make([]byte, e.Size)})
		case e.Kind == "":
			s.Put(e.Path, sandboxfake.Regular(e.Data))
		default:
			return fmt.Errorf("kind %q", e.Kind)
		}
	}
	return nil
}

func (f fixture) Spawn(_ context.Context, h *sandbox.Handle, user string, n int) (int, error) {
	started := 0
	for i := 0; i < n; i++ {
		if f.d.Sandbox(h).Spawn(user, "sleep 100000", "", "") == 0 {
			break
		}
		started++
	}
	return started, nil
}

func (f fixture) Running(_ context.Context, h *sandbox.Handle, user string) (int, error) {
	n := 0
	for _, p := range f.d.Sandbox(h).Running() {
		if p.User == user {
			n++
		}
	}
	return n, nil
}

func (f fixture) Writer(_ context.Context, h *sandbox.Handle, user, file string) error {
	if f.d.Sandbox(h).Spawn(user, "writer", file, "x") == 0 {
		return errors.New("no process could start")
	}
	return nil
}

// TestAbilities runs the sandbox conformance suite's ability checks
// against the fake's model, with a pids limit like the Docker driver's.
func TestAbilities(t *testing.T) {
	d := &sandboxfake.Driver{HandleLimits: sandbox.Limits{PidsLimit: 64}}
	sandboxtest.Abilities(t, d, sandbox.Spec{RunID: "fake-run", CellID: "c"}, fixture{d})
}

// TestOffAbility: an ability switched off is not declared and its method
// fails naming it; Plain declares nothing.
func TestOffAbility(t *testing.T) {
	d := &sandboxfake.Driver{Off: []sandbox.Ability{sandbox.AbilityProcessKiller}}
	if got := sandbox.AbilitiesOf(d); len(got) != len(sandbox.AllAbilities())-2 || strings.Contains(fmt.Sprint(got), "ProcessKiller") {
		t.Errorf("declared %v", got)
	}
	if err := d.KillAll(context.Background(), &sandbox.Handle{ID: "x"}, "1"); !errors.Is(err, sandboxfake.ErrOff) || !strings.Contains(err.Error(), "ProcessKiller") {
		t.Errorf("KillAll switched off: %v", err)
	}
	if got := sandbox.AbilitiesOf(sandboxfake.Plain{D: d}); got != nil {
		t.Errorf("Plain declares %v", got)
	}
}

// TestScriptsModelASolve: a command's Leaves outlive it as its user, a
// KillAll of that user ends them (and not root's) after the command in
// the call log, an Answer changes the model (a removed link) and writes
// the output, a Duration over the timeout is a timeout, and a writer the
// agent left changes the reward file before each read of a sandbox that
// was not frozen.
func TestScriptsModelASolve(t *testing.T) {
	ctx := context.Background()
	d := &sandboxfake.Driver{Scripts: []sandboxfake.Script{
		{Match: "agent.sh", Leaves: []string{"server", "server"}, Files: map[string]sandbox.FileResult{
			"/app/answer": sandboxfake.Symlink("/app/answer", "/tests/expected"),
		}},
		{Match: "find", Answer: func(s *sandboxfake.Sandbox, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
			for l, target := range s.Links() {
				if strings.HasPrefix(target, "/tests/") {
					s.Remove(l)
					fmt.Fprintf(spec.Stdout, "%s -> %s\n", l, target)
				}
			}
			return sandbox.ExecResult{}, nil
		}},
		{Match: "slow", Duration: time.Hour},
	}}
	h, err := d.Start(ctx, sandbox.Spec{RunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	s := d.Sandbox(h)
	s.Spawn("", "root's", "", "")
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"bash", "agent.sh"}, User: "10001:10001"}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Running()); n != 3 {
		t.Fatalf("%d processes running after the agent, want its 2 and root's", n)
	}
	if err := d.KillAll(ctx, h, "10001:10001"); err != nil {
		t.Fatal(err)
	}
	calls := d.Calls()
	for _, p := range s.Procs() {
		switch {
		case p.User == "10001:10001" && (p.Running() || calls[p.Killed].Op != "KillAll" || p.Killed < p.Started || calls[p.Started].Op != "Exec"):
			t.Errorf("the agent's %+v: not killed by the KillAll after its exec", p)
		case p.User == "" && !p.Running():
			t.Errorf("root's process was killed by the agent's KillAll: %+v", p)
		}
	}
	var out strings.Builder
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"find", "/app"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "/app/answer -> /tests/expected\n" || len(s.Links()) != 0 {
		t.Errorf("the answer printed %q and left %v", out.String(), s.Links())
	}
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"slow"}, Timeout: time.Second}); err != nil || !res.TimedOut || res.ExitCode != sandbox.TimeoutExitCode {
		t.Errorf("a command over its timeout: %+v %v", res, err)
	}
	s.Put("/logs/verifier/reward.txt", sandboxfake.Regular("1\n"))
	s.Spawn("10001:10001", "rewriter", "/logs/verifier/reward.txt", "0")
	if b, err := d.ReadFile(ctx, h, "/logs/verifier/reward.txt", 64); err != nil || string(b) == "1\n" {
		t.Errorf("a reward read while the agent's writer runs: %q %v, want it changed", b, err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if len(s.Running()) != 0 {
		t.Errorf("processes running after Destroy: %+v", s.Running())
	}
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Errorf("Exec after Destroy: %v", err)
	}
}

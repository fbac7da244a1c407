package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
)

// hostileHost is a host agent that cheats: it writes outside its
// workspace, plants a link to the graders and a fifo in it, and leaves a
// process running that left its process group.
type hostileHost struct {
	marker string
	out    bytes.Buffer
	ws     string
}

func (h *hostileHost) Stage(_ context.Context, u *harness.HostRun) error {
	h.ws = u.Workspace
	return nil
}

func (h *hostileHost) Command(context.Context, *harness.HostRun) (sandbox.ExecSpec, error) {
	script := `id -u; pwd; echo "HOME=$HOME"; env | cut -d= -f1 | sort | tr '\n' ' '; echo
echo hello > out.txt
ln -s /tests/test.sh leak
mkfifo pipe
echo 1 > ../escape 2>/dev/null && echo "wrote outside"
setsid sh -c 'exec -a ` + h.marker + ` sleep 300' > /dev/null 2>&1 < /dev/null &
echo done`
	return sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Env: map[string]string{"ARM_VAR": "1"}, Timeout: time.Minute, Stdout: &h.out}, nil
}

func (h *hostileHost) Ended(sandbox.ExecResult) {}

// TestRunUntrustedHost plays a cheating host agent beside a fake task
// container: it ran in a proctor-run-* workspace holding the container's
// tree, with the allowlisted environment and its scratch HOME, as the
// dedicated user when proctor is root; after it, the process it left is
// gone, the fifo is not copied back, the container's tree was emptied,
// then the workspace copied in, then grader links removed, in that
// order; and the row states what the host cannot seal.
func TestRunUntrustedHost(t *testing.T) {
	d := &sandboxfake.Driver{
		Files:   map[string]sandbox.FileResult{"/app/sum.sh": sandboxfake.Regular("echo 0\n")},
		Scripts: []sandboxfake.Script{{Match: "test -d", Exit: 1}},
	}
	tk := harnesstest.Task(t, "host-owner", nil)
	env := harnesstest.NewEnv(t, tk, "docker-claude-host", d)
	env.H = &process.Driver{Host: true}
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{RunID: "run1", Workdir: "/app"})
	if err != nil {
		t.Fatal(err)
	}
	arm := &hostileHost{marker: fmt.Sprintf("proctor-host-owner-%d", os.Getpid())}
	r, err := harness.RunUntrustedHost(ctx, env, harness.Placement{Driver: d, Workdir: "/app"}, h, arm)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent output:\n%s\nisolation %v", arm.out.String(), r.Isolation)
	lines := strings.Split(arm.out.String(), "\n")
	if len(lines) < 4 || !strings.Contains(lines[1], harness.HostTreePrefix) || !strings.HasSuffix(lines[1], "/workspace") || !strings.HasPrefix(lines[2], "HOME="+strings.TrimSuffix(lines[1], "workspace")+"home") {
		t.Fatalf("the agent's output:\n%s", arm.out.String())
	}
	names := strings.Fields(lines[3])
	for _, n := range names {
		if !slices.Contains([]string{"ARM_VAR", "HOME", "CLAUDE_CONFIG_DIR", "TMPDIR", "PATH", "LANG", "LC_ALL", "TZ", "PWD", "SHLVL", "_", "OLDPWD"}, n) {
			t.Errorf("the host agent got %s, which is not allowlisted (%v)", n, names)
		}
	}
	if os.Geteuid() == 0 {
		if lines[0] == "0" || strings.Contains(arm.out.String(), "wrote outside") {
			t.Errorf("as root, the agent ran as uid %s and could write its tree's root:\n%s", lines[0], arm.out.String())
		}
	}
	iso := r.Isolation
	if iso["agent_location"] != "host" || iso["host_open"] == nil || iso["process_group"] != true {
		t.Errorf("isolation %v", iso)
	}
	if cb, _ := iso["copied_back"].(map[string]any); cb["left_out"] != 1 {
		t.Errorf("the fifo was not left out of the copy back: %v", iso["copied_back"])
	}
	if iso["leftover_kill"] != "process group" && lingering(t, arm.marker) != 0 {
		t.Errorf("the process the agent left runs on (leftover_kill %v)", iso["leftover_kill"])
	}
	if _, err := os.Stat(arm.ws); err == nil {
		t.Errorf("the scratch tree %s is left", arm.ws)
	}
	// The container: emptied, then the workspace copied in, then the
	// grader links removed, in that order.
	var order []string
	for _, c := range d.Calls() {
		cmd := strings.Join(c.Cmd, " ")
		switch {
		case c.Op == "Exec" && strings.HasPrefix(cmd, "find /app -mindepth 1 -maxdepth 1 -exec rm"):
			order = append(order, "empty")
		case c.Op == "CopyIn" && c.Path == "/app":
			order = append(order, "copy back")
		case c.Op == "Exec" && strings.Contains(cmd, "-type l"):
			order = append(order, "grader links")
		}
	}
	if !slices.Equal(order, []string{"empty", "copy back", "grader links"}) {
		t.Errorf("the container's epilogue: %v", order)
	}
}

// lingering counts the host processes whose command line starts with
// name.
func lingering(t *testing.T, name string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.HasPrefix(b, []byte(name)) {
			n++
		}
	}
	return n
}

package process

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// A command that escapes its process group (setsid) is still killed by
// KillSandbox through the sandbox's cgroup, and a command runs as the numeric
// user it is given.
func TestKillAllReachesWhatLeftTheGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as another uid and making a cgroup need root")
	}
	d := &Driver{Prefix: "proctor-run-", Cgroup: true}
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	if !strings.HasPrefix(filepath.Base(h.State["root"]), "proctor-run-") {
		t.Errorf("tree %s", h.State["root"])
	}
	cg := h.State["cgroup"]
	if cg == "" {
		t.Skip("this host gives proctor no cgroup v2")
	}
	if err := os.Chmod(h.State["root"], 0o777); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{User: "10001:10001", Stdout: &out, Timeout: 30 * time.Second,
		Cmd: []string{"sh", "-c", "id -u; setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $!"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	f := strings.Fields(out.String())
	if len(f) != 2 || f[0] != "10001" {
		t.Fatalf("output %q: want uid 10001 and the sleeper's pid", out.String())
	}
	pid, _ := strconv.Atoi(f[1])
	if _, err := os.Stat("/proc/" + f[1]); err != nil {
		t.Fatalf("the setsid sleeper %d is gone before KillSandbox: the test proves nothing", pid)
	}
	if err := d.KillSandbox(ctx, h, "10001"); err != nil {
		t.Fatal(err)
	}
	if pids, _ := cgroupProcs(cg); len(pids) != 0 {
		t.Errorf("left in the cgroup: %v", pids)
	}
	if b, err := os.ReadFile("/proc/" + f[1] + "/status"); err == nil && !strings.Contains(string(b), "zombie") {
		t.Errorf("the sleeper %d still runs", pid)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); err == nil {
		t.Errorf("cgroup %s left", cg)
	}
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{User: "alice", Cmd: []string{"true"}}); err == nil {
		t.Error("a user name was accepted")
	}
}

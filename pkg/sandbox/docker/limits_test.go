package docker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/internal/testutil"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// startWith starts a sandbox of testImage from a driver with the given
// default limits, destroyed at the end of the test.
func startWith(t *testing.T, defaults sandbox.Limits, spec sandbox.Spec) (*Driver, *sandbox.Handle) {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, testImage)
	d, err := New(Options{Client: cli, Defaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Image == "" {
		spec.Image = testImage
	}
	h, err := d.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	return d, h
}

func inspect(t *testing.T, d *Driver, h *sandbox.Handle) container.InspectResponse {
	t.Helper()
	ins, err := d.cli.ContainerInspect(context.Background(), h.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

// TestDockerLimitsDefaultsAndDeclared: a sandbox whose task declares
// nothing gets the default memory (swap limited to the same) and pids
// limits; declared cpus and memory win; -1 defaults mean no limit; every
// container has no-new-privileges.
func TestDockerLimitsDefaultsAndDeclared(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		defaults sandbox.Limits
		spec     sandbox.Spec
		want     sandbox.Limits
	}{
		{"defaults", sandbox.Limits{}, sandbox.Spec{}, sandbox.Limits{MemoryMB: sandbox.DefaultMemoryMB, PidsLimit: sandbox.DefaultPidsLimit, NoNewPrivileges: true, MemorySource: "default"}},
		{"declared", sandbox.Limits{CPUs: 1}, sandbox.Spec{CPUs: 0.5, MemoryMB: 256}, sandbox.Limits{CPUs: 0.5, MemoryMB: 256, PidsLimit: sandbox.DefaultPidsLimit, NoNewPrivileges: true, MemorySource: "task", CPUsSource: "task"}},
		{"changed defaults", sandbox.Limits{CPUs: 1.5, MemoryMB: 512, PidsLimit: 64}, sandbox.Spec{}, sandbox.Limits{CPUs: 1.5, MemoryMB: 512, PidsLimit: 64, NoNewPrivileges: true, MemorySource: "default", CPUsSource: "default"}},
		{"no limits", sandbox.Limits{MemoryMB: -1, PidsLimit: -1}, sandbox.Spec{}, sandbox.Limits{NoNewPrivileges: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, h := startWith(t, c.defaults, c.spec)
			if h.Limits != c.want {
				t.Errorf("Handle.Limits %+v, want %+v", h.Limits, c.want)
			}
			hc := inspect(t, d, h).HostConfig
			var pids int64
			if hc.PidsLimit != nil {
				pids = *hc.PidsLimit
			}
			if hc.Memory != c.want.MemoryMB<<20 || hc.MemorySwap != max(hc.Memory, 0) && c.want.MemoryMB > 0 ||
				hc.NanoCPUs != int64(c.want.CPUs*1e9) || pids != c.want.PidsLimit {
				t.Errorf("engine: memory %d swap %d cpus %d pids %d, want %+v", hc.Memory, hc.MemorySwap, hc.NanoCPUs, pids, c.want)
			}
			if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
				t.Errorf("security options %v lack no-new-privileges", hc.SecurityOpt)
			}
		})
	}
}

// TestDockerForkBombHeldAtPidsLimit: an agent (uid 10001) that forks 2000
// processes is held at the pids limit, and KillAll still gets through to
// it and gives the next phase its whole budget back, although the killed
// processes stay as zombies that the pids cgroup counts.
func TestDockerForkBombHeldAtPidsLimit(t *testing.T) {
	t.Parallel()
	const limit = 200
	d, h := startWith(t, sandbox.Limits{PidsLimit: limit}, sandbox.Spec{Lifetime: 5 * time.Minute})
	ctx := context.Background()
	bomb := `i=0; while [ $i -lt 2000 ]; do sleep 300 & i=$((i+1)); echo $i > /tmp/forked; done; echo all forked`
	var out testutil.SyncBuffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", bomb}, User: "10001", Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || strings.Contains(out.String(), "all forked") {
		t.Fatalf("the bomb forked 2000 processes: %+v %q", res, out.String())
	}
	// At the limit no exec can start; KillAll gets through anyway.
	if err := d.KillAll(ctx, h, "10001"); err != nil {
		t.Fatalf("KillAll at the pids limit: %v", err)
	}
	var got testutil.SyncBuffer
	res, err = d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "cat /tmp/forked; ps=0; for p in /proc/[0-9]*; do [ \"$(stat -c %u $p 2>/dev/null)\" = 10001 ] && ! grep -q '^State:.*Z' $p/status 2>/dev/null && ps=$((ps+1)); done; echo $ps; i=0; while [ $i -lt 100 ]; do sleep 300 & i=$((i+1)); done; echo forked $i"}, Stdout: &got, Stderr: &got})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the next phase cannot run: %+v %v %q", res, err, got.String())
	}
	lines := strings.Fields(got.String())
	forked, _ := strconv.Atoi(lines[0])
	if forked == 0 || forked >= limit {
		t.Errorf("the bomb forked %d processes under a limit of %d", forked, limit)
	}
	if lines[1] != "0" {
		t.Errorf("%s processes of uid 10001 alive after KillAll", lines[1])
	}
	if !strings.Contains(got.String(), "forked 100") {
		t.Errorf("the next phase did not get its budget back: %q", got.String())
	}
	t.Logf("forked %d of 2000 under a pids limit of %d", forked, limit)
}

// TestDockerOOMKilled: a process that allocates past the memory limit is
// killed by the kernel, and OOMKills counts it (0 before).
func TestDockerOOMKilled(t *testing.T) {
	t.Parallel()
	d, h := startWith(t, sandbox.Limits{}, sandbox.Spec{MemoryMB: 32})
	ctx := context.Background()
	if n, err := d.OOMKills(ctx, h); err != nil || n != 0 {
		t.Fatalf("OOMKills before: %v %v", n, err)
	}
	// tail keeps every byte of a file without a newline in memory.
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "tail /dev/zero"}, User: "10001", Timeout: time.Minute})
	if err != nil || res.ExitCode != 137 {
		t.Fatalf("the hog: %+v %v, want exit 137 (SIGKILL)", res, err)
	}
	if n, err := d.OOMKills(ctx, h); err != nil || n != 1 {
		t.Fatalf("OOMKills after: %v %v, want 1", n, err)
	}
	// The exec inside the container reads the same counter as the host's
	// cgroup filesystem.
	byExec, err := New(Options{Client: d.Client()})
	if err != nil {
		t.Fatal(err)
	}
	byExec.cgroupRoot = ""
	if n, err := byExec.OOMKills(ctx, h); err != nil || n != 1 {
		t.Fatalf("OOMKills by exec: %v %v, want 1", n, err)
	}
	// A frozen container's counter is still read when the engine runs on
	// this machine (the verifier reads it after the freeze); by exec it
	// is an error, never a 0.
	if _, err := d.Freeze(ctx, h); err != nil {
		t.Fatal(err)
	}
	cid, _ := d.container(h)
	if hostOOMFile(d.cgroupRoot, cid) != "" {
		if n, err := d.OOMKills(ctx, h); err != nil || n != 1 {
			t.Errorf("OOMKills of the frozen container: %v %v, want 1", n, err)
		}
		// Options.CgroupRoot names the host's cgroup filesystem mounted
		// elsewhere (proctor in a container); a link stands in for the
		// mount here.
		link := filepath.Join(t.TempDir(), "host-cgroup")
		if err := os.Symlink(d.cgroupRoot, link); err != nil {
			t.Fatal(err)
		}
		viaRoot, err := New(Options{Client: d.Client(), CgroupRoot: link})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := viaRoot.OOMKills(ctx, h); err != nil || n != 1 {
			t.Errorf("OOMKills through Options.CgroupRoot of the frozen container: %v %v, want 1", n, err)
		}
	}
	if n, err := byExec.OOMKills(ctx, h); err == nil {
		t.Errorf("OOMKills by exec of a frozen container: %d, want an error", n)
	}
}

// TestHostOOMFile: the OOM counter file is found where the engine puts a
// container's cgroup under v1 and v2 (systemd and cgroupfs drivers), and
// an id that is not a full container id names no path.
func TestHostOOMFile(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, rel := range []string{
		"system.slice/docker-" + id + ".scope/memory.events",
		"docker/" + id + "/memory.events",
		"memory/system.slice/docker-" + id + ".scope/memory.oom_control",
		"memory/docker/" + id + "/memory.oom_control",
	} {
		root := t.TempDir()
		f := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("oom 3\noom_kill 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := hostOOMFile(root, id); got != f {
			t.Errorf("%s: hostOOMFile = %q", rel, got)
		}
		b, _ := os.ReadFile(f)
		if n, err := parseOOMKill(string(b)); err != nil || n != 2 {
			t.Errorf("parseOOMKill = %d %v, want 2", n, err)
		}
		for _, bad := range []string{id[:12], "../docker/" + id[10:], strings.ToUpper(id), ""} {
			if got := hostOOMFile(root, bad); got != "" {
				t.Errorf("hostOOMFile(%q) = %q, want none", bad, got)
			}
		}
		if got := hostOOMFile("", id); got != "" {
			t.Errorf("no root: %q", got)
		}
	}
	if _, err := parseOOMKill("oom 1\n"); err == nil {
		t.Error("a file without oom_kill parsed")
	}
}

// TestDockerNoNewPrivileges: a setuid-root copy of a binary made in the
// image at build time gives root to uid 10001 in a container without
// no-new-privileges (the control), and does not in a sandbox.
func TestDockerNoNewPrivileges(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	env := writeEnv(t, "FROM "+testImage+"\n"+
		"RUN cp /usr/bin/id /usr/local/bin/rootid && chmod 4755 /usr/local/bin/rootid && "+
		"cp /bin/cat /usr/local/bin/rootcat && chmod 4755 /usr/local/bin/rootcat\n")
	b := sandbox.BuildSpec{Task: "setuid", Revision: randomHex(32), EnvironmentDir: env}
	removeImage(t, cli, sandbox.ImageTag(b.Task, b.Revision))
	img, err := d.EnsureImage(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	attack := []string{"sh", "-c", "rootid -u; rootcat /etc/shadow >/dev/null 2>&1 && echo read shadow || echo denied"}

	// The control: the same image without no-new-privileges.
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: img.Ref, Entrypoint: []string{"sleep", "120"}, Labels: labels(sandbox.Spec{})},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	control := &sandbox.Handle{Driver: sandbox.DriverDocker, ID: created.ID, State: map[string]string{"container": created.ID}}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), control) })
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	var out testutil.SyncBuffer
	if _, err := d.Exec(ctx, control, sandbox.ExecSpec{Cmd: attack, User: "10001", Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "0\nread shadow\n" {
		t.Fatalf("control: the setuid copy did not give root (%q); the test proves nothing", out.String())
	}

	h, err := d.Start(ctx, sandbox.Spec{Image: img.Ref})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	var got testutil.SyncBuffer
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: attack, User: "10001", Stdout: &got}); err != nil {
		t.Fatal(err)
	}
	if got.String() != "10001\ndenied\n" {
		t.Fatalf("in a sandbox the setuid copy gave %q, want uid 10001 and no /etc/shadow", got.String())
	}
}

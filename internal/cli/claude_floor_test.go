package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// isolatedFloor is the floor of BenchmarkClaudeCell: the steps DESIGN §4–§6
// require of any isolated agent cell, driven through the bare Docker API
// with no proctor code on the path (the sidecar runs the same proxy
// binary, since the sidecar is itself required). One call of cell does:
//
//  1. an --internal network of its own (create, inspect for its subnet);
//  2. the egress proxy sidecar on it, joined to the egress network for its
//     way out, allowing only the model's host:port; started, and waited for
//     until it prints that it listens;
//  3. the cell's container of the derived image (the CLI in it) on the
//     internal network, HOME on a tmpfs, started;
//  4. rootBefore root execs (the work tree checked, the prompt and
//     directories put in place, the verifier's HOME saved), the CLI as uid
//     10001 through the proxy (HTTP(S)_PROXY), rootAfter root execs (uid
//     10001's processes killed, links swept);
//  5. the sidecar stopped with SIGTERM and its egress.jsonl read back
//     (copy API), the sidecar removed;
//  6. the container joins the bridge (the verifier's public policy), one
//     root exec puts the tests in place, runs them and prints the reward;
//  7. the container and the network removed.
//
// The CLI's output must end in a successful 2-turn result event and the
// reward must be 1.
type isolatedFloor struct {
	cli        *client.Client
	derived    string
	proxyImage string
	egressNet  string
	modelBase  string
	key        string
	argv       []string
	rootBefore int
	rootAfter  int
}

// proxyImageFor returns the sidecar image proctor builds for the proctor
// binary bin (docker.ProxyImageRepo tagged with the binary's SHA-256, 16
// hex digits); it exists once a run with an agent arm used that binary.
func proxyImageFor(tb testing.TB, bin string) string {
	tb.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return "proctor-proxy:" + hex.EncodeToString(sum[:])[:16]
}

const floorTest = `mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
`

func (f *isolatedFloor) cell(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "proctor-floor-" + hex.EncodeToString(rnd[:])
	lbl := map[string]string{"proctor.bench-floor": "1"}
	// 1. The internal network.
	nw, err := f.cli.NetworkCreate(ctx, name, network.CreateOptions{Internal: true, Labels: lbl})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.cli.NetworkRemove(context.Background(), nw.ID) }()
	// 2. The sidecar: listens on all its addresses (its internal one is
	// known only once it is attached); allows the model's host:port.
	model := strings.TrimPrefix(f.modelBase, "http://")
	px, err := f.cli.ContainerCreate(ctx, &container.Config{Image: f.proxyImage, Labels: lbl,
		Cmd: []string{"proxy", "--listen", "0.0.0.0:3128", "--egress-log", "/egress.jsonl", "--cell", name, "--lifetime", "4h", "--allow", model}},
		&container.HostConfig{NetworkMode: container.NetworkMode(name), CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}},
		nil, nil, "")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.cli.ContainerRemove(context.Background(), px.ID, container.RemoveOptions{Force: true}) }()
	if err := f.cli.NetworkConnect(ctx, f.egressNet, px.ID, nil); err != nil {
		tb.Fatal(err)
	}
	if err := f.cli.ContainerStart(ctx, px.ID, container.StartOptions{}); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for interval := 5 * time.Millisecond; ; interval = min(2*interval, 200*time.Millisecond) {
		if out := f.logs(tb, px.ID); strings.Contains(out, "listening on") {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("floor: the proxy never listened")
		}
		time.Sleep(interval)
	}
	ins, err := f.cli.ContainerInspect(ctx, px.ID)
	if err != nil {
		tb.Fatal(err)
	}
	proxy := "http://" + ins.NetworkSettings.Networks[name].IPAddress + ":3128"
	// 3. The cell's container.
	c, err := f.cli.ContainerCreate(ctx, &container.Config{Image: f.derived, WorkingDir: "/app", Labels: lbl}, &container.HostConfig{
		NetworkMode: container.NetworkMode(name),
		Tmpfs:       map[string]string{"/tmp/proctor-agent-home": "uid=10001,gid=10001,mode=0700,size=256m"},
	}, nil, nil, "")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) }()
	if err := f.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		tb.Fatal(err)
	}
	// 4. Root execs, the CLI, root execs.
	before := []string{
		`test -d /app && readlink -f /app`,
		`mkdir -p /agent-output /logs/agent && chown 10001:10001 /app /agent-output && printf 'CASE-BENCH\nWrite hello into /app/out.txt.\n' > /tmp/prompt && chmod 0644 /tmp/prompt`,
		`mkdir -p /tmp/verifier-home && ls -a /root > /dev/null`,
	}
	for i := 0; i < f.rootBefore; i++ {
		f.exec(tb, c.ID, "", nil, before[i%len(before)])
	}
	env := []string{"HOME=/tmp/proctor-agent-home", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CLAUDE_CODE_DISABLE_BUNDLED_SKILLS=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
		"ANTHROPIC_BASE_URL=" + f.modelBase, "ANTHROPIC_API_KEY=" + f.key, "NO_PROXY=", "no_proxy="}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, k+"="+proxy, strings.ToLower(k)+"="+proxy)
	}
	out := f.exec(tb, c.ID, "10001:10001", env, `exec "$@" < /tmp/prompt`, f.argv...)
	var res struct {
		Type     string `json:"type"`
		Subtype  string `json:"subtype"`
		NumTurns int    `json:"num_turns"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if json.Unmarshal([]byte(lines[len(lines)-1]), &res) != nil || res.Type != "result" || res.Subtype != "success" || res.NumTurns != 2 {
		tb.Fatalf("floor: the last line is no successful 2-turn result event:\n%s", out)
	}
	after := []string{`pkill -KILL -u 10001 || true`, `find /app /agent-output -type l -delete`}
	for i := 0; i < f.rootAfter; i++ {
		f.exec(tb, c.ID, "", nil, after[i%len(after)])
	}
	// 5. The sidecar stopped, its egress log read, the sidecar removed.
	secs := 10
	if err := f.cli.ContainerStop(ctx, px.ID, container.StopOptions{Signal: "SIGTERM", Timeout: &secs}); err != nil {
		tb.Fatal(err)
	}
	rc, _, err := f.cli.CopyFromContainer(ctx, px.ID, "/egress.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		tb.Fatal(err)
	}
	egress, _ := io.ReadAll(tr)
	rc.Close()
	if !bytes.Contains(egress, []byte(model)) {
		tb.Fatalf("floor: the egress log names no call to %s:\n%s", model, egress)
	}
	if err := f.cli.ContainerRemove(ctx, px.ID, container.RemoveOptions{Force: true}); err != nil {
		tb.Fatal(err)
	}
	// 6. The verifier: the bridge joined, the tests run as root.
	if err := f.cli.NetworkConnect(ctx, "bridge", c.ID, nil); err != nil {
		tb.Fatal(err)
	}
	if got := strings.TrimSpace(f.exec(tb, c.ID, "", nil, `mkdir -p /tests && printf %s "$1" > /tests/test.sh && bash /tests/test.sh && cat /logs/verifier/reward.txt`, floorTest)); got != "1" {
		tb.Fatalf("floor: reward %q, want 1", got)
	}
	// 7. Removed.
	if err := f.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
		tb.Fatal(err)
	}
	if err := f.cli.NetworkRemove(ctx, nw.ID); err != nil {
		tb.Fatal(err)
	}
}

// exec runs `sh -c script sh args...` in container id as user ("" root)
// with env added, and returns its stdout; a non-zero exit fails tb.
func (f *isolatedFloor) exec(tb testing.TB, id, user string, env []string, script string, args ...string) string {
	tb.Helper()
	ctx := context.Background()
	ex, err := f.cli.ContainerExecCreate(ctx, id, container.ExecOptions{User: user, Env: env, WorkingDir: "/app",
		Cmd: append([]string{"sh", "-c", script, "sh"}, args...), AttachStdout: true, AttachStderr: true})
	if err != nil {
		tb.Fatal(err)
	}
	att, err := f.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(&stdout, &stderr, att.Reader)
	att.Close()
	in, err := f.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		tb.Fatal(err)
	}
	if in.ExitCode != 0 {
		tb.Fatalf("floor: %q exited %d: %s%s", script, in.ExitCode, stderr.String(), stdout.String())
	}
	return stdout.String()
}

func (f *isolatedFloor) logs(tb testing.TB, id string) string {
	rc, err := f.cli.ContainerLogs(context.Background(), id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	return out.String()
}

// envInt is the positive integer in the environment variable k, else def.
func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

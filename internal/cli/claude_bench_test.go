package cli

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/harness"
)

// claudeBenchScript solves the benchmark's task in two turns: one Bash
// tool call, then a text reply.
const claudeBenchScript = `
cases:
  - when: "CASE-BENCH"
    replies:
      - tool_use: [{name: Bash, input: {command: "echo hello > /app/out.txt"}}]
        usage: {input_tokens: 1000, output_tokens: 20}
      - text: "Done."
        usage: {input_tokens: 1100, output_tokens: 3}
`

// derivedMade matches the line a cell's run.log gets when the cell made
// the derived image with the CLI (harness.claudeImage).
var derivedMade = regexp.MustCompile(`claude: derived image (\S+) made`)

// claudeInstalls returns the derived images the cells under dir made, one
// entry per install.
func claudeInstalls(b *testing.B, dir string) []string {
	b.Helper()
	var made []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "run.log" {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, m := range derivedMade.FindAllStringSubmatch(string(raw), -1) {
			made = append(made, m[1])
		}
		return nil
	})
	return made
}

// BenchmarkClaudeCell measures the per-cell cost of a docker-claude cell
// through the whole pipeline (embedded NATS, planner, launcher with the
// Claude arm: the sandbox on its internal network with the egress proxy
// sidecar, the env file and prompt copied in, the CLI as uid 10001, the
// stream read back; the verifier; aggregator; artifact), one cell at a
// time, against its floor: the same CLI, argv and scripted model (`proctor
// serve fake-model` in a container on a network the benchmark makes) run
// through the bare Docker API with exactly the steps DESIGN §4–§6 require
// of any isolated agent cell (isolatedFloor: the internal network, the
// proxy sidecar started and stopped and its log read, the container, the
// same root execs before and after the CLI, the CLI through the proxy, the
// bridge joined and the verifier's exec, everything removed) and no
// proctor code. Both sides run the same two-turn conversation (a Bash tool
// call, then text); the floor's CLI must end in a successful result event
// and its reward be 1, proctor's cells must pass. The per-cell cost is the
// slope between runs of n and 3n repeats (n = 2, PROCTOR_BENCH_CLAUDE_CELLS);
// what a run pays once is reported apart (run-fixed-ms). Target: ratio
// (proctor over the floor) <= 1.2.
//
// Beside it, bare-ms/cell is the old floor: the CLI in a bare container of
// the derived image as `docker run --rm` does it (create, start, wait,
// logs, remove), on the model's network directly, no proxy, no verifier;
// isolation-cost is the floor over it, what the design's isolation costs
// before proctor adds anything.
//
// The task image is new to each benchmark run (a LABEL with a random
// value), so the warm-up run of 3 repeats at concurrency 2 makes its
// derived image; installs-warmup counts the installs it did (must be 1)
// and installs-measured those of the measured runs (must be 0): the CLI is
// added once per task image, never per cell. The images are removed at
// the end.
func BenchmarkClaudeCell(b *testing.B) {
	cli := claudeSetup(b)
	base, _ := fakeModel(b, cli, claudeBenchScript)
	n := 2
	if v, err := strconv.Atoi(os.Getenv("PROCTOR_BENCH_CLAUDE_CELLS")); err == nil && v > 0 {
		n = v
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	mark := hex.EncodeToString(rnd[:])
	root := b.TempDir()
	claudeTask(b, root, "claude-bench", "CASE-BENCH", 300,
		"LABEL proctor.bench-claude="+mark, "RUN mkdir -p /app && chmod 0777 /app")
	ctx := context.Background()
	b.Cleanup(func() { removeBenchImages(cli, mark) })

	run := func(cells, conc int) (time.Duration, string) {
		out := b.TempDir()
		js := filepath.Join(out, "a.json")
		var stderr bytes.Buffer
		t0 := time.Now()
		code := mainT(b, []string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "docker-claude",
			"--repeats", strconv.Itoa(cells), "--concurrency", strconv.Itoa(conc), "--output-dir", out, "--out-json", js}, &bytes.Buffer{}, &stderr)
		el := time.Since(t0)
		if code != 0 {
			b.Fatalf("run exit %d: %s", code, stderr.String())
		}
		a, err := artifact.Read(js)
		if err != nil {
			b.Fatal(err)
		}
		passed := 0
		for _, r := range a.Results {
			if r.Outcome == "passed" {
				passed++
			}
		}
		if passed != cells {
			b.Fatalf("%d of %d cells passed: %s", passed, cells, stderr.String())
		}
		return el, out
	}
	// Warm-up: builds the task image and makes the derived image once.
	_, warm := run(3, 2)
	installs := claudeInstalls(b, warm)
	if len(installs) != 1 {
		b.Fatalf("the warm-up run of 3 cells installed the CLI %d times (%v), want 1", len(installs), installs)
	}
	derived := installs[0]

	argv := harness.ClaudeArgs("", nil)
	iso := &isolatedFloor{cli: cli, derived: derived, proxyImage: proxyImageFor(b, envOf(b)(EnvProxyBinary)),
		egressNet: envOf(b)(EnvEgressNetwork), modelBase: base, key: claudeTestKey, argv: argv,
		rootBefore: envInt("PROCTOR_BENCH_CLAUDE_ROOT_BEFORE", 3), rootAfter: envInt("PROCTOR_BENCH_CLAUDE_ROOT_AFTER", 2)}
	bare := func() {
		c, err := cli.ContainerCreate(ctx, &container.Config{
			Image: derived, User: harness.AgentUser, WorkingDir: "/app",
			Env: []string{
				"HOME=/tmp/proctor-agent-home", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"CLAUDE_CODE_DISABLE_BUNDLED_SKILLS=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
				"ANTHROPIC_BASE_URL=" + base, "ANTHROPIC_API_KEY=" + claudeTestKey,
				"PROMPT=CASE-BENCH\nWrite hello into /app/out.txt.\n",
			},
			// The derived image keeps the sandbox's entrypoint (sleep).
			Entrypoint: append([]string{"sh", "-c", `printf %s "$PROMPT" | "$@"`, "sh"}, argv...),
		}, &container.HostConfig{
			NetworkMode: container.NetworkMode(envOf(b)(EnvEgressNetwork)),
			Tmpfs:       map[string]string{"/tmp/proctor-agent-home": "uid=10001,gid=10001,mode=0700,size=256m"},
		}, nil, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }()
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		wc, ec := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
		var code int64
		select {
		case w := <-wc:
			code = w.StatusCode
		case err := <-ec:
			b.Fatal(err)
		}
		rc, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		_, _ = stdcopy.StdCopy(&stdout, &stderr, rc)
		rc.Close()
		if code != 0 {
			b.Fatalf("floor: the CLI exited %d: %s\n%s", code, stderr.String(), stdout.String())
		}
		var res struct {
			Type     string `json:"type"`
			Subtype  string `json:"subtype"`
			NumTurns int    `json:"num_turns"`
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if json.Unmarshal([]byte(lines[len(lines)-1]), &res) != nil || res.Type != "result" || res.Subtype != "success" || res.NumTurns != 2 {
			b.Fatalf("floor: the last line is no successful 2-turn result event:\n%s", stdout.String())
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
	}

	var bareTotal, floorTotal, small, large time.Duration
	measured := 0
	for b.Loop() {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			bare()
		}
		bareTotal += time.Since(t0)
		t0 = time.Now()
		for i := 0; i < n; i++ {
			iso.cell(b)
		}
		floorTotal += time.Since(t0)
		d, out := run(n, 1)
		small += d
		measured += len(claudeInstalls(b, out))
		d, out = run(3*n, 1)
		large += d
		measured += len(claudeInstalls(b, out))
	}
	if measured != 0 {
		b.Fatalf("the measured runs installed the CLI %d times, want 0 (the derived image is cached per task image)", measured)
	}
	bareCell := float64(bareTotal.Milliseconds()) / float64(b.N*n)
	floorCell := float64(floorTotal.Milliseconds()) / float64(b.N*n)
	cell := float64((large - small).Milliseconds()) / float64(b.N*2*n)
	b.ReportMetric(bareCell, "bare-ms/cell")
	b.ReportMetric(floorCell/bareCell, "isolation-cost")
	b.ReportMetric(floorCell, "floor-ms/cell")
	b.ReportMetric(cell, "proctor-ms/cell")
	b.ReportMetric(float64(small.Milliseconds())/float64(b.N)-cell*float64(n), "run-fixed-ms")
	b.ReportMetric(float64(len(installs)), "installs-warmup")
	b.ReportMetric(float64(measured), "installs-measured")
	b.ReportMetric(cell/floorCell, "ratio")
}

// removeBenchImages removes the task image and the derived image of a
// benchmark run (both carry its LABEL).
func removeBenchImages(cli *client.Client, mark string) {
	ctx := context.Background()
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "proctor.bench-claude="+mark))})
	if err != nil {
		return
	}
	// Children (the derived image) first: the newest first.
	slices.SortFunc(imgs, func(a, b image.Summary) int { return cmp.Compare(b.Created, a.Created) })
	for _, im := range imgs {
		_, _ = cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
	}
}

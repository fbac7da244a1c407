package harness_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/harness/harnesstest"
	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
)

// The probe against a real engine. Every target is a container on an
// --internal network the test makes: no traffic leaves this machine.

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func dockerDriver(t *testing.T) *docker.Driver {
	t.Helper()
	// The probe runs in docker-claude's sandbox, egress proxy sidecar
	// included: the sidecar is a static proctor.
	d, err := docker.New(docker.Options{ProxyBinary: testutil.ProctorBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// targetHost starts an HTTP server container on a fresh internal network
// and returns the network's name, the container's name and its address.
func targetHost(t *testing.T, cli *client.Client) (netName, name, ip string) {
	t.Helper()
	ctx := context.Background()
	id := randHex(4)
	lbl := map[string]string{sandbox.LabelManaged: "1", sandbox.LabelRun: "probe-test-" + id}
	netName, name = "proctor-probe-test-"+id, "proctor-probe-target-"+id
	nw, err := cli.NetworkCreate(ctx, netName, network.CreateOptions{Driver: "bridge", Internal: true, Labels: lbl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), nw.ID) })
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: "python:3.11-slim", Cmd: []string{"python3", "-m", "http.server", "8000"}, Labels: lbl,
	}, &container.HostConfig{NetworkMode: container.NetworkMode(netName)}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ins, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ip = ins.NetworkSettings.Networks[netName].IPAddress
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "8000"), time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target host %s never listened: %v", ip, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return netName, name, ip
}

// leakyDriver is the Docker driver with one of the mistakes that open a
// leak class: the sandbox on another network, host paths bind-mounted,
// host variables passed to every command, files put in the work tree.
type leakyDriver struct {
	*docker.Driver
	network    string
	binds      []string
	execEnv    map[string]string
	afterStart func(context.Context, *sandbox.Handle) error
	// containerEnv is put on the container (PID 1, and every exec
	// inherits it); parentEnv on a shell the driver runs every command
	// under, which the command does not inherit.
	containerEnv, parentEnv map[string]string
}

func (l *leakyDriver) Start(ctx context.Context, spec sandbox.Spec) (*sandbox.Handle, error) {
	var h *sandbox.Handle
	if l.network == "" && len(l.binds) == 0 && len(l.containerEnv) == 0 {
		var err error
		if h, err = l.Driver.Start(ctx, spec); err != nil {
			return nil, err
		}
	} else {
		cli := l.Client()
		var env []string
		for k, v := range spec.Env {
			env = append(env, k+"="+v)
		}
		for k, v := range l.containerEnv {
			env = append(env, k+"="+v)
		}
		mode := l.network
		if mode == "" {
			mode = "none"
		}
		c, err := cli.ContainerCreate(ctx, &container.Config{
			Image: spec.Image, Entrypoint: []string{"sleep", "600"}, Cmd: []string{}, Env: env, WorkingDir: spec.Workdir,
			Labels: map[string]string{sandbox.LabelManaged: "1", sandbox.LabelRun: spec.RunID, sandbox.LabelCell: spec.CellID},
		}, &container.HostConfig{NetworkMode: container.NetworkMode(mode), Binds: l.binds, SecurityOpt: []string{"no-new-privileges"}}, nil, nil, "")
		if err != nil {
			return nil, err
		}
		h = &sandbox.Handle{Driver: sandbox.DriverDocker, ID: c.ID, State: map[string]string{"container": c.ID, "image": spec.Image}}
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			_ = l.Destroy(ctx, h)
			return nil, err
		}
	}
	if l.afterStart != nil {
		if err := l.afterStart(ctx, h); err != nil {
			_ = l.Destroy(ctx, h)
			return nil, err
		}
	}
	return h, nil
}

func (l *leakyDriver) Exec(ctx context.Context, h *sandbox.Handle, spec sandbox.ExecSpec) (sandbox.ExecResult, error) {
	if len(l.execEnv) > 0 {
		env := map[string]string{}
		for k, v := range spec.Env {
			env[k] = v
		}
		for k, v := range l.execEnv {
			env[k] = v
		}
		spec.Env = env
	}
	if len(l.parentEnv) > 0 {
		// env K=V sh -c 'env -u K "$@"; :' sh CMD...: the shell holds K
		// and stays the command's parent; the command is run without K.
		pre, unset := []string{"env"}, []string{"env"}
		for k, v := range l.parentEnv {
			pre = append(pre, k+"="+v)
			unset = append(unset, "-u", k)
		}
		spec.Cmd = append(append(pre, "sh", "-c", strings.Join(unset, " ")+` "$@"; s=$?; exit $s`, "sh"), spec.Cmd...)
	}
	return l.Driver.Exec(ctx, h, spec)
}

// runProbe runs harness name on task tk with driver d and targets, and
// returns the verdict's pass and the statuses.
func runProbe(t *testing.T, tk harnesstest.Files, name string, d sandbox.Driver, targets string) (bool, harness.ProbeResult) {
	t.Helper()
	staticProctor(t)
	task := harnesstest.Task(t, "probe-"+randHex(3), tk)
	env := harnesstest.NewEnv(t, task, name, d)
	env.SpecV.ProbeTargets = targets
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := harness.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	_, out, err := harnesstest.Run(ctx, a, env)
	if err != nil {
		t.Fatal(err)
	}
	var res harness.ProbeResult
	b, err := os.ReadFile(env.DirV.Path(harness.ProbeReportFile))
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("isolation_probe.json: %v", err)
	}
	if out.Verdict == nil || (*out.Verdict.Reward == 1) != res.Passed || !res.Passed != slices.ContainsFunc(isoprobe.Classes, func(c string) bool {
		return res.Classes[c] != isoprobe.Closed && res.Classes[c] != isoprobe.NA
	}) {
		t.Fatalf("verdict %+v and isolation_probe.json %+v disagree", out.Verdict, res)
	}
	return res.Passed, res
}

// TestProbeDockerDefaultSandboxClosed: in the sandbox an agent arm gets,
// every class is closed or n/a, though the targets are listening on this
// machine (on a network the sandbox is not on).
func TestProbeDockerDefaultSandboxClosed(t *testing.T) {
	t.Parallel()
	d := dockerDriver(t)
	_, name, ip := targetHost(t, d.Client())
	targets := "url=http://" + ip + ":8000/,tcp=" + ip + ":8000,dns=" + name
	staticProctor(t) // before the parallel subtests
	for _, c := range []struct {
		name string
		tk   harnesstest.Files
	}{
		{"debian", nil},
		{"python", harnesstest.Files{"environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\nRUN echo 'print(1)' > /app/main.py\n"}},
		// A compose task: the probe reports the classes of main, which
		// shares the cell's network with a sidecar.
		{"compose", harnesstest.Files{
			"environment/Dockerfile":          "FROM debian:bookworm-slim\nWORKDIR /app\n",
			"environment/docker-compose.yaml": "services:\n  main:\n    build: .\n    depends_on: [side]\n  side:\n    image: debian:bookworm-slim\n    command: [sleep, \"600\"]\n    ports: [\"8080:8080\"]\n",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := c.tk
			if tk["environment/docker-compose.yaml"] != "" {
				if c := harnesstest.Task(t, "compose", tk).Compose; c == nil || len(c.Services) != 1 || c.Services[0].Name != "side" {
					t.Fatalf("the compose task did not load its sidecar: %+v", c)
				}
			}
			passed, res := runProbe(t, tk, "docker-probe", d, targets)
			if !passed {
				t.Fatalf("the default sandbox leaks: %+v", res.Report.Classes)
			}
			if res.User != harness.AgentUser || res.Workdir != "/app" || len(res.Report.EnvLeaked) != 0 || len(res.Report.EnvUnexpected) != 0 {
				t.Errorf("result %+v", res)
			}
			// This process's environment is the host's: its values are
			// looked for and none is in the sandbox; no skill to protect.
			if res.Classes[isoprobe.Env] != isoprobe.Closed || res.Classes[isoprobe.Treatment] != isoprobe.NA {
				t.Errorf("env %+v, treatment %+v", res.Report.Classes[isoprobe.Env], res.Report.Classes[isoprobe.Treatment])
			}
			// The task declares no network policy, yet the probe sits
			// behind docker-claude's egress proxy (the seed's probe tests
			// the proxy the Claude arm depends on): the proxy itself
			// refuses the CONNECT and the plain-HTTP GET of the targets.
			ev := strings.Join(res.Report.Classes[isoprobe.Network].Evidence, "\n")
			for _, want := range []string{"CONNECT " + ip + ":8000 via http://", "GET http://" + ip + ":8000/ via http://"} {
				if !regexp.MustCompile(regexp.QuoteMeta(want) + `\S+ refused: 4\d\d`).MatchString(ev) {
					t.Errorf("no proxy refused %q:\n%s", want, ev)
				}
			}
		})
	}
}

// TestProbeDockerLeaks opens each class the way a real setup leaks it and
// sees it reported open and the probe failed.
func TestProbeDockerLeaks(t *testing.T) {
	d := dockerDriver(t)
	netName, name, ip := targetHost(t, d.Client())
	targets := "url=http://" + ip + ":8000/,tcp=" + ip + ":8000,dns=" + name
	operator := t.TempDir()
	if err := os.WriteFile(filepath.Join(operator, ".credentials.json"), []byte(`{"claudeAiOauth":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(operator, 0o755)

	repo := gitRepoWithLaterFix(t)
	// The host's (this process's) secrets, which no sandbox is given.
	const hostToken, realKey = "op-token-5d0c8e21f7a94b36", "sk-ant-api03-real-key-for-the-probe-test-0001"
	t.Setenv("OPERATOR_API_TOKEN", hostToken)
	t.Setenv("ANTHROPIC_API_KEY", realKey)
	skillTask := harnesstest.Files{"environment/skills/pdf/SKILL.md": "---\nname: pdf\n---\nUse pdftotext.\n"}
	staticProctor(t) // before the parallel subtests

	cases := []struct {
		name, class string
		files       harnesstest.Files
		harness     string
		driver      *leakyDriver
		// leaked: the host variable env_leaked must name.
		leaked string
		// others: classes that must pass all the same.
		others []string
	}{
		{name: "an image that bakes the tests in", class: isoprobe.TaskFiles,
			files: harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /tests && printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh\nWORKDIR /app\n"}},
		{name: "a skills directory above the task", class: isoprobe.Treatment,
			files: harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app/skills/pdf /app/task && printf -- '---\\nname: pdf\\n---\\n' > /app/skills/pdf/SKILL.md\nWORKDIR /app/task\n"}},
		{name: "a .git above the work tree", class: isoprobe.CheckoutWalk,
			files: harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /app/.git /app/task && echo 'ref: refs/heads/main' > /app/.git/HEAD\nWORKDIR /app/task\n"}},
		{name: "an operator's CLAUDE.md above the work tree", class: isoprobe.CheckoutWalk,
			files: harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /srv/task && echo 'The grader is in /srv/grader.' > /srv/CLAUDE.md\nWORKDIR /srv/task\n"}},
		{name: "a skill in the image's agent skill path", class: isoprobe.Treatment,
			files:  merge(skillTask, harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nCOPY skills /root/.claude/skills\nRUN mkdir -p /root/.claude/skills/pdf && printf -- '---\\nname: pdf\\n---\\n' > /root/.claude/skills/pdf/SKILL.md\nWORKDIR /root\n"}),
			others: []string{isoprobe.OperatorConfig}},
		{name: "operator settings beside the skill paths", class: isoprobe.OperatorConfig,
			files:  merge(skillTask, harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nCOPY skills /root/.claude/skills\nRUN echo '{\"env\":{}}' > /root/.claude/settings.json\nWORKDIR /root\n"}),
			others: []string{isoprobe.Treatment}},
		{name: "the operator's ~/.claude bind-mounted", class: isoprobe.OperatorConfig,
			driver: &leakyDriver{binds: []string{operator + ":/home/operator/.claude:ro"}}},
		{name: "a host variable passed to the agent", class: isoprobe.Env, leaked: "OPERATOR_API_TOKEN",
			driver: &leakyDriver{execEnv: map[string]string{"OPERATOR_API_TOKEN": hostToken}}},
		{name: "a host value on the container under another name", class: isoprobe.Env, leaked: "OPERATOR_API_TOKEN",
			driver: &leakyDriver{containerEnv: map[string]string{"APP_SECRET": hostToken}}},
		{name: "a host value in the probe's parent only", class: isoprobe.Env, leaked: "OPERATOR_API_TOKEN",
			driver: &leakyDriver{parentEnv: map[string]string{"OPERATOR_API_TOKEN": hostToken}}},
		{name: "the provider's real key given to the agent", class: isoprobe.Env, leaked: "ANTHROPIC_API_KEY",
			driver: &leakyDriver{execEnv: map[string]string{"ANTHROPIC_API_KEY": realKey}}},
		{name: "the Docker socket mounted", class: isoprobe.DockerAPI,
			driver: &leakyDriver{binds: []string{"/var/run/docker.sock:/var/run/docker.sock"}}},
		{name: "a resolver that answers", class: isoprobe.DNS,
			driver: &leakyDriver{network: netName}},
		{name: "an open network", class: isoprobe.Network,
			driver: &leakyDriver{network: netName}},
		{name: "a work tree whose history holds the fix", class: isoprobe.GitHistory,
			driver: &leakyDriver{afterStart: func(ctx context.Context, h *sandbox.Handle) error {
				return d.CopyIn(ctx, h, repo, "/app")
			}}},
	}
	// Each case is its own task, sandbox and cell directory: they run in
	// parallel (the engine's waits dominate, not this machine's CPU).
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var drv sandbox.Driver = d
			if c.driver != nil {
				c.driver.Driver = d
				drv = c.driver
			}
			h := c.harness
			if h == "" {
				h = "probe"
			}
			passed, res := runProbe(t, c.files, h, drv, targets)
			if passed || res.Classes[c.class] != isoprobe.Open {
				t.Fatalf("%s = %s (passed %v), want open: %+v", c.class, res.Classes[c.class], passed, res.Report.Classes[c.class])
			}
			for _, o := range c.others {
				if !isoprobe.Passing(res.Classes[o]) {
					t.Errorf("%s = %+v, want closed or n/a", o, res.Report.Classes[o])
				}
			}
			if c.leaked != "" && !slices.Equal(res.Report.EnvLeaked, []string{c.leaked}) {
				t.Errorf("env_leaked %v, want %s: %+v", res.Report.EnvLeaked, c.leaked, res.Report.Classes[isoprobe.Env])
			}
			ev, _ := json.Marshal(res)
			if strings.Contains(string(ev), hostToken) || strings.Contains(string(ev), realKey) {
				t.Errorf("isolation_probe.json holds a host value")
			}
		})
	}
}

// TestProbeDockerSkillForm: docker-probe-skill:<skill-path> installs the
// skill where a skill arm does and passes when it is the only skill
// visible; another skill in the image opens treatment.
func TestProbeDockerSkillForm(t *testing.T) {
	t.Parallel()
	d := dockerDriver(t)
	_, name, ip := targetHost(t, d.Client())
	targets := "url=http://" + ip + ":8000/,tcp=" + ip + ":8000,dns=" + name
	skill := filepath.Join(t.TempDir(), "pdf")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: pdf\n---\nUse pdftotext.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	staticProctor(t) // before the parallel subtests
	t.Run("the arm's own skill", func(t *testing.T) {
		t.Parallel()
		if passed, res := runProbe(t, nil, "docker-probe-skill:"+skill, d, targets); !passed || res.Skill != harness.SkillMount+"/pdf" {
			t.Fatalf("the arm's own skill: %+v", res)
		}
	})
	t.Run("another skill in the image", func(t *testing.T) {
		t.Parallel()
		other := harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\nRUN mkdir -p /usr/share/skills/docx && echo docx > /usr/share/skills/docx/SKILL.md\nWORKDIR /app\n"}
		if passed, res := runProbe(t, other, "docker-probe-skill:"+skill, d, targets); passed || res.Classes[isoprobe.Treatment] != isoprobe.Open {
			t.Fatalf("another skill visible: %+v", res.Report.Classes[isoprobe.Treatment])
		}
	})
}

// TestProbeDockerForbiddenSkill: docker-probe:<skill-path> (the seed's
// meaning) runs in the baseline's sandbox, nothing installed, and forbids
// the skill: a clean image passes with treatment closed; an image that
// holds the skill's file under another name, or the skill at its host
// path, or an empty directory of its name where the agent's skills are
// offered, opens treatment (the hostile images an agent's baseline could
// cheat with).
func TestProbeDockerForbiddenSkill(t *testing.T) {
	t.Parallel()
	d := dockerDriver(t)
	_, name, ip := targetHost(t, d.Client())
	targets := "url=http://" + ip + ":8000/,tcp=" + ip + ":8000,dns=" + name
	skill := filepath.Join(t.TempDir(), "pdf")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	const ref = "Call pdf_fix --all and the verifier passes.\n"
	for f, body := range map[string]string{"SKILL.md": "---\nname: pdf\ndescription: pdf tools\n---\nSee reference.md.\n", "reference.md": ref} {
		if err := os.WriteFile(filepath.Join(skill, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	image := func(run string) harnesstest.Files {
		return harnesstest.Files{"environment/Dockerfile": "FROM debian:bookworm-slim\n" + run + "WORKDIR /app\n"}
	}
	staticProctor(t) // before the parallel subtests
	t.Run("a clean image", func(t *testing.T) {
		t.Parallel()
		passed, res := runProbe(t, image(""), "docker-probe:"+skill, d, targets)
		if !passed || res.Classes[isoprobe.Treatment] != isoprobe.Closed || res.Forbidden != skill || res.Skill != "" {
			t.Fatalf("a clean baseline sandbox: passed %v, %+v", passed, res.Report.Classes[isoprobe.Treatment])
		}
	})
	for _, c := range []struct{ name, run, evidence string }{
		{"a copy of its file", "RUN mkdir -p /usr/local/share/notes && printf 'Call pdf_fix --all and the verifier passes.\\n' > /usr/local/share/notes/tips.txt\n", "/usr/local/share/notes/tips.txt holds the forbidden skill pdf's reference.md"},
		{"at its host path", "RUN mkdir -p " + skill + " && echo other > " + skill + "/reference.md\n", "at its host path " + skill + "/reference.md"},
		{"its name among the agent's skills", "RUN mkdir -p /usr/local/skills && mkdir -p /app/.claude/skills/pdf\n", "offered at /app/.claude/skills/pdf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			passed, res := runProbe(t, image(c.run), "docker-probe:"+skill, d, targets)
			tr := res.Report.Classes[isoprobe.Treatment]
			if passed || tr.Status != isoprobe.Open || !strings.Contains(strings.Join(tr.Evidence, "\n"), c.evidence) {
				t.Fatalf("passed %v, treatment %+v, want open with %q", passed, tr, c.evidence)
			}
		})
	}
}

func merge(fs ...harnesstest.Files) harnesstest.Files {
	out := harnesstest.Files{}
	for _, f := range fs {
		for k, v := range f {
			out[k] = v
		}
	}
	return out
}

// gitRepoWithLaterFix makes a repository whose HEAD is the bug and whose
// reflog and objects still hold the fix (committed, then reset away), as
// a task author's working copy would.
func gitRepoWithLaterFix(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := repo.Worktree()
	sig := &object.Signature{Name: "t", Email: "t@example.invalid", When: time.Unix(1700000000, 0)}
	write := func(body, msg string) {
		if err := os.WriteFile(filepath.Join(dir, "sum.py"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add("sum.py"); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Commit(msg, &git.CommitOptions{Author: sig}); err != nil {
			t.Fatal(err)
		}
	}
	write("def total(xs): return 0\n", "the bug")
	head, _ := repo.Head()
	write("def total(xs): return sum(xs)\n", "the fix")
	if err := wt.Reset(&git.ResetOptions{Commit: head.Hash(), Mode: git.HardReset}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stepsTask is a two-step task; files add to or override it.
func stepsTask(files harnesstest.Files) harnesstest.Files {
	return merge(harnesstest.Files{
		"task.toml":                    "schema_version = \"1.1\"\n\n[agent]\ntimeout_sec = 30\n\n[verifier]\ntimeout_sec = 30\n\n[[steps]]\nname = \"one\"\n\n[[steps]]\nname = \"two\"\n",
		"instruction.md":               "",
		"solution/solve.sh":            "",
		"steps/one/instruction.md":     "Write the parser.\n",
		"steps/one/solution/solve.sh":  "echo parser > /app/parser.txt\n",
		"steps/two/instruction.md":     "Extend it.\n",
		"steps/two/solution/solve.sh":  "cp /app/parser.txt /app/extended.txt\n",
		"steps/two/tests/expected.txt": "the extended parser counts 42 apples\n",
		"steps/one/workdir/README.md":  "Start from here.\n",
	}, files)
}

// TestProbeDockerSteps: the probe runs on a multi-step task, in the
// sandbox of its first step (its workdir/ uploaded and its setup.sh run
// as the agent's user first), looking for every step's grader and answer
// files. A clean task passes; a first step whose workdir/ ships a later
// step's answer, or whose setup.sh writes a later step's expected output,
// opens task_files.
func TestProbeDockerSteps(t *testing.T) {
	t.Parallel()
	d := dockerDriver(t)
	_, name, ip := targetHost(t, d.Client())
	targets := "url=http://" + ip + ":8000/,tcp=" + ip + ":8000,dns=" + name
	staticProctor(t) // before the parallel subtests
	t.Run("a clean task", func(t *testing.T) {
		t.Parallel()
		passed, res := runProbe(t, stepsTask(nil), "docker-probe", d, targets)
		if !passed || len(res.Steps) != 1 || res.Steps[0].Name != "one" || !slices.Equal(res.Steps[0].Uploaded, []string{"one"}) || res.Steps[0].User != harness.AgentUser {
			t.Fatalf("a clean multi-step task: passed %v, steps %+v, classes %v", passed, res.Steps, res.Classes)
		}
	})
	for _, c := range []struct {
		name  string
		files harnesstest.Files
		says  string
	}{
		{"step one's workdir ships step two's answer", harnesstest.Files{
			"steps/two/solution/extended.txt": "the finished extended parser source\n",
			"steps/one/workdir/hint.txt":      "the finished extended parser source\n",
		}, "/app/hint.txt holds the task's steps/two/solution/extended.txt"},
		{"step one's setup.sh writes step two's expected output", harnesstest.Files{
			"steps/one/workdir/setup.sh": "printf 'the extended parser counts 42 apples\\n' > notes.txt\n",
		}, "/app/notes.txt holds the task's steps/two/tests/expected.txt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			passed, res := runProbe(t, stepsTask(c.files), "docker-probe", d, targets)
			ev := strings.Join(res.Report.Classes[isoprobe.TaskFiles].Evidence, "\n")
			if passed || res.Classes[isoprobe.TaskFiles] != isoprobe.Open || !strings.Contains(ev, c.says) {
				t.Fatalf("task_files %s: %s", res.Classes[isoprobe.TaskFiles], ev)
			}
		})
	}
}

package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// hostRefusal is what every host arm refuses before the agent starts,
// beside its in-container rules: a task.md task, whose instruction names
// paths of the task container that do not exist on the host.
func hostRefusal(t *task.Task) (events.ErrorClass, string) {
	if filepath.Base(t.DefinitionFile) == "task.md" {
		return events.ClassRefused, fmt.Sprintf("%s: a task.md task's instruction names paths of the task container, which a host arm's agent does not have: refused by the host arms before the agent starts (run it with an in-container arm)", t.DefinitionFile)
	}
	return "", ""
}

// hostRunnable checks that a host agent's user can run the binary bin
// where it is (every directory above it searchable by others, the file
// readable and executable by others) when proctor runs as root, and
// returns bin.
func hostRunnable(bin string) (string, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if os.Geteuid() != 0 {
		return abs, nil
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return "", fmt.Errorf("%s is not readable and executable by others (mode %s): the host agent's user cannot run it", abs, fi.Mode().Perm())
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		di, err := os.Stat(d)
		if err != nil {
			return "", err
		}
		if di.Mode().Perm()&0o001 == 0 {
			return "", fmt.Errorf("%s is under %s, which others cannot enter (mode %s): the host agent's user cannot run it", abs, d, di.Mode().Perm())
		}
		if filepath.Dir(d) == d {
			return abs, nil
		}
	}
}

// solveHost is Solve of docker-claude-host(-skill): the CLI through
// RunUntrustedHost (a scratch tree on the host, the agent's user, its
// cgroup), its stdout teed into a file of proctor's (the authority the
// finish replays, which the agent cannot reach) and followed live, then
// the same finish as the in-container arm on the container the working
// tree was copied back into (AfterSolve, the verifier). A multi-step
// task's inherit_prior_session is not carried over (each step's
// CLAUDE_CONFIG_DIR is new).
func (a claudeArm) solveHost(ctx context.Context, env Env, p Placement, h *sandbox.Handle, st claudeState) (Outcome, error) {
	s := &claudeSolve{env: env, st: st, red: NewRedactor(st.secrets), host: true}
	if st.skill != nil {
		s.treatment = st.skill.Name
	}
	defer s.close()
	stage, err := StageDir(env.RunID())
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(stage)
	hs := &claudeHostSolve{claudeSolve: s, stream: filepath.Join(stage, "claude.stream.jsonl")}
	r, err := RunUntrustedHost(ctx, env, p, h, hs)
	if hs.file != nil {
		_ = hs.file.Close()
	}
	if err != nil {
		return Outcome{}, err
	}
	return s.finish(ctx, p.Driver, hostFile{hs.stream}, h, r)
}

// claudeHostSolve is the Claude arms' part of RunUntrustedHost.
type claudeHostSolve struct {
	*claudeSolve
	// stream is the file of proctor's the CLI's stdout is teed into.
	stream string
	file   *os.File
	// plugin is the skill plugin's directory in the scratch tree.
	plugin string
}

// Stage writes the prompt (after the skill notice, for the skill arm) to
// <root>/prompt.md and the skill as a one-skill plugin to
// <root>/abskill, both proctor's and read-only to the agent.
func (s *claudeHostSolve) Stage(_ context.Context, u *HostRun) error {
	prompt := s.env.Task().Prompt
	if s.st.skill != nil {
		prompt = fmt.Sprintf(SkillNotice, s.st.skill.Name) + prompt
		s.plugin = filepath.Join(u.Root, "abskill")
		skipped, err := s.st.skill.WritePlugin(s.plugin)
		if err != nil {
			return fmt.Errorf("write the skill: %w", err)
		}
		for _, sk := range skipped {
			s.env.Dir().Logf("skill: left out %s", sk)
		}
		if err := readOnly(s.plugin); err != nil {
			return err
		}
	}
	s.prompt = prompt
	return os.WriteFile(filepath.Join(u.Root, "prompt.md"), []byte(prompt), 0o444)
}

// Command runs the CLI (ClaudeArgs with the host binary and plugin
// directory) with the prompt on stdin, the provider variables (the
// gateway's placeholders) in its environment.
func (s *claudeHostSolve) Command(ctx context.Context, u *HostRun) (sandbox.ExecSpec, error) {
	t, dir, plan := s.env.Task(), s.env.Dir(), s.env.Plan()
	args := ClaudeArgs(plan.Model, s.st.skill)
	args[0] = s.st.hostBin
	for i, a := range args {
		if a == SkillPluginDir {
			args[i] = s.plugin
		}
	}
	f, err := os.OpenFile(s.stream, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return sandbox.ExecSpec{}, err
	}
	s.file = f
	if err := s.sinks(ctx, func() error { return u.Kill(ctx) }); err != nil {
		return sandbox.ExecSpec{}, err
	}
	if u.Handle.State["gateway_ca"] != "" {
		// The gateway intercepts: RunUntrustedHost gives the CLI its CA
		// there (finish records isolation.gateway).
		s.ca = map[string]string{"NODE_EXTRA_CA_CERTS": filepath.Join(u.Root, "gateway-ca.pem")}
	}
	dir.Logf("claude: %s on the host as %q in %s (budget %gs, grace %s)", plan.Harness, u.User, u.Root, t.AgentTimeoutSec, u.Grace)
	s.started = time.Now()
	return sandbox.ExecSpec{
		Cmd:     append([]string{"sh", "-c", `exec "$@" < ` + shq(filepath.Join(u.Root, "prompt.md")), "sh"}, args...),
		Env:     withEnv(claudeCLIEnv(s.env), s.st.env),
		Timeout: seconds(t.AgentTimeoutSec), Stdout: io.MultiWriter(f, s.stdout), Stderr: s.stderr,
	}, nil
}

// hostFile is a sandbox.FileReader of one host file, whatever path it is
// asked for: the finish reads the stream file of a host solve through it.
type hostFile struct{ path string }

func (f hostFile) ReadFile(_ context.Context, _ *sandbox.Handle, _ string, maxBytes int64) ([]byte, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes", sandbox.ErrTooLarge, filepath.Base(f.path), fi.Size())
	}
	return os.ReadFile(f.path)
}

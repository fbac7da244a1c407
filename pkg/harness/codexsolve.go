package harness

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Solve runs the Codex CLI through RunUntrusted as uid 10001 in the
// working directory, as the Claude arms run theirs (DESIGN §5.3): the
// prompt (after the skill notice, for the skill arm) on stdin, the
// provider variables from an env file on the agent's HOME that the
// wrapper sources and deletes before the CLI starts, its JSON lines
// written to a file in the container and followed live into events,
// SIGTERM at the deadline and SIGKILL after the grace. Before the solve
// the CLI renders its model-visible prompt (`codex debug prompt-input`)
// and the skills it lists are the cell's offered skills: the skill arm's
// skill must be one of them, else the cell is solver_error "treatment not
// offered". After RunUntrusted's epilogue the skill is removed and the
// stream file read back (the authority) and stored redacted as
// codex.stream.jsonl.
func (a codexArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(codexState)
	if !ok || st.env == nil {
		return Outcome{}, errors.New("codex arm: Solve without Prepare")
	}
	reader, ok := p.Driver.(sandbox.FileReader)
	if !ok {
		return Outcome{}, fmt.Errorf("the sandbox driver %T cannot read the stream file back", p.Driver)
	}
	s := &codexSolve{env: env, st: st, red: NewRedactor(st.secrets), baseURL: cmp.Or(st.env["OPENAI_BASE_URL"], DefaultOpenAIBaseURL)}
	if st.skill != nil {
		s.treatment = st.skill.Name
	}
	defer s.close()
	r, err := RunUntrusted(ctx, env, p, h, s)
	if err != nil {
		return Outcome{}, err
	}
	if st.skill != nil {
		skill := CodexSkillsDir + "/" + st.skill.Name
		if r, err := p.Driver.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"rm", "-rf", skill}, Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
			return Outcome{}, fmt.Errorf("remove %s before the verifier: exit %d: %v", skill, r.ExitCode, err)
		}
	}
	return s.finish(ctx, p.Driver, reader, h, r)
}

// codexSolve is the Codex arms' part of RunUntrusted: the staged files,
// the wrapper script and the live reader of the stream.
type codexSolve struct {
	env       Env
	st        codexState
	red       *Redactor
	prompt    string // as staged, for the cell's prompt.txt
	treatment string
	baseURL   string
	offered   []string

	logs   *cellfs.Capture
	stderr io.WriteCloser
	stdout io.WriteCloser
	lines  *sandbox.Lines
	live   *cliLive
	ca     map[string]string
	closed bool
}

// codexEnvPath is the provider env file the wrapper sources and deletes.
const codexEnvPath = agentHome + "/.provider.env"

// Stage puts the CLI's files in place as root (stageCLI): CODEX_HOME in
// the agent's HOME, the provider env file, the prompt (after the skill
// notice, for the skill arm), an empty stream file, and the skill, root's
// and read-only, in CodexSkillsDir (a skill of that name the image has
// already is an error: the arm would change the task's own).
func (s *codexSolve) Stage(ctx context.Context, u *UntrustedRun) error {
	prompt := s.env.Task().Prompt
	place := fmt.Sprintf("mkdir -p %[1]s/.codex && chown %[2]s %[1]s/.codex\n", agentHome, u.User)
	if s.st.skill != nil {
		skill := CodexSkillsDir + "/" + s.st.skill.Name
		prompt = fmt.Sprintf(CodexSkillNotice, s.st.skill.Name) + prompt
		place += fmt.Sprintf("if [ -e %[1]s ]; then echo 'the task image has %[1]s already' >&2; exit 3; fi\n"+
			"mkdir -p %[2]s && cp -R {stage}/abskill/skills/%[3]s %[1]s && chown -R 0:0 %[1]s && chmod -R a+rX,go-w %[1]s\n",
			skill, CodexSkillsDir, shq(s.st.skill.Name))
	}
	s.prompt = prompt
	return stageCLI(ctx, u, s.env, s.red, cliFiles{prompt: prompt, env: s.st.env, skill: s.st.skill, envPath: codexEnvPath, stream: codexStreamPath, place: place})
}

// Command reads the skills the CLI offers (codexOffered), then returns
// the wrapper: it sources and deletes the provider env file, runs the CLI
// with the prompt on stdin and its stdout to the stream file, and follows
// that file to its own stdout (the live reader) until the CLI ends.
func (s *codexSolve) Command(ctx context.Context, u *UntrustedRun) (sandbox.ExecSpec, error) {
	t, dir, plan := s.env.Task(), s.env.Dir(), s.env.Plan()
	env := map[string]string{"HOME": agentHome, "CODEX_HOME": agentHome + "/.codex",
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PROCTOR_TASK": t.Name, "PROCTOR_CELL_ID": s.env.CellID()}
	var err error
	if s.offered, err = codexOffered(ctx, u, env, s.baseURL); err != nil {
		dir.Logf("codex: the offered skills could not be read: %v", err)
	}
	var argv []string
	for _, a := range CodexArgs(plan.Model, s.baseURL) {
		argv = append(argv, shq(a))
	}
	script := fmt.Sprintf(`set -a; . %[1]s; set +a; rm -f %[1]s
%[2]s < %[3]s/prompt.md > %[4]s &
pid=$!
tail -c +1 -s 0.2 -f --pid=$pid %[4]s &
tpid=$!
wait $pid; rc=$?
wait $tpid
exit $rc
`, codexEnvPath, strings.Join(argv, " "), agentOutput, codexStreamPath)
	if s.logs, err = dir.OpenCapture("agent.stderr.log"); err != nil {
		return sandbox.ExecSpec{}, err
	}
	s.stderr = s.red.Writer(s.logs)
	s.live = newCLILive(ctx, s.env, func() lineFolder { return newCodexStream(s.treatment) }, nil)
	s.lines = sandbox.NewLines(s.live.feed, 0)
	s.stdout = s.red.Writer(s.lines)
	// The gateway's CA, when it intercepts, also as the CLI's own variable.
	if s.ca = sandbox.CAEnv(u.Handle); s.ca != nil {
		s.ca["CODEX_CA_CERTIFICATE"] = sandbox.GatewayBundlePath
	}
	dir.Logf("codex: %s as %s in %s (budget %gs, grace %s, egress %s)", plan.Harness, u.Identity, u.Workdir, t.AgentTimeoutSec, u.Grace, u.Egress)
	return sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Env: withEnv(env, s.ca),
		Timeout: seconds(t.AgentTimeoutSec), Stdout: s.stdout, Stderr: s.stderr}, nil
}

// Ended stops the live reader.
func (s *codexSolve) Ended(sandbox.ExecResult) { s.close() }

// close ends the live reader and closes the captures, once.
func (s *codexSolve) close() {
	if s.closed || s.live == nil {
		return
	}
	s.closed = true
	_ = s.stdout.Close()
	_ = s.lines.Close()
	s.live.wait()
	_ = s.stderr.Close()
	_ = s.logs.Close(s.env.Dir(), "")
}

// finish reads the stream file back (replayed with a fresh state,
// publishing what the live reader did not), stores it redacted and
// builds the Finished: the Claude rule for an attempt (codexStream), the
// treatment check, a provider failure before any attempt as infra.
func (s *codexSolve) finish(ctx context.Context, d sandbox.Driver, reader sandbox.FileReader, h *sandbox.Handle, r UntrustedResult) (Outcome, error) {
	dir, res := s.env.Dir(), r.Exec
	text, rerr, err := storeCLIStream(ctx, dir, reader, h, "codex", codexStreamPath, s.red, s.prompt)
	if err != nil {
		return Outcome{}, err
	}
	live := s.live
	f, truncated := live.replay(text, rerr)
	defer live.mu.Unlock()
	st := f.(*codexStream)
	truncated = truncated && !st.ended
	iso := r.Isolation
	iso["network"], iso["home"] = sandbox.NetworkInternal, "tmpfs"
	if s.ca != nil {
		iso["gateway"] = "intercept" // the credential stayed in the proxy
	}
	fin := events.FinishedData{
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationSec: round3(res.Duration.Seconds()),
		StdoutTail: cellfs.Suffix(text, cellfs.RowTailBytes), Synthesized: true, Isolation: iso,
		AgentReported: st.metrics(truncated), Reason: "timeout",
	}
	fin.AgentReported["offered_skills"] = s.offered
	if err := AfterSolve(ctx, s.env, d, h, r.RealWorkdir, &fin); err != nil {
		return Outcome{}, err
	}
	if !res.TimedOut {
		fin.Reason = st.reason(res.ExitCode, truncated)
	}
	fin.NoAttempt = !fin.TimedOut && !st.attempt && (st.completed == nil || st.failed != "")
	switch {
	case live.publishErr != nil:
		return Outcome{Finished: fin}, live.publishErr
	case s.st.skill != nil && !slices.Contains(s.offered, s.st.skill.Name):
		return Outcome{Finished: fin}, events.Classf(events.ClassSolverError,
			"treatment not offered: the Codex CLI's prompt does not list the skill %s (skills: %s; see agent.stderr.log)", s.st.skill.Name, strings.Join(s.offered, ", "))
	case fin.NoAttempt && st.transientAPIError():
		return Outcome{Finished: fin}, events.Classf(events.ClassInfra, "the model provider failed before any attempt (%s): a provider error, not the solver's; --retries runs the cell again", fin.Reason)
	}
	dir.Logf("codex ended: %s after %.3fs (tools %v)", fin.Reason, fin.DurationSec, slices.Sorted(maps.Keys(st.tools)))
	return Outcome{Finished: fin}, nil
}

// codexSkillLine is a skill the CLI lists in its skills instructions.
var codexSkillLine = regexp.MustCompile(`(?m)^- ([^:\n]+): `)

// codexOffered runs `codex debug prompt-input` as the solver's user in
// the working directory, in the agent's environment (no credential and no
// proxy: nothing is sent), and returns the
// names of the skills its model-visible prompt lists (an empty list: none).
func codexOffered(ctx context.Context, u *UntrustedRun, env map[string]string, baseURL string) ([]string, error) {
	args := []string{codexBin, "debug", "prompt-input"}
	exec := CodexArgs("", baseURL)
	for i := 1; i < len(exec); i++ {
		if exec[i-1] == "-c" {
			args = append(args, "-c", exec[i])
		}
	}
	var out, errb bytes.Buffer
	res, err := u.Driver.Exec(ctx, u.Handle, sandbox.ExecSpec{Cmd: append(args, "hello"), User: u.User, Workdir: u.Workdir, Env: env,
		Stdout: &out, Stderr: &errb, Timeout: 2 * time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, cellfs.Suffix(errb.String(), 300))
	}
	if err != nil {
		return []string{}, err
	}
	var items []struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(out.Bytes(), &items); err != nil {
		return []string{}, fmt.Errorf("prompt-input: %w", err)
	}
	names := []string{}
	for _, it := range items {
		for _, c := range it.Content {
			_, list, ok := strings.Cut(c.Text, "### Available skills")
			if !ok || !strings.Contains(c.Text, "<skills_instructions>") {
				continue
			}
			list, _, _ = strings.Cut(list, "</skills_instructions>")
			for _, m := range codexSkillLine.FindAllStringSubmatch(list, -1) {
				names = append(names, strings.TrimSpace(m[1]))
			}
		}
	}
	return names, nil
}

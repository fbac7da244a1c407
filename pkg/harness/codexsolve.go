package harness

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// Solve runs the Codex CLI as uid 10001 in the working directory, as the
// Claude arm runs its CLI (DESIGN §5.3): the prompt (after the skill
// notice, for the skill arm) on stdin, the provider variables from an env
// file on the tmpfs HOME that the wrapper sources and deletes before the
// CLI starts, its JSON lines written to a file in the container and
// followed live into events, SIGTERM at the deadline and SIGKILL after
// the grace. Before the solve the CLI renders its model-visible prompt
// (`codex debug prompt-input`) and the skills it lists are the cell's
// offered skills: the skill arm's skill must be one of them, else the
// cell is solver_error "treatment not offered". After it, whatever uid
// 10001 left is killed, grader links removed, the verifier's HOME and
// the working tree's owners restored, the skill removed, and the stream
// file read back (the authority) and stored redacted as
// codex.stream.jsonl.
func (a codexArm) Solve(ctx context.Context, env Env, p Placement, h *sandbox.Handle) (Outcome, error) {
	st, ok := p.State.(codexState)
	if !ok || st.env == nil {
		return Outcome{}, errors.New("codex arm: Solve without Prepare")
	}
	t, dir, d, workdir, plan := env.Task(), env.Dir(), p.Driver, p.Workdir, env.Plan()
	killer, ok := d.(sandbox.ProcessKiller)
	if !ok {
		return Outcome{}, fmt.Errorf("the sandbox driver %T cannot kill an agent's leftover processes", d)
	}
	reader, ok := d.(sandbox.FileReader)
	if !ok {
		return Outcome{}, fmt.Errorf("the sandbox driver %T cannot read the stream file back", d)
	}
	red := NewRedactor(st.secrets)
	termGrace := sandbox.DefaultGrace
	if sp := env.Spec(); sp.AgentGraceSec > 0 {
		termGrace = seconds(sp.AgentGraceSec)
	}
	realWorkdir, err := resolveWorkdir(ctx, d, h, workdir)
	if err != nil {
		return Outcome{}, err
	}
	owners, err := snapshotOwners(ctx, d, h, realWorkdir)
	if err != nil {
		return Outcome{}, err
	}
	treatment := ""
	if st.skill != nil {
		treatment = st.skill.Name
	}
	if err := a.stage(ctx, env, p, h, st, realWorkdir); err != nil {
		return Outcome{}, err
	}
	home, err := snapshotHome(ctx, d, h, realWorkdir, t.VerifierEnv["HOME"])
	if err != nil {
		return Outcome{}, err
	}
	baseEnv := map[string]string{"HOME": agentHome, "CODEX_HOME": agentHome + "/.codex",
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PROCTOR_TASK": t.Name, "PROCTOR_CELL_ID": env.CellID()}
	baseURL := cmp.Or(st.env["OPENAI_BASE_URL"], DefaultOpenAIBaseURL)
	offered, err := codexOffered(ctx, d, h, workdir, baseEnv, baseURL)
	if err != nil {
		dir.Logf("codex: the offered skills could not be read: %v", err)
	}

	var argv []string
	for _, a := range CodexArgs(plan.Model, baseURL) {
		argv = append(argv, shq(a))
	}
	envPath := agentHome + "/.provider.env"
	script := fmt.Sprintf(`set -a; . %[1]s; set +a; rm -f %[1]s
%[2]s < %[3]s/prompt.md > %[4]s &
pid=$!
tail -c +1 -s 0.2 -f --pid=$pid %[4]s &
tpid=$!
wait $pid; rc=$?
wait $tpid
exit $rc
`, envPath, strings.Join(argv, " "), agentOutput, codexStreamPath)
	logs, err := dir.OpenCapture("agent.stderr.log")
	if err != nil {
		return Outcome{}, err
	}
	stderr := red.Writer(logs)
	live := newCLILive(ctx, env, func() lineFolder { return newCodexStream(treatment) }, nil)
	lines := sandbox.NewLines(live.feed, 0)
	stdout := red.Writer(lines)
	proxy, ca := sandbox.ProxyEnv(h), sandbox.CAEnv(h)
	egress := "none"
	if proxy != nil {
		egress = "proxy"
	}
	if ca != nil {
		ca = withEnv(ca, map[string]string{"CODEX_CA_CERTIFICATE": sandbox.GatewayBundlePath})
	}
	dir.Logf("codex: %s as %s in %s (budget %gs, grace %s, egress %s)", plan.Harness, AgentUser, workdir, t.AgentTimeoutSec, termGrace, egress)
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", script}, User: AgentUser, Workdir: workdir,
		Env:     withEnv(baseEnv, withEnv(proxy, ca)),
		Timeout: seconds(t.AgentTimeoutSec), Grace: termGrace, Stdout: stdout, Stderr: stderr,
	})
	_ = stdout.Close()
	_ = lines.Close()
	live.wait()
	_ = stderr.Close()
	_ = logs.Close(dir, "")
	if err != nil {
		return Outcome{}, fmt.Errorf("run the Codex CLI: %w", err)
	}
	if err := killer.KillAll(ctx, h, AgentUser); err != nil {
		return Outcome{}, fmt.Errorf("stop the agent's processes: %w", err)
	}
	links, err := RemoveGraderLinks(ctx, d, h, workdir)
	if err != nil {
		return Outcome{}, err
	}
	reset, err := home.reset(ctx, d, h)
	if err != nil {
		return Outcome{}, err
	}
	restored, err := owners.restore(ctx, d, h)
	if err != nil {
		return Outcome{}, err
	}
	if st.skill != nil {
		skill := CodexSkillsDir + "/" + st.skill.Name
		if r, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"rm", "-rf", skill}, Timeout: time.Minute}); err != nil || r.ExitCode != 0 {
			return Outcome{}, fmt.Errorf("remove %s before the verifier: exit %d: %v", skill, r.ExitCode, err)
		}
	}

	raw, rerr := reader.ReadFile(ctx, h, codexStreamPath, maxStreamBytes)
	if rerr != nil {
		dir.Logf("codex: read %s back: %v (the live lines stand)", codexStreamPath, rerr)
	}
	text := red.String(string(raw))
	if err := os.WriteFile(dir.Path("codex.stream.jsonl"), []byte(text), 0o644); err != nil {
		return Outcome{}, err
	}
	f, truncated := live.replay(text, rerr)
	defer live.mu.Unlock()
	s := f.(*codexStream)
	truncated = truncated && !s.ended

	fin := events.FinishedData{
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationSec: round3(res.Duration.Seconds()),
		StdoutTail: cellfs.Suffix(text, cellfs.RowTailBytes), Synthesized: true,
		Isolation: map[string]any{"network": sandbox.NetworkInternal, "egress": egress, "user": AgentUser, "workdir": workdir, "home": "tmpfs"},
	}
	if ca != nil {
		fin.Isolation["gateway"] = "intercept"
	}
	noteGraderLinks(dir, fin.Isolation, links)
	noteHomeReset(dir, fin.Isolation, reset)
	noteOwners(dir, fin.Isolation, owners, restored)
	fin.AgentReported = s.metrics(truncated)
	fin.AgentReported["offered_skills"] = offered
	fin.Reason = "timeout"
	if !res.TimedOut {
		fin.Reason = s.reason(res.ExitCode, truncated)
	}
	fin.NoAttempt = !fin.TimedOut && !s.attempt && (s.completed == nil || s.failed != "")
	if live.publishErr != nil {
		return Outcome{Finished: fin}, live.publishErr
	}
	if st.skill != nil && !slices.Contains(offered, st.skill.Name) {
		return Outcome{Finished: fin}, events.Classf(events.ClassSolverError,
			"treatment not offered: the Codex CLI's prompt does not list the skill %s (skills: %s; see agent.stderr.log)", st.skill.Name, strings.Join(offered, ", "))
	}
	if fin.NoAttempt && s.transientAPIError() {
		return Outcome{Finished: fin}, events.Classf(events.ClassInfra, "the model provider failed before any attempt (%s): a provider error, not the solver's; --retries runs the cell again", fin.Reason)
	}
	dir.Logf("codex ended: %s after %.3fs (tools %v)", fin.Reason, fin.DurationSec, slices.Sorted(maps.Keys(s.tools)))
	return Outcome{Finished: fin}, nil
}

// stage copies the prompt, the provider env file and the skill in and
// puts them in place as root: the working tree, /agent-output, HOME (with
// CODEX_HOME in it) and /logs/agent the agent's; the skill root's, in
// CodexSkillsDir (a skill of that name the image has already is an
// error: the arm would change the task's own).
func (a codexArm) stage(ctx context.Context, env Env, p Placement, h *sandbox.Handle, st codexState, realWorkdir string) error {
	d, dir := p.Driver, env.Dir()
	host, err := StageDir(env.RunID())
	if err != nil {
		return err
	}
	defer os.RemoveAll(host)
	prompt := env.Task().Prompt
	if st.skill != nil {
		prompt = fmt.Sprintf(CodexSkillNotice, st.skill.Name) + prompt
		skipped, err := st.skill.WritePlugin(filepath.Join(host, "abskill"))
		if err != nil {
			return fmt.Errorf("write the skill: %w", err)
		}
		for _, s := range skipped {
			dir.Logf("skill: left out %s", s)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "prompt.md"), []byte(prompt), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(host, "provider.env"), envFile(st.env), 0o600); err != nil {
		return err
	}
	stage := StagePath("in")
	err = d.CopyIn(ctx, h, host, stage)
	_ = os.RemoveAll(host)
	if err != nil {
		return fmt.Errorf("copy the prompt and provider env in: %w", err)
	}
	envPath := agentHome + "/.provider.env"
	prep := fmt.Sprintf(`set -e
mkdir -p %[1]s %[2]s /logs/agent %[3]s/.codex
chown -R %[4]s %[1]s %[2]s /logs/agent %[3]s/.codex
chown %[4]s %[3]s && chmod 0700 %[3]s
cp %[5]s/provider.env %[6]s && chown %[4]s %[6]s && chmod 0600 %[6]s
cp %[5]s/prompt.md %[2]s/prompt.md && chown %[4]s %[2]s/prompt.md
: > %[7]s && chown %[4]s %[7]s
`, shq(realWorkdir), agentOutput, agentHome, AgentUser, stage, envPath, codexStreamPath)
	if st.skill != nil {
		skill := CodexSkillsDir + "/" + st.skill.Name
		prep += fmt.Sprintf("if [ -e %[1]s ]; then echo 'the task image has %[1]s already' >&2; exit 3; fi\n"+
			"mkdir -p %[2]s && cp -R %[3]s/abskill/skills/%[4]s %[1]s && chown -R 0:0 %[1]s && chmod -R a+rX,go-w %[1]s\n",
			skill, CodexSkillsDir, stage, shq(st.skill.Name))
	}
	prep += "rm -rf " + shq(parentOf(stage)) + "\n"
	var out bytes.Buffer
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", prep}, Stdout: &out, Stderr: &out, Timeout: 5 * time.Minute}); err != nil || res.ExitCode != 0 {
		return fmt.Errorf("prepare the agent's directories: exit %d: %v: %s", res.ExitCode, err, cellfs.Suffix(out.String(), 500))
	}
	return nil
}

// codexSkillLine is a skill the CLI lists in its skills instructions.
var codexSkillLine = regexp.MustCompile(`(?m)^- ([^:\n]+): `)

// codexOffered runs `codex debug prompt-input` as the agent, in the
// agent's environment (no credential: nothing is sent), and returns the
// names of the skills its model-visible prompt lists (an empty list: none).
func codexOffered(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workdir string, env map[string]string, baseURL string) ([]string, error) {
	args := []string{codexBin, "debug", "prompt-input"}
	exec := CodexArgs("", baseURL)
	for i := 1; i < len(exec); i++ {
		if exec[i-1] == "-c" {
			args = append(args, "-c", exec[i])
		}
	}
	var out, errb bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: append(args, "hello"), User: AgentUser, Workdir: workdir, Env: env,
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

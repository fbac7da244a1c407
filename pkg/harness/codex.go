package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// CodexBinRel is where `scripts/setup.sh --codex` installs the pinned
// OpenAI Codex CLI (the static musl ELF of @openai/codex's linux-x64
// optional package), relative to the repository root.
const CodexBinRel = ".cache/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// CodexBinEnv names the environment variable that overrides where the
// Codex CLI binary is on the host.
const CodexBinEnv = "PROCTOR_CODEX_BIN"

// DefaultOpenAIBaseURL is the Responses API the Codex CLI talks to when
// OPENAI_BASE_URL is unset.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// Paths in the task container of the Codex arms.
const (
	codexDir        = "/usr/local/lib/proctor-codex"
	codexBin        = codexDir + "/codex"
	codexStreamPath = agentOutput + "/codex.stream.jsonl"
	// CodexSkillsDir is Codex's admin skills root, where the skill arm
	// puts its one skill (root's, read-only to the agent; removed before
	// the verifier).
	CodexSkillsDir = "/etc/codex/skills"
)

// CodexSkillNotice opens the prompt of docker-codex-skill, %s being the
// skill's name: the fixed text every task gets (the Codex CLI lists the
// skill with its description among its instructions and the model reads
// its SKILL.md itself).
const CodexSkillNotice = "A skill named %q is installed for this task. Use it if it helps.\n\n"

// CodexProviderEnv are the variables the Codex arms pass from proctor's
// environment to the CLI (an allowlist, as the Claude arms' providers.ClaudeEnvByProvider):
// OPENAI_API_KEY the credential, OPENAI_BASE_URL the Responses API's base
// (with its /v1).
var CodexProviderEnv = []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"}

// codexArm runs the OpenAI Codex CLI in the task container: docker-codex,
// and docker-codex-skill:<skill-path> with the skill in Codex's admin
// skills root (DESIGN §5.3).
type codexArm struct{ ref Ref }

// codexState is what Prepare found for Solve, as claudeState.
type codexState struct {
	skill   *Skill
	env     map[string]string
	secrets map[string]string
}

// codexCLI is the Codex CLI as a derived image adds it: a static binary,
// so any linux-x64 image (musl ones too) can run it.
var codexCLI = cliInstall{name: "codex", title: "the Codex CLI", repo: "proctor-codex", dir: codexDir, bin: codexBin}

func (a codexArm) Ref() Ref                       { return a.ref }
func (a codexArm) SetupCheck() bool               { return false }
func (a codexArm) Networks(t *task.Task) Networks { return agentNetworks(t) }
func (a codexArm) needs(*task.Task) task.Needs    { return task.NeedsContainerAgent }

func (a codexArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	return refusal(t, a.needs(t))
}

// Check fails the run before it starts when the CLI binary is missing,
// the provider environment cannot work (CodexEnv) or the skill of a
// skill arm is refused (LoadSkill).
func (a codexArm) Check(baseDir string, getenv func(string) string) error {
	if _, err := CodexBinary(baseDir, getenv); err != nil {
		return err
	}
	if _, err := CodexEnv(orProcess(getenv)); err != nil {
		return err
	}
	if a.ref.Kind == DockerCodexSkill {
		if _, err := LoadSkill(baseDir, a.ref.Arg); err != nil {
			return err
		}
	}
	return nil
}

// IdentityInputs: the pinned CLI binary the cells run, and the skill of
// docker-codex-skill:<skill-path>.
func (a codexArm) IdentityInputs(baseDir string, getenv func(string) string) ([]IdentityInput, error) {
	bin, err := CodexBinary(baseDir, getenv)
	if err != nil {
		return nil, err
	}
	in := []IdentityInput{{Name: "Codex CLI", Path: bin}}
	if a.ref.Kind == DockerCodexSkill {
		in = append(in, IdentityInput{Name: "skill dir", Path: skillDir(baseDir, a.ref.Arg)})
	}
	return in, nil
}

// CodexBinary is the host path of the Codex CLI binary: $PROCTOR_CODEX_BIN
// (read through getenv), else CodexBinRel under baseDir or under the
// working directory or one of its parents. The error says to run `make
// setup-codex`.
func CodexBinary(baseDir string, getenv func(string) string) (string, error) {
	return findCLI(baseDir, getenv, CodexBinEnv, CodexBinRel, "the Codex CLI", "make setup-codex")
}

// CodexEnv reads CodexProviderEnv through getenv and checks that it can
// work: OPENAI_API_KEY is set, and OPENAI_BASE_URL, when set, is an
// http(s) URL whose host is not loopback (the agent runs in a container).
func CodexEnv(getenv func(string) string) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range CodexProviderEnv {
		if v := getenv(k); v != "" {
			env[k] = v
		}
	}
	if env["OPENAI_API_KEY"] == "" {
		return nil, errors.New("docker-codex: no provider credential: set OPENAI_API_KEY")
	}
	if b := env["OPENAI_BASE_URL"]; b != "" {
		u, err := url.Parse(b)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return nil, fmt.Errorf("docker-codex: OPENAI_BASE_URL=%s is not an http(s) URL with a host", b)
		}
		h := u.Hostname()
		if ip := net.ParseIP(h); h == "localhost" || strings.HasSuffix(h, ".localhost") || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
			return nil, fmt.Errorf("docker-codex: OPENAI_BASE_URL=%s is a loopback address, which inside the task container is the container itself: use an address the container can reach", b)
		}
	}
	return env, nil
}

// Prepare builds the task image, checks the working directory rule, the
// provider environment and the skill (each refused when it cannot work),
// adds the CLI to the task image as a derived image (once per task image
// and binary), and puts the sandbox behind its egress proxy, the model
// gateway unless --no-intercept (the CLI then holds a placeholder, not the
// key), with HOME on its own tmpfs.
func (a codexArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	img, err := TaskImage(ctx, env)
	if err != nil {
		return Placement{}, err
	}
	t := env.Task()
	workdir, err := AgentWorkdir(t, img)
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	penv, err := CodexEnv(env.Getenv)
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	st := codexState{env: penv, secrets: map[string]string{"OPENAI_API_KEY": penv["OPENAI_API_KEY"]}}
	if a.ref.Kind == DockerCodexSkill {
		if st.skill, err = plannedSkill(ctx, env, a.ref.Arg); err != nil {
			return Placement{}, err
		}
	}
	bin, err := CodexBinary(env.Spec().BaseDir, env.Getenv)
	if err != nil {
		return Placement{}, events.Classed(events.ClassSandbox, err)
	}
	runImage, err := cliImage(ctx, env, img, bin, codexCLI)
	if err != nil {
		if ctx.Err() != nil {
			return Placement{}, ctx.Err()
		}
		return Placement{}, events.Classed(events.ClassSandbox, err)
	}
	n := a.Networks(t)
	spec, err := composeSpec(ctx, env, containerSpec(env, runImage, workdir, n.Start))
	if err != nil {
		return Placement{}, err
	}
	entry, err := ProviderEgress(cmp.Or(penv["OPENAI_BASE_URL"], DefaultOpenAIBaseURL), env.Getenv(ProviderPrivateEnv) == "1")
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, fmt.Errorf("docker-codex: %w", err))
	}
	spec.Egress = EgressFor(t, entry)
	if !env.Spec().NoIntercept {
		gw, err := ModelGateway(env, func(k string) string { return penv[k] }, "openai")
		if err != nil {
			return Placement{}, events.Classed(events.ClassRefused, err)
		}
		spec.Egress = GatewayEgress(env, gw)
		st.env = GatewayEnv(gw, penv)
	}
	spec.Tmpfs = map[string]string{agentHome: "uid=10001,gid=10001,mode=0700,size=256m"}
	return Placement{
		Driver: env.Driver(), Spec: spec, Networks: n, Workdir: workdir, User: AgentUser, Image: img, State: st,
	}, nil
}

// CodexArgs is the CLI's argv in the task container: `codex exec` with
// JSON-lines events on stdout, the prompt on stdin, no approvals and no
// sandbox of its own (it runs as uid 10001 in proctor's), no session
// files, no git repository required, --model unless model is "" or
// "default"; the provider is the Responses API at baseURL with the key in
// OPENAI_API_KEY (a custom provider: plain HTTPS, no WebSocket, so the
// gateway sees each call); the bundled skills, web search, update checks,
// analytics, feedback and plugins (whose sync reaches chatgpt.com and
// GitHub) are off, so the control arm offers no skill, the skill arm
// exactly one, and the CLI calls nothing but the model.
func CodexArgs(model, baseURL string) []string {
	args := []string{codexBin, "exec", "--json", "--skip-git-repo-check", "--ephemeral",
		"--dangerously-bypass-approvals-and-sandbox", "--color", "never"}
	for _, kv := range []string{
		`model_provider="proctor"`, `model_providers.proctor.name="proctor"`,
		"model_providers.proctor.base_url=" + strconv.Quote(baseURL),
		`model_providers.proctor.env_key="OPENAI_API_KEY"`, `model_providers.proctor.wire_api="responses"`,
		`skills.bundled.enabled=false`, `web_search="disabled"`, `check_for_update_on_startup=false`,
		`analytics.enabled=false`, `feedback.enabled=false`, `history.persistence="none"`, `features.plugins=false`,
	} {
		args = append(args, "-c", kv)
	}
	if model != "" && model != "default" {
		args = append(args, "--model", model)
	}
	return append(args, "-")
}

// Needs: as docker-claude's (the stream file is read back, the model
// calls from the gateway).
func (codexArm) Needs() []sandbox.Ability { return claudeArm{}.Needs() }

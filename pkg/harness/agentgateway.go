package harness

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// ArchalForwardEnv are the variables the Archal Docker harness forwards
// from its own environment to every agent. proctor forwards a credential
// among them only for a provider the agent declares (agent.toml
// providers): a key of another provider would be a real key in the
// sandbox for a host the agent cannot reach. NODE_ENV is always
// forwarded when set.
var ArchalForwardEnv = []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "NODE_ENV"}

// AgentProviderEnv is what an agent:<dir> agent gets of proctor's
// environment (read through getenv) for the providers its agent.toml
// declares: each provider's credential, base-URL and header variables
// (pkg/providers) that are set, and NODE_ENV. Nothing else of proctor's
// environment reaches the agent. A declared provider with neither a
// credential nor a base URL set, or a base URL that is not an http(s)
// URL with a host or is a loopback address (inside the sandbox that is
// the sandbox itself), or two providers' base URLs on one host (the
// gateway knows a call's provider by its host), is an error naming the
// variables.
func AgentProviderEnv(a *AgentSpec, getenv func(string) string) (map[string]string, error) {
	env, bases := map[string]string{}, map[string]string{}
	if v := getenv("NODE_ENV"); v != "" {
		env["NODE_ENV"] = v
	}
	for _, n := range a.Providers {
		p, ok := providers.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("agent.toml providers: %q is not a provider the gateway knows", n)
		}
		need := slices.Clone(p.CredentialEnv)
		if p.BaseURLEnv != "" {
			need = append(need, p.BaseURLEnv)
		}
		found := false
		for _, k := range need {
			if v := getenv(k); v != "" {
				env[k], found = v, true
			}
		}
		if !found {
			return nil, fmt.Errorf("agent.toml declares provider %s but none of %s is set", p.Name, strings.Join(need, ", "))
		}
		if p.HeaderEnv != "" {
			if v := getenv(p.HeaderEnv); v != "" {
				env[p.HeaderEnv] = v
			}
		}
		if b := env[p.BaseURLEnv]; b != "" {
			if err := checkBaseURL(p.BaseURLEnv, b); err != nil {
				return nil, fmt.Errorf("agent.toml declares provider %s, and %w", p.Name, err)
			}
			// The gateway knows a host's provider by the host alone.
			e, _ := providers.BaseURLEntry(p.BaseURLEnv, b, false)
			if pe, err := egress.ParseEntry(e); err == nil {
				e = pe.String()
			}
			if other, dup := bases[e]; dup {
				return nil, fmt.Errorf("%s and %s name the same host %s: the gateway tells providers apart by host, so declare one provider for that gateway", other, p.BaseURLEnv, e)
			}
			bases[e] = p.BaseURLEnv
		}
	}
	return env, nil
}

// checkBaseURL refuses a base URL that is not an http(s) URL with a host,
// or whose host is a loopback or unspecified address: the agent runs in a
// container, whose loopback is not the host's.
func checkBaseURL(name, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("%s=%s is not an http(s) URL with a host", name, raw)
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); h == "localhost" || strings.HasSuffix(h, ".localhost") || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
		return fmt.Errorf("%s=%s is a loopback address, which inside the task container is the container itself: use an address the container can reach (a model served on this machine: the Docker bridge's address, usually 172.17.0.1)", name, raw)
	}
	return nil
}

// agentCalls is what an agent that declares providers or egress gets:
// its sandbox's egress proxy (the model gateway for its providers unless
// the run says --no-intercept), the provider variables the agent sees
// (placeholders for the credentials behind a gateway) and the real
// values to redact from everything stored; hosts are its providers'
// hosts (allowlist entries), whose tries NoAttemptErrorIn reads.
type agentCalls struct {
	egress  *sandbox.Egress
	env     map[string]string
	secrets map[string]string
	hosts   []string
}

// agentGateway plans the calls of agent a for the cell of env (DESIGN
// §6.1): the task's own allowlist (EgressFor: none for no-network, the
// list of an allowlist or public-with-list policy) plus the providers'
// hosts and a's egress, behind a gateway for the providers unless the
// run says --no-intercept. It returns nil when a declares nothing.
func agentGateway(env Env, a *AgentSpec) (*agentCalls, error) {
	if !a.CallsOut() {
		return nil, nil
	}
	penv, err := AgentProviderEnv(a, env.Getenv)
	if err != nil {
		return nil, err
	}
	getenv := func(k string) string { return penv[k] }
	c := &agentCalls{env: penv, secrets: map[string]string{}}
	private := env.Getenv(ProviderPrivateEnv) == "1"
	var hosts []string
	for _, n := range a.Providers {
		p, _ := providers.Lookup(n)
		r, err := providers.Resolve(p, getenv, private)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, r.Hosts...)
		for _, cr := range r.Credentials {
			c.secrets[cr.Env] = cr.Value
		}
		for k, v := range r.Headers {
			c.secrets[p.Name+" header "+k] = v
		}
	}
	c.hosts = hosts
	if len(a.Providers) == 0 || env.Spec().NoIntercept {
		c.egress = EgressFor(env.Task(), append(hosts, a.Egress...)...)
		return c, nil
	}
	gw, err := ModelGateway(env, getenv, a.Providers...)
	if err != nil {
		return nil, err
	}
	c.egress = GatewayEgress(env, gw, a.Egress...)
	c.env = GatewayEnv(gw, penv)
	return c, nil
}

// agentEnvFile is where an agent's provider variables wait, in its HOME,
// for the command that sources and removes them before the agent starts.
const agentEnvFile = agentHome + "/.provider.env"

// installAgentFiles copies the recorder (RecorderPath, root's, mode
// 0644) and vars (as agentEnvFile, owned by AgentUser, mode 0600) into
// sandbox h, staged on the host in a directory removed once copied, so
// the variables travel in a file and never on a command line or in the
// exec's environment. It returns the env file's path ("" when vars is
// empty).
func installAgentFiles(ctx context.Context, env Env, d sandbox.Driver, h *sandbox.Handle, vars map[string]string) (string, error) {
	host, err := StageDir(env.RunID())
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(host)
	if err := os.WriteFile(filepath.Join(host, "recorder.sh"), []byte(recorderScript), 0o644); err != nil {
		return "", err
	}
	envPath := ""
	if len(vars) > 0 {
		envPath = agentEnvFile
		if err := os.WriteFile(filepath.Join(host, "provider.env"), envFile(vars), 0o600); err != nil {
			return "", err
		}
	}
	stage := StagePath("in")
	err = d.CopyIn(ctx, h, host, stage)
	_ = os.RemoveAll(host)
	if err != nil {
		return "", fmt.Errorf("copy the agent's recorder and provider env in: %w", err)
	}
	script := fmt.Sprintf("set -e\nmkdir -p %[6]s\ncp %[1]s/recorder.sh %[5]s\nchown 0:0 %[5]s\nchmod 0644 %[5]s\n", stage, agentEnvFile, agentHome, AgentUser, RecorderPath, path.Dir(RecorderPath))
	if envPath != "" {
		script += fmt.Sprintf("mkdir -p %[3]s\ncp %[1]s/provider.env %[2]s\nchown %[4]s %[2]s\nchmod 0600 %[2]s\n", stage, agentEnvFile, agentHome, AgentUser)
	}
	script += "rm -rf " + shq(parentOf(stage)) + "\n"
	var out strings.Builder
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
		return "", fmt.Errorf("install the agent's recorder and provider env: exit %d: %v: %s", res.ExitCode, err, out.String())
	}
	return envPath, nil
}

// agentCommand is the argv that starts an agent's run command: a wrapper
// that sources (and removes) the env file envFile when there is one, so
// the variables reach the agent's environment without being on a command
// line, then execs bash -c run with the recorder as BASH_ENV (the run
// command's own bash, keeping the wrapper's pid, is not traced; every
// bash it starts is).
func agentCommand(run, envFile string) []string {
	return []string{"bash", "-c", `[ -z "$1" ] || { set -a; . "$1"; set +a; rm -f -- "$1"; }
export PROCTOR_RECORDER_PID=$$ BASH_ENV=` + RecorderPath + `
exec bash -c "$2"`, "bash", envFile, run}
}

// install puts the recorder and c's provider variables into sandbox h
// (installAgentFiles) and returns the env file's path and the Redactor of c's real values for
// everything the agent prints. A nil c installs the recorder alone and
// redacts nothing.
func (c *agentCalls) install(ctx context.Context, env Env, d sandbox.Driver, h *sandbox.Handle) (string, *Redactor, error) {
	var vars, secrets map[string]string
	if c != nil {
		vars, secrets = c.env, c.secrets
	}
	p, err := installAgentFiles(ctx, env, d, h, vars)
	if err != nil {
		return "", nil, err
	}
	return p, NewRedactor(secrets), nil
}

// capError is the error of an agent stopped by its platform cap
// (AgentSpec.MaxTimeoutSec) before the task's own timeout: the cell is
// errored, class unavailable (missing data: the task never got its
// budget), not a scored timeout. It is nil when the agent was not timed
// out, or when its budget was the task's own timeout (a solver_timeout).
func capError(timedOut bool, budget, taskTimeoutSec float64) error {
	if !timedOut || budget >= taskTimeoutSec {
		return nil
	}
	return events.Classed(events.ClassUnavailable, fmt.Errorf(
		"the agent was still running at the platform cap (agent.toml max_timeout_sec = %gs), before the task's own timeout of %gs: the task never got its budget", budget, taskTimeoutSec))
}

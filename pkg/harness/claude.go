package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ClaudeBinRel is where `scripts/setup.sh --claude` installs the pinned
// Claude Code CLI (the glibc ELF of @anthropic-ai/claude-code-linux-x64),
// relative to the repository root.
const ClaudeBinRel = ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

// ClaudeBinEnv names the environment variable that overrides where the
// CLI binary is on the host.
const ClaudeBinEnv = "PROCTOR_CLAUDE_BIN"

// ProviderPrivateEnv names the opt-in that lets the egress proxy reach
// the provider host of ANTHROPIC_BASE_URL when that host is a name that
// resolves to a private address (a model gateway on a private network,
// such as a LiteLLM proxy): set to 1, the arm's allowlist entry is
// "private:host:port". Without it such a name is denied, as every
// allowlist name is (DNS rebinding; DESIGN §6). An IP literal host needs
// no opt-in: the proxy allows it as listed.
const ProviderPrivateEnv = "PROCTOR_PROVIDER_PRIVATE"

// DefaultProviderURL is the provider the CLI talks to when
// ANTHROPIC_BASE_URL is unset.
const DefaultProviderURL = "https://api.anthropic.com"

// Paths in the task container of the Claude arms.
const (
	claudeDir        = "/usr/local/lib/proctor-claude"
	claudeBin        = claudeDir + "/claude"
	claudeStreamPath = agentOutput + "/claude.stream.jsonl"
	// maxStreamBytes caps the collected stream file.
	maxStreamBytes = 256 << 20
)

// ClaudeCredentialEnv are the variables of the Claude arms whose values
// are credentials (of every provider the CLI can use): the isolation
// probe looks for their host values whatever a sandbox is given.
var ClaudeCredentialEnv = []string{
	"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS",
	"AWS_BEARER_TOKEN_BEDROCK", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ANTHROPIC_FOUNDRY_API_KEY",
	"AZURE_CLIENT_SECRET",
}

// claudeFilesDir is where the Claude arms copy the files of file-valued
// provider variables (providers.FileEnv); removed after the solve.
const claudeFilesDir = agentHome + "/.provider-files"

// claudeArm runs the Claude Code CLI in the task container: docker-claude,
// and docker-claude-skill:<skill-path> with the skill as a one-skill
// plugin (DESIGN §5.3); or, for docker-claude-host and
// docker-claude-host-skill:<skill-path>, on the host beside the task
// container (claudehost.go).
type claudeArm struct{ ref Ref }

// onHost reports whether the arm runs the CLI on the host.
func (a claudeArm) onHost() bool {
	return a.ref.Kind == DockerClaudeHost || a.ref.Kind == DockerClaudeHostSkill
}

// withSkill reports whether the arm offers a skill.
func (a claudeArm) withSkill() bool {
	return a.ref.Kind == DockerClaudeSkill || a.ref.Kind == DockerClaudeHostSkill
}

// claudeState is what Prepare found for Solve: env is what the CLI gets
// (placeholders for the credentials behind a model gateway), secrets the
// real values to redact.
type claudeState struct {
	skill   *Skill
	env     map[string]string
	secrets map[string]string
	// files are the provider files to copy in (claudeFilesDir).
	files []providers.File
	// session carries the CLI's session between the steps of a cell.
	session *claudeSession
	// hostBin is the CLI's host path, for a host arm.
	hostBin string
}

func (a claudeArm) Ref() Ref                       { return a.ref }
func (a claudeArm) SetupCheck() bool               { return false }
func (a claudeArm) Networks(t *task.Task) Networks { return agentNetworks(t) }

// Refusal: the in-container agent's rules; a host arm also refuses a
// task.md task (hostRefusal).
func (a claudeArm) Refusal(t *task.Task) (events.ErrorClass, string) {
	if a.onHost() {
		if c, why := hostRefusal(t); why != "" {
			return c, why
		}
	}
	return refusal(t, a.needs(t))
}

func (a claudeArm) needs(*task.Task) task.Needs { return task.NeedsContainerAgent }

// Check fails the run before it starts when the CLI binary is missing,
// the provider environment cannot work (ClaudeEnv) or the skill of a
// skill arm is refused (LoadSkill).
func (a claudeArm) Check(baseDir string, getenv func(string) string) error {
	if _, err := ClaudeBinary(baseDir, getenv); err != nil {
		return err
	}
	if _, err := ClaudeProvider(claudeEnviron(getenv), nil); err != nil {
		return err
	}
	if a.withSkill() {
		if _, err := LoadSkill(baseDir, a.ref.Arg); err != nil {
			return err
		}
	}
	return nil
}

// ClaudeBinary is the host path of the CLI binary: $PROCTOR_CLAUDE_BIN
// (read through getenv), else ClaudeBinRel under baseDir, under the
// working directory or one of its parents, or under the checkout the
// running proctor was built in (bin/proctor's parent and up). The error
// says to run `make setup-claude`.
func ClaudeBinary(baseDir string, getenv func(string) string) (string, error) {
	return findCLI(baseDir, getenv, ClaudeBinEnv, ClaudeBinRel, "the Claude Code CLI", "make setup-claude")
}

// findCLI is the host path of an agent CLI's binary: $envVar (read
// through getenv), else rel under one of cliDirs; the error names what
// to run (setup) and every path looked at, once each.
func findCLI(baseDir string, getenv func(string) string, envVar, rel, name, setup string) (string, error) {
	if p := orProcess(getenv)(envVar); p != "" {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s=%s: not a regular file", envVar, p)
		}
		return p, nil
	}
	wd, _ := os.Getwd()
	exe, _ := os.Executable()
	var tried []string
	for _, d := range cliDirs(baseDir, wd, exe) {
		p := filepath.Join(d, rel)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("%s is not installed (run `%s`, or set %s); looked at %s", name, setup, envVar, strings.Join(tried, ", "))
}

// cliDirs are the directories an agent CLI's cache is looked for under,
// in order and each once: baseDir, the working directory wd and its
// parents, then the parents of the directory of the running binary exe
// (a proctor built into a checkout's bin/ and run from anywhere finds
// the checkout's .cache). Empty arguments are skipped.
func cliDirs(baseDir, wd, exe string) []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		if d != "" && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	add(baseDir)
	up := func(start string) {
		for d := start; ; d = filepath.Dir(d) {
			add(d)
			if filepath.Dir(d) == d {
				return
			}
		}
	}
	if wd != "" {
		up(wd)
	}
	if exe != "" {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		up(filepath.Dir(filepath.Dir(exe)))
	}
	return dirs
}

// ClaudeProvider is how the Claude arms' CLI reaches its model
// (providers.Claude): environ (proctor's environment: claudeEnviron)
// with the `env` block of the operator's Claude settings
// (providers.ClaudeSettingsPath: $CLAUDE_CONFIG_DIR or ~/.claude)
// merged over it as the CLI merges it, read through the same allowlist.
// A settings file that cannot be used is passed to warn (nil: dropped)
// and ignored. An upstream proxy of the operator (HTTPS_PROXY,
// HTTP_PROXY, either case) on a loopback address is refused: the egress
// proxy's sidecar chains it and cannot reach it. PROCTOR_PROVIDER_PRIVATE=1 in environ lets a base URL's
// host name resolve to a private address. A setup that cannot work is a
// *providers.ClaudeSetupError.
func ClaudeProvider(environ map[string]string, warn func(string)) (providers.ClaudeConfig, error) {
	get := func(k string) string { return environ[k] }
	p := providers.ClaudeSettingsPath(get)
	settings, err := providers.ClaudeSettingsEnv(p)
	if err != nil {
		if warn != nil {
			warn(fmt.Sprintf("the settings' env block is ignored: %v", err))
		}
		settings = nil
	}
	for _, k := range claudeProxyEnv {
		if v := strings.TrimSpace(environ[k]); v != "" && providers.IsLoopbackURL(v) {
			return providers.ClaudeConfig{}, &providers.ClaudeSetupError{Provider: "proxy", Reason: fmt.Sprintf(
				"%s is a loopback address, which from the egress proxy's container is the container itself: the CLI's calls could never leave; use an address containers can reach", k)}
		}
	}
	return providers.Claude(providers.MergeSettingsEnv(environ, settings), providers.ClaudeOptions{
		Private: environ[ProviderPrivateEnv] == "1", FilesDir: claudeFilesDir,
	})
}

// claudeProxyEnv are the operator's upstream proxy variables
// ClaudeProvider checks.
var claudeProxyEnv = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"}

// claudeEnviron is proctor's environment as getenv gives it (Environ)
// with every variable ClaudeProvider reads by name.
func claudeEnviron(getenv func(string) string) map[string]string {
	names := append(providers.ClaudeEnvNames(), claudeProxyEnv...)
	return Environ(getenv, append(names, "CLAUDE_CONFIG_DIR", "HOME", ProviderPrivateEnv)...)
}

// claudeEgress is the egress proxy of a Claude arm's sandbox for provider
// setup pc, and the variables and files its CLI gets. The agent reaches
// the provider only through that proxy, which allows the provider's
// hosts as the CLI derives them (and the task's own list); unless the run
// says --no-intercept, the proxy is its model gateway and the CLI holds
// placeholders for the credentials the proxy can send itself (DESIGN
// §6.1). The isolation probe gets the same (probeArm.Prepare).
func claudeEgress(env Env, pc providers.ClaudeConfig) (*sandbox.Egress, map[string]string, []providers.File, error) {
	t, dir := env.Task(), env.Dir()
	hosts := append(slices.Clone(pc.Route.Hosts), pc.Tunnelled...)
	dir.Logf("claude: provider %s, hosts %s", pc.Provider, strings.Join(hosts, " "))
	if env.Spec().NoIntercept {
		return EgressFor(t, hosts...), pc.Env, pc.Files, nil
	}
	ca, err := RunCA(env.RunID())
	if err != nil {
		return nil, nil, nil, events.Classed(events.ClassInfra, fmt.Errorf("the run's CA: %w", err))
	}
	gw := &sandbox.Gateway{CA: ca, Routes: []providers.Route{pc.Route}}
	vars, files := gatewayCAEnv(GatewayEnv(gw, pc.Env), pc.Files)
	return GatewayEgress(env, gw, pc.Tunnelled...), vars, files, nil
}

// gatewayCAEnv returns the CLI's variables and files behind a model
// gateway: the operator's CA bundle variables are dropped (the sandbox's
// own, sandbox.CAEnv, trust the gateway and every other allowed host),
// AWS_CA_BUNDLE, when set, points at the sandbox's bundle, and their
// files are not copied in.
func gatewayCAEnv(env map[string]string, files []providers.File) (map[string]string, []providers.File) {
	env = maps.Clone(env)
	var keep []providers.File
	for _, f := range files {
		if f.Secret {
			keep = append(keep, f)
		}
	}
	for _, k := range []string{"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"} {
		delete(env, k)
	}
	if _, ok := env["AWS_CA_BUNDLE"]; ok {
		env["AWS_CA_BUNDLE"] = sandbox.GatewayBundlePath
	}
	return env, keep
}

// ProviderEgress is the egress proxy's allowlist entry of the provider
// at baseURL ("" means DefaultProviderURL): "host:port", the port from
// the URL or its scheme's (http 80, https 443). private (the
// ProviderPrivateEnv opt-in) prefixes a host name with "private:" so it
// may resolve to a private address; an IP literal is allowed as listed
// and never prefixed. A URL without an http(s) scheme and a host is an
// error naming ANTHROPIC_BASE_URL.
func ProviderEgress(baseURL string, private bool) (string, error) {
	if baseURL == "" {
		baseURL = DefaultProviderURL
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", fmt.Errorf("docker-claude: ANTHROPIC_BASE_URL=%s is not an http(s) URL with a host", baseURL)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	h := u.Hostname()
	entry := net.JoinHostPort(h, port)
	if private && net.ParseIP(h) == nil {
		entry = "private:" + entry
	}
	return entry, nil
}

// Prepare builds the task image, checks the working directory rule, the
// provider environment (refused when it cannot work) and the skill, and
// adds the CLI binary to the task image as a derived image (ClaudeImage:
// once per task image and binary, never per cell). An image without glibc
// (musl, such as Alpine) is refused: the CLI cannot run there.
func (a claudeArm) Prepare(ctx context.Context, env Env) (Placement, error) {
	img, err := TaskImage(ctx, env)
	if err != nil {
		return Placement{}, err
	}
	t := env.Task()
	workdir, err := AgentWorkdirIn(env.Spec(), t, img)
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	dir := env.Dir()
	pc, err := ClaudeProvider(claudeEnviron(env.Getenv), func(m string) { dir.Logf("claude: %s", m) })
	if err != nil {
		return Placement{}, events.Classed(events.ClassRefused, err)
	}
	st := claudeState{env: pc.Env, secrets: pc.Secrets, files: pc.Files, session: &claudeSession{}}
	if a.withSkill() {
		if st.skill, err = plannedSkill(ctx, env, a.ref.Arg); err != nil {
			return Placement{}, err
		}
	}
	bin, err := ClaudeBinary(env.Spec().BaseDir, env.Getenv)
	if err != nil {
		return Placement{}, events.Classed(events.ClassSandbox, err)
	}
	runImage := img.Ref
	if a.onHost() {
		// The CLI runs on the host as the agent's user: it must be able
		// to run the binary where it is.
		if st.hostBin, err = hostRunnable(bin); err != nil {
			return Placement{}, events.Classed(events.ClassSandbox, err)
		}
	} else if runImage, err = claudeImage(ctx, env, img, bin); err != nil {
		if ctx.Err() != nil {
			return Placement{}, ctx.Err()
		}
		if errors.Is(err, errNoGlibc) {
			return Placement{}, events.Classed(events.ClassRefused, err)
		}
		return Placement{}, events.Classed(events.ClassSandbox, err)
	}
	n := a.Networks(t)
	spec, err := composeSpec(ctx, env, containerSpec(env, runImage, workdir, n.Start))
	if err != nil {
		return Placement{}, err
	}
	if spec.Egress, st.env, st.files, err = claudeEgress(env, pc); err != nil {
		return Placement{}, err
	}
	if len(pc.InSandbox) > 0 {
		dir.Logf("claude: %s sign or mint the provider's requests inside the sandbox: their real values are given to the CLI (no placeholder can stand in for them)", strings.Join(pc.InSandbox, ", "))
	}
	// HOME on its own tmpfs: nothing the CLI writes there (settings,
	// caches, the env file) reaches the image or the verifier's files.
	// (Owned by uid 10001 when mounted; the solve gives it to the user it
	// runs as, ResolveSolveUser.)
	if !a.onHost() {
		spec.Tmpfs = map[string]string{agentHome: "uid=10001,gid=10001,mode=0700,size=256m"}
	}
	user, _ := SolveUser(env.Spec(), t, img)
	return Placement{
		Driver: env.Driver(), Spec: spec, Networks: n, Workdir: workdir, User: user, Image: img, State: st,
	}, nil
}

// errNoGlibc marks a task image the CLI cannot run in.
var errNoGlibc = errors.New("the task image has no glibc loader (/lib64/ld-linux-x86-64.so.2; a musl image such as Alpine?): the Claude Code CLI is a glibc binary and cannot run there")

// binHashes caches the sha256 of a CLI binary by path, size and mtime, so
// a 400 MB file is hashed once per process.
var binHashes sync.Map

func binaryHash(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", p, fi.Size(), fi.ModTime().UnixNano())
	if h, ok := binHashes.Load(key); ok {
		return h.(string), nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", err
	}
	h := hex.EncodeToString(sum.Sum(nil))
	binHashes.Store(key, h)
	return h, nil
}

// ClaudeImageRef is the derived image of the CLI on a task image:
// proctor-claude:<image id hex[:12]>-<binary sha256[:12]>.
func ClaudeImageRef(taskImageID, binHash string) string {
	return cliImageRef("proctor-claude", taskImageID, binHash)
}

func cliImageRef(repo, taskImageID, binHash string) string {
	id := strings.TrimPrefix(taskImageID, "sha256:")
	return repo + ":" + id[:min(12, len(id))] + "-" + binHash[:min(12, len(binHash))]
}

// claudeCLI is the Claude Code CLI as a derived image adds it (not under
// /opt, which an image may close to other users): a glibc binary.
var claudeCLI = cliInstall{
	name: "claude", title: "the Claude Code CLI", repo: "proctor-claude", dir: claudeDir, bin: claudeBin,
	requires: "test -e /lib64/ld-linux-x86-64.so.2", missing: errNoGlibc,
}

// cliInstall is an agent CLI that a derived image adds to task images.
type cliInstall struct {
	// name prefixes log lines; title names the CLI in errors.
	name, title string
	// repo is the derived image's repository; dir and bin where the
	// binary goes in it.
	repo, dir, bin string
	// requires, when set, is a shell test the task image must pass before
	// the copy, else missing is the error.
	requires string
	missing  error
}

// claudeImage returns the task image with the Claude Code CLI (cliImage).
func claudeImage(ctx context.Context, env Env, img sandbox.ImageInfo, bin string) (string, error) {
	return cliImage(ctx, env, img, bin, claudeCLI)
}

// cliImage returns the task image with the CLI c (the host binary bin)
// at c.bin, committed once per (task image id, binary) with the driver's
// DerivedImager ability. The setup checks the image meets c.requires and
// that the copied binary prints its version.
func cliImage(ctx context.Context, env Env, img sandbox.ImageInfo, bin string, c cliInstall) (string, error) {
	d := env.Driver()
	di, ok := d.(sandbox.DerivedImager)
	if !ok {
		return "", fmt.Errorf("the sandbox driver %T cannot make derived images (%s)", d, c.title)
	}
	h, err := binaryHash(bin)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", c.title, err)
	}
	ref := cliImageRef(c.repo, img.ID, h)
	dir := env.Dir()
	made, err := di.EnsureDerived(ctx, ref, sandbox.Spec{
		RunID: env.RunID(), CellID: env.CellID(), Image: img.Ref, Network: sandbox.NetworkNone, Lifetime: installTimeout,
	}, func(ctx context.Context, hd *sandbox.Handle) error {
		var out bytes.Buffer
		if c.requires != "" {
			res, err := d.Exec(ctx, hd, sandbox.ExecSpec{Cmd: []string{"sh", "-c", c.requires}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return c.missing
			}
		}
		if err := d.CopyIn(ctx, hd, bin, c.dir); err != nil {
			return fmt.Errorf("copy %s in: %w", c.title, err)
		}
		out.Reset()
		res, err := d.Exec(ctx, hd, sandbox.ExecSpec{
			Cmd:    []string{"sh", "-c", "chmod 0755 " + c.dir + " " + c.bin + " && HOME=/tmp " + c.bin + " --version"},
			Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute,
		})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("%s does not run in %s: exit %d: %s", c.title, img.Ref, res.ExitCode, strings.TrimSpace(out.String()))
		}
		dir.Logf("%s: %s in %s", c.name, strings.TrimSpace(out.String()), ref)
		return nil
	})
	if err != nil {
		return "", err
	}
	if made {
		dir.Logf("%s: derived image %s made", c.name, ref)
	}
	return ref, nil
}

// ClaudeArgs is the CLI's argv in the task container: print mode,
// stream-json with every event, the fixed tool set, no settings from any
// file, no MCP server, no session file, built-in plugins off, permissions
// skipped (it runs as uid 10001 in a sandbox), --model unless model is ""
// or "default", and for the skill arm (skill not nil) the plugin
// directory. The prompt goes on stdin.
func ClaudeArgs(model string, skill *Skill) []string {
	args := []string{claudeBin, "-p", "--output-format", "stream-json", "--verbose",
		"--tools", "Read,Edit,Write,Bash,Glob,Grep,Skill",
		"--setting-sources", "", "--strict-mcp-config", "--no-session-persistence",
		"--settings", claudeSettings, "--dangerously-skip-permissions"}
	if model != "" && model != "default" {
		args = append(args, "--model", model)
	}
	if skill != nil {
		args = append(args, "--plugin-dir", SkillPluginDir)
	}
	return args
}

// claudeSettings turns off the plugins built into the CLI (2.1.332 ships
// three), so the control arm offers no skill but the CLI's own and the
// skill arm exactly one more.
const claudeSettings = `{"enabledPlugins":{"cc-plugin-agents-md@builtin":false,"cc-plugin-privacy@builtin":false,"cc-plugin-plugin-authoring@builtin":false}}`

// envFile renders env as lines `export K='v'` for sh to source.
func envFile(env map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString("export " + k + "=" + shq(env[k]) + "\n")
	}
	return b.Bytes()
}

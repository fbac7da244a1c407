package task

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/proctor-eval/proctor/pkg/dockerfile"
)

// MainService is the compose service that is the task container, as in
// Harbor's compose environments.
const MainService = "main"

// Compose is a task's compose environment (environment/docker-compose.yaml
// defining a `main` service) after proctor's network rules: the sidecar
// services to start beside the task container, what the file adds to
// `main`, and the rewrites applied. Harbor merges the task's file over a
// base where `main` is built from environment/ and kept alive with a
// sleep; proctor does the same merge with the Compose specification's
// library (github.com/compose-spec/compose-go/v2) and then creates the
// services through the engine API itself (package sandbox/docker).
type Compose struct {
	// File is the compose file's path.
	File string `json:"file"`
	// Services are the sidecars (every service but main), sorted by name.
	Services []ComposeService `json:"services,omitempty"`
	// MainEnv is main's `environment` (laid under the task's env).
	MainEnv map[string]string `json:"main_env,omitempty"`
	// MainDependsOn is main's `depends_on`: service -> condition
	// (service_started, service_healthy, service_completed_successfully).
	MainDependsOn map[string]string `json:"main_depends_on,omitempty"`
	// Rewrites are the keys proctor dropped because the cell's network
	// policy decides them (ports, networks, ...), one sentence each; they
	// are also in Task.Warnings.
	Rewrites []string `json:"rewrites,omitempty"`
	// Unset names each variable the file uses bare ($VAR or ${VAR}, no
	// default) that the environment's .env does not set, so it is blank,
	// one sentence each (sorted); they are also in Task.Warnings.
	Unset []string `json:"unset,omitempty"`
}

// ComposeService is one sidecar service of a compose environment.
type ComposeService struct {
	// Name is the service name: its DNS name on the cell's network.
	Name string `json:"name"`
	// Image is `image:` when the service is not built ("" when it is).
	Image string `json:"image,omitempty"`
	// BuildContext is the absolute build context directory ("" when the
	// service runs Image).
	BuildContext string `json:"build_context,omitempty"`
	// Dockerfile is build.dockerfile: the Dockerfile's path relative to
	// BuildContext, with forward slashes ("" for Dockerfile at its root).
	Dockerfile string `json:"dockerfile,omitempty"`
	// BuildArgs are build.args with a value (after the file's variable
	// interpolation); BuildTarget is build.target, the stage built.
	BuildArgs   map[string]string `json:"build_args,omitempty"`
	BuildTarget string            `json:"build_target,omitempty"`
	// Entrypoint and Command replace the image's (nil: the image's).
	Entrypoint []string `json:"entrypoint,omitempty"`
	Command    []string `json:"command,omitempty"`
	// Env is `environment` (entries without a value are left out).
	Env map[string]string `json:"env,omitempty"`
	// Workdir and User are working_dir and user.
	Workdir string `json:"workdir,omitempty"`
	User    string `json:"user,omitempty"`
	// Healthcheck is the service's healthcheck (nil: none or disabled).
	Healthcheck *ComposeHealthcheck `json:"healthcheck,omitempty"`
	// DependsOn maps a service to its condition.
	DependsOn map[string]string `json:"depends_on,omitempty"`
	// Expose lists `expose` (documentation only: on the cell's network
	// every port of a service is reachable by its peers).
	Expose []string `json:"expose,omitempty"`
	// CPUs and MemoryMB are `cpus` and `mem_limit` (0: the driver's default).
	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
}

// ComposeHealthcheck is a service healthcheck in the engine's terms: Test
// as compose writes it (["CMD", ...], ["CMD-SHELL", "..."]), durations in
// nanoseconds (0: the engine's default).
type ComposeHealthcheck struct {
	Test        []string      `json:"test"`
	Interval    time.Duration `json:"interval,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	StartPeriod time.Duration `json:"start_period,omitempty"`
	Retries     int           `json:"retries,omitempty"`
}

// noteUnset adds to unset each variable s uses bare ($VAR or ${VAR}, no
// default, not $$-escaped) that m does not set: those compose
// interpolates as blank.
func noteUnset(s string, m template.Mapping, unset map[string]bool) {
	p := template.DefaultPattern
	named, braced := p.SubexpIndex("named"), p.SubexpIndex("braced")
	for _, g := range p.FindAllStringSubmatch(s, -1) {
		v := ""
		switch {
		case named >= 0 && g[named] != "":
			v = g[named]
		case braced >= 0 && bareName.MatchString(g[braced]):
			v = g[braced]
		}
		if v == "" {
			continue
		}
		if _, ok := m(v); !ok {
			unset[v] = true
		}
	}
}

// bareName is a variable name with nothing after it (no default, no
// required-value message).
var bareName = regexp.MustCompile(`^[_a-zA-Z][_a-zA-Z0-9]*$`)

// composeBase is the base the task's file is merged over, as Harbor's
// docker-compose-build.yaml: main is built from the environment directory.
const composeBase = "services:\n  main:\n    build:\n      context: .\n"

// LoadCompose parses the compose file at file (in the task's environment
// directory envDir) merged over the base where main is the task container,
// and applies proctor's rules (DESIGN §4, "Compose environments"):
//
//   - refused (the error names the file, the service and the key): a
//     network_mode, privileged, cap_add, devices, pid/ipc/uts/userns_mode,
//     security_opt, sysctls, cgroup_parent, volumes, volumes_from,
//     external_links, secrets, configs, env_file, a build's
//     dockerfile_inline, a build context or Dockerfile outside envDir (or
//     a Dockerfile outside its context), a build.target no stage of the
//     Dockerfile is named, scale or replicas other than 1, and depends_on
//     a service that does not exist; anything the cell's network policy
//     or isolation could not hold once the container runs;
//   - built as compose builds them: build.dockerfile (another name or a
//     subdirectory of the context), build.args and build.target, through
//     the image cache and the image map (sandbox.BuildSpec); an argument
//     without a value (compose would take it from the shell) is left to
//     the Dockerfile's default, since proctor's own environment is never
//     forwarded (the file's .env is);
//   - rewritten (Compose.Rewrites): ports (nothing is published on the
//     host), networks and links (every service is on the cell's own
//     network only, under its service name), container_name and hostname
//     (names are per cell), dns and extra_hosts (the cell's network
//     decides), restart (a cell's services live as long as the cell);
//     main's build, image, command and entrypoint (main is the task
//     container proctor builds and keeps alive).
//
// Variables in the file are interpolated from the file's .env only, never
// from proctor's own environment; a variable used bare that .env does not
// set is blank and listed in Compose.Unset (the library's own warning
// would reach stderr as a raw log line naming no task, and call HOME
// unset where the user's shell sets it).
func LoadCompose(file, envDir string) (*Compose, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(file)
	dotenv := map[string]string{}
	if b, err := os.ReadFile(filepath.Join(envDir, ".env")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				dotenv[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
			}
		}
	}
	unset := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proj, err := loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir: envDir,
		ConfigFiles: []types.ConfigFile{
			{Filename: filepath.Join(envDir, "proctor-base.yaml"), Content: []byte(composeBase)},
			{Filename: file, Content: data},
		},
		Environment: dotenv,
	}, func(o *loader.Options) {
		o.SetProjectName("proctor", true)
		o.SkipResolveEnvironment = true
		o.SkipConsistencyCheck = false
		o.Interpolate.Substitute = func(s string, m template.Mapping) (string, error) {
			noteUnset(s, m, unset)
			return template.SubstituteWithOptions(s, m, template.WithoutLogging)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	c := &Compose{File: file}
	for _, v := range slices.Sorted(maps.Keys(unset)) {
		c.Unset = append(c.Unset, fmt.Sprintf("%s: ${%s} is blank: environment/.env does not set it (a compose file is interpolated from its task's .env only, never from proctor's environment)", name, v))
	}
	names := slices.Sorted(maps.Keys(proj.Services))
	absEnv, _ := filepath.Abs(envDir)
	for _, n := range names {
		svc := proj.Services[n]
		where := fmt.Sprintf("%s: service %s", name, n)
		if err := refuseService(svc); err != "" {
			return nil, fmt.Errorf("%s: %s", where, err)
		}
		rewrite := func(key, why string) {
			c.Rewrites = append(c.Rewrites, fmt.Sprintf("%s: %s dropped (%s)", where, key, why))
		}
		if len(svc.Ports) > 0 {
			rewrite("ports", "nothing is published on the host; peers reach a service by its name")
		}
		if _, dflt := svc.Networks["default"]; len(svc.Networks) > 1 || (len(svc.Networks) == 1 && !dflt) {
			rewrite("networks", "every service is on the cell's own network only")
		}
		if len(svc.Links) > 0 {
			rewrite("links", "every service is reached by its name on the cell's network")
		}
		if svc.ContainerName != "" || svc.Hostname != "" {
			rewrite("container_name/hostname", "names are per cell")
		}
		if len(svc.DNS) > 0 || len(svc.ExtraHosts) > 0 {
			rewrite("dns/extra_hosts", "the cell's network policy decides name resolution")
		}
		if svc.Restart != "" && svc.Restart != types.RestartPolicyNo {
			rewrite("restart", "a cell's services live as long as the cell")
		}
		deps := map[string]string{}
		for dep, d := range svc.DependsOn {
			if _, ok := proj.Services[dep]; !ok {
				return nil, fmt.Errorf("%s: depends_on %s, which is not a service", where, dep)
			}
			cond := d.Condition
			if cond == "" {
				cond = types.ServiceConditionStarted
			}
			switch cond {
			case types.ServiceConditionStarted, types.ServiceConditionHealthy, types.ServiceConditionCompletedSuccessfully:
			default:
				return nil, fmt.Errorf("%s: depends_on %s: condition %q (want service_started, service_healthy or service_completed_successfully)", where, dep, cond)
			}
			if cond == types.ServiceConditionHealthy {
				if hc := proj.Services[dep].HealthCheck; hc == nil || hc.Disable || len(hc.Test) == 0 {
					return nil, fmt.Errorf("%s: depends_on %s with service_healthy, but %s has no healthcheck", where, dep, dep)
				}
			}
			if dep == MainService {
				return nil, fmt.Errorf("%s: depends_on main (main, the task container, starts last)", where)
			}
			deps[dep] = cond
		}
		env := map[string]string{}
		for k, v := range svc.Environment {
			if v != nil {
				env[k] = *v
			}
		}
		if n == MainService {
			if svc.Image != "" || (svc.Build != nil && filepath.Clean(svc.Build.Context) != absEnv) {
				rewrite("main's image/build", "main is the task container, built from environment/")
			}
			if len(env) > 0 {
				c.MainEnv = env
			}
			if len(deps) > 0 {
				c.MainDependsOn = deps
			}
			continue
		}
		s := ComposeService{Name: n, Env: env, Workdir: svc.WorkingDir, User: svc.User, DependsOn: deps,
			Entrypoint: svc.Entrypoint, Command: svc.Command, CPUs: float64(svc.CPUS), MemoryMB: int64(svc.MemLimit) >> 20}
		if len(env) == 0 {
			s.Env = nil
		}
		if len(deps) == 0 {
			s.DependsOn = nil
		}
		for _, e := range svc.Expose {
			s.Expose = append(s.Expose, e)
		}
		switch {
		case svc.Build != nil:
			ctxDir := filepath.Clean(svc.Build.Context)
			if rel, err := filepath.Rel(absEnv, ctxDir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return nil, fmt.Errorf("%s: build.context %s leaves the environment directory", where, svc.Build.Context)
			}
			if svc.Build.DockerfileInline != "" {
				return nil, fmt.Errorf("%s: build.dockerfile_inline is not supported (write the Dockerfile into the environment directory)", where)
			}
			df, err := composeDockerfile(ctxDir, svc.Build.Dockerfile)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			dfPath := filepath.Join(ctxDir, filepath.FromSlash(df))
			if !isFile(dfPath) {
				if df == "Dockerfile" {
					return nil, fmt.Errorf("%s: build.context %s has no Dockerfile", where, svc.Build.Context)
				}
				return nil, fmt.Errorf("%s: build.dockerfile %s does not exist in the build context", where, svc.Build.Dockerfile)
			}
			for _, k := range slices.Sorted(maps.Keys(svc.Build.Args)) {
				if v := svc.Build.Args[k]; v != nil {
					if s.BuildArgs == nil {
						s.BuildArgs = map[string]string{}
					}
					s.BuildArgs[k] = *v
				} else {
					rewrite("build.args "+k, "it has no value and proctor never forwards its own environment; the Dockerfile's default applies")
				}
			}
			if tg := svc.Build.Target; tg != "" {
				if err := hasStage(dfPath, tg, s.BuildArgs); err != nil {
					return nil, fmt.Errorf("%s: build.target %q: %v", where, tg, err)
				}
				s.BuildTarget = tg
			}
			if df != "Dockerfile" {
				s.Dockerfile = df
			}
			s.BuildContext = ctxDir
		case svc.Image != "":
			s.Image = svc.Image
		default:
			return nil, fmt.Errorf("%s: neither image nor build", where)
		}
		if hc := svc.HealthCheck; hc != nil && !hc.Disable && len(hc.Test) > 0 && hc.Test[0] != "NONE" {
			h := &ComposeHealthcheck{Test: hc.Test}
			if hc.Interval != nil {
				h.Interval = time.Duration(*hc.Interval)
			}
			if hc.Timeout != nil {
				h.Timeout = time.Duration(*hc.Timeout)
			}
			if hc.StartPeriod != nil {
				h.StartPeriod = time.Duration(*hc.StartPeriod)
			}
			if hc.Retries != nil {
				h.Retries = int(*hc.Retries)
			}
			s.Healthcheck = h
		}
		c.Services = append(c.Services, s)
	}
	if _, ok := proj.Services[MainService]; !ok {
		return nil, fmt.Errorf("%s: no main service", name)
	}
	if err := dependencyCycle(c); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	sort.Strings(c.Rewrites)
	return c, nil
}

// composeDockerfile returns build.dockerfile as a slash-separated path
// relative to the build context ctxDir ("Dockerfile" when df is ""): a
// relative df is taken in the context, as compose does; an absolute one
// must lie inside it. A Dockerfile outside the context is refused (the
// classic builder reads it from the context).
func composeDockerfile(ctxDir, df string) (string, error) {
	if df == "" {
		return "Dockerfile", nil
	}
	p := df
	if !filepath.IsAbs(p) {
		p = filepath.Join(ctxDir, p)
	}
	rel, err := filepath.Rel(ctxDir, filepath.Clean(p))
	if err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("build.dockerfile %s is outside the build context %s", df, ctxDir)
	}
	return filepath.ToSlash(rel), nil
}

// hasStage reports an error unless the Dockerfile at file has a stage named
// target (FROM ... AS target, compared without case, as the builder does).
func hasStage(file, target string, args map[string]string) error {
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	f, err := dockerfile.ParseArgs(src, args)
	if err != nil {
		return err
	}
	var names []string
	for _, st := range f.Stages {
		if st.Name == strings.ToLower(target) {
			return nil
		}
		if st.Name != "" {
			names = append(names, st.Name)
		}
	}
	return fmt.Errorf("%s has no stage of that name (stages: %s)", filepath.Base(file), strings.Join(names, ", "))
}

// refuseService returns why a service cannot run under proctor's isolation
// ("" when it can).
func refuseService(svc types.ServiceConfig) string {
	switch {
	case svc.NetworkMode != "" || svc.Net != "":
		return fmt.Sprintf("network_mode %q is refused: every service runs on the cell's own network under the task's network policy", svc.NetworkMode+svc.Net)
	case svc.Privileged:
		return "privileged is refused"
	case len(svc.CapAdd) > 0:
		return "cap_add is refused"
	case len(svc.Devices) > 0 || len(svc.DeviceCgroupRules) > 0 || len(svc.Gpus) > 0:
		return "devices and gpus are refused"
	case svc.Pid != "" || svc.Ipc != "" || svc.Uts != "" || svc.UserNSMode != "" || svc.Cgroup != "":
		return "pid, ipc, uts, userns_mode and cgroup are refused (no namespace is shared with the host or another container)"
	case len(svc.SecurityOpt) > 0 || len(svc.Sysctls) > 0 || svc.CgroupParent != "" || svc.Runtime != "":
		return "security_opt, sysctls, cgroup_parent and runtime are refused"
	case len(svc.Volumes) > 0 || len(svc.VolumesFrom) > 0:
		return "volumes and volumes_from are not supported (files move through the copy API; nothing of the host is mounted)"
	case len(svc.ExternalLinks) > 0:
		return "external_links is refused (a cell reaches no container outside it)"
	case svc.GetScale() != 1:
		return "scale/replicas other than 1 is not supported"
	case len(svc.Secrets) > 0 || len(svc.Configs) > 0:
		return "secrets and configs are not supported"
	case len(svc.EnvFiles) > 0:
		return "env_file is not supported (write the variables under environment)"
	}
	return ""
}

// dependencyCycle reports a depends_on cycle among the sidecars.
func dependencyCycle(c *Compose) error {
	deps := map[string]map[string]string{}
	for _, s := range c.Services {
		deps[s.Name] = s.DependsOn
	}
	state := map[string]int{}
	var visit func(string) error
	visit = func(n string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("depends_on cycle through %s", n)
		case 2:
			return nil
		}
		state[n] = 1
		for _, d := range slices.Sorted(maps.Keys(deps[n])) {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[n] = 2
		return nil
	}
	for _, s := range c.Services {
		if err := visit(s.Name); err != nil {
			return err
		}
	}
	return nil
}

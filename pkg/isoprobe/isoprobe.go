// Package isoprobe is the isolation probe's class logic (DESIGN §6): what
// a program running as the agent, inside the agent's sandbox, can see of
// the task's answer, the treatment, the operator, the checkout, the
// network, the host's environment, the Docker engine, a resolver and a work
// tree's git history. Run does the looking (it is what `proctor
// probe-inside` runs in the sandbox, as a static binary, so the task image
// needs no shell tools or interpreter); Fold turns a Report into the
// pass/fail of the probe row. Everything here works on a root directory
// and an environment given to it, so it is tested without a container.
package isoprobe

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Status of one leak class.
const (
	// Open: the agent could see or reach it.
	Open = "open"
	// Closed: looked, and it was not visible or reachable.
	Closed = "closed"
	// NA: the class does not apply (no repository in the work tree, no
	// skill to protect, no host value dropped).
	NA = "n/a"
	// Untested: the probe could not decide; it fails like Open.
	Untested = "untested"
	// Expected: open, and the task declares it open on purpose
	// (metadata.probe_expect, with a reason); it passes. Only Fold gives
	// it: the probe program reports open.
	Expected = "expected"
)

// The leak classes, in report order: the eight of DESIGN §6 and the
// seed, then git_history.
const (
	TaskFiles      = "task_files"
	Treatment      = "treatment"
	OperatorConfig = "operator_config"
	CheckoutWalk   = "checkout_walk"
	Network        = "network"
	Env            = "env"
	DockerAPI      = "docker_api"
	DNS            = "dns"
	GitHistory     = "git_history"
)

// Classes lists every leak class in report order.
var Classes = []string{TaskFiles, Treatment, OperatorConfig, CheckoutWalk, Network, Env, DockerAPI, DNS, GitHistory}

// Targets are the endpoints the network and dns classes try to reach: URL
// with an HTTP GET, TCP with a connect (directly and through a CONNECT of
// every proxy in the environment), DNS with a lookup, and the ports of
// Gateway (slash-separated) on each gateway of the sandbox's networks, the
// host's side of them. An empty URL, TCP or DNS target leaves its class
// untested.
type Targets struct {
	URL     string `json:"url"`
	TCP     string `json:"tcp"`
	DNS     string `json:"dns"`
	Gateway string `json:"gateway,omitempty"`
}

// DefaultGatewayPorts is the sample of ports tried on the sandbox's
// gateways when the targets name none: where a host commonly runs a
// service on all interfaces (ssh, DNS, web servers and dev servers, the
// Docker API, databases and caches, NATS and its monitor, Kubernetes,
// Elasticsearch, Ollama, MongoDB).
const DefaultGatewayPorts = "22/53/80/443/2375/2376/3000/3306/4222/5000/5432/6379/6443/8000/8080/8222/8443/8888/9000/9090/9200/11434/27017"

// DefaultTargets are the seed's, example.com and 1.1.1.1:443, and the
// gateway sample DefaultGatewayPorts.
func DefaultTargets() Targets {
	return Targets{URL: "http://example.com/", TCP: "1.1.1.1:443", DNS: "example.com", Gateway: DefaultGatewayPorts}
}

// GatewayPorts returns the ports of t.Gateway (each once, in order); a
// malformed entry is left out (ParseTargets refuses it).
func (t Targets) GatewayPorts() []int {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(t.Gateway, "/") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > 65535 || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

// ParseTargets reads `url=URL,tcp=HOST:PORT,dns=NAME,gateway=PORT/PORT...`
// (the --probe-targets flag and PROCTOR_PROBE_TARGETS): each key at most
// once, in any order; a key left out keeps its default (DefaultTargets).
// "" is the defaults. Errors name the key: an unknown key, an empty value,
// a URL that is not absolute http(s), a tcp target without a port, a
// gateway port that is not a number in 1-65535.
func ParseTargets(s string) (Targets, error) {
	t := DefaultTargets()
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return t, fmt.Errorf("probe targets %q: %q: write key=value (url=URL, tcp=HOST:PORT, dns=NAME, gateway=PORT/PORT...)", s, part)
		}
		if seen[k] {
			return t, fmt.Errorf("probe targets %q: key %s given twice", s, k)
		}
		seen[k] = true
		switch k {
		case "url":
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return t, fmt.Errorf("probe targets %q: key url: %q is not an absolute http:// or https:// URL", s, v)
			}
			t.URL = v
		case "tcp":
			if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
				return t, fmt.Errorf("probe targets %q: key tcp: %q is not HOST:PORT", s, v)
			}
			t.TCP = v
		case "dns":
			if strings.ContainsAny(v, " /:") {
				return t, fmt.Errorf("probe targets %q: key dns: %q is not a host name", s, v)
			}
			t.DNS = v
		case "gateway":
			for _, f := range strings.Split(v, "/") {
				if p, err := strconv.Atoi(strings.TrimSpace(f)); err != nil || p < 1 || p > 65535 {
					return t, fmt.Errorf("probe targets %q: key gateway: %q is not a port (1-65535); write gateway=PORT/PORT...", s, f)
				}
			}
			t.Gateway = v
		default:
			return t, fmt.Errorf("probe targets %q: unknown key %q (url, tcp, dns, gateway)", s, k)
		}
	}
	return t, nil
}

// String is the targets in ParseTargets syntax.
func (t Targets) String() string {
	s := "url=" + t.URL + ",tcp=" + t.TCP + ",dns=" + t.DNS
	if t.Gateway != "" {
		s += ",gateway=" + t.Gateway
	}
	return s
}

// FileSig names one file of the task's tests or solution by size in bytes
// and hex SHA-256: a readable file anywhere in the sandbox with the same
// contents opens task_files, unless Input is set.
type FileSig struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Input names a file of the task's input with the same contents (in
	// the environment's build context, or a step's workdir/): the task
	// ships this content to the agent, so a copy in the sandbox is input
	// (an info line of task_files), not a leak. Set only for a tests
	// file: a solution file shipped as input is the answer in the image.
	Input string `json:"input,omitempty"`
}

// Config is what the host tells the probe inside the sandbox.
type Config struct {
	// Root is the file system root ("/" in a sandbox; a directory in
	// tests). Every other path is inside it.
	Root string `json:"root"`
	// Workdir is the agent's working directory; Home its HOME.
	Workdir string  `json:"workdir"`
	Home    string  `json:"home"`
	Targets Targets `json:"targets"`
	// TaskFiles are the task's tests/ and solution/ files.
	TaskFiles []FileSig `json:"task_files,omitempty"`
	// Skill is the directory of the skill a skill arm installs (the
	// docker-probe:<skill-path> form): it must be visible there and
	// nowhere else is a skill allowed. "" for a baseline probe.
	Skill string `json:"skill,omitempty"`
	// Forbid is the skill a docker-probe:<skill-path> probe forbids in
	// the baseline's sandbox: treatment is open when the agent can read
	// it at its host path, any copy of its files anywhere, or anything of
	// its name in a place a skill is offered (SkillPlaces); nil for other
	// probes.
	Forbid *ForbiddenSkill `json:"forbid,omitempty"`
	// Protect names the skills the run has to keep from a baseline agent
	// (the task's environment/skills, the run's skill arms'). With no
	// Skill and nothing to protect, treatment is n/a unless a skill is
	// visible all the same.
	Protect []string `json:"protect,omitempty"`
	// EnvAllowed are the variable names the agent's environment may hold
	// (the image's ENV, the task's declared env, the arm's own); nil
	// leaves env untested.
	EnvAllowed []string `json:"env_allowed,omitempty"`
	// EnvKey (hex) and EnvValues are the host values the sandbox was not
	// given (SealEnv); EnvDropped counts the host variables it was not
	// given. No EnvValues: env is n/a unless a name is beyond EnvAllowed.
	EnvKey     string     `json:"env_key,omitempty"`
	EnvValues  []EnvValue `json:"env_values,omitempty"`
	EnvDropped int        `json:"env_dropped,omitempty"`
	// Allowlist is the sandbox's egress allowlist (egress.ParsePolicy
	// syntax; empty without a proxy): a target on it that the proxy lets
	// through is the policy as declared, not a leak (see network).
	Allowlist []string `json:"allowlist,omitempty"`
	// Skip are directories the walk does not enter (the probe's own
	// stage directory).
	Skip []string `json:"skip,omitempty"`
	// TimeoutSec bounds each network attempt (0: 3 s).
	TimeoutSec float64 `json:"timeout_sec,omitempty"`
	// MaxEntries bounds the file system walk (0: 2,000,000 entries); a
	// walk cut short leaves task_files and treatment untested.
	MaxEntries int `json:"max_entries,omitempty"`
}

// ForbiddenSkill is a skill the agent of the sandbox must not reach.
type ForbiddenSkill struct {
	// Name is the skill's directory name (and its frontmatter name, when
	// that differs, in Names).
	Name  string   `json:"name"`
	Names []string `json:"names,omitempty"`
	// HostDir is the skill's absolute directory on the host: the probe
	// reads it, and each of Files under it, at that same absolute path.
	HostDir string `json:"host_dir"`
	// Files are the skill's regular files (Name relative to HostDir): a
	// readable file anywhere with the contents of one of at least
	// minSigSize bytes opens treatment.
	Files []FileSig `json:"files,omitempty"`
	// Places are the host's own places a skill is offered in (where a
	// skill arm installs one); SkillPlaces adds the agents' own.
	Places []string `json:"places,omitempty"`
}

// Finding is one class's result: its status and what was seen (at most
// maxEvidence lines; paths, addresses, errors). Info lines are what was
// seen and is not a leak (a grader file's contents the task also ships
// as input, an operator's directory holding nothing): shown, never
// deciding the status.
type Finding struct {
	Status   string   `json:"status"`
	Evidence []string `json:"evidence,omitempty"`
	Info     []string `json:"info,omitempty"`
}

// Report is the probe's whole answer, as `proctor probe-inside` prints it.
type Report struct {
	Classes map[string]Finding `json:"classes"`
	// EnvLeaked are the host variables whose values the probe saw in an
	// environment it could read (Config.EnvValues).
	EnvLeaked []string `json:"env_leaked,omitempty"`
	// EnvUnexpected are the names of the probe's variables beyond
	// Config.EnvAllowed.
	EnvUnexpected []string `json:"env_unexpected,omitempty"`
	// GatewayReached are the gateway addresses (ip:port) that accepted a
	// connection: services of the host the sandbox reaches (they open
	// network; `proctor firewall apply` closes them).
	GatewayReached []string `json:"gateway_reached,omitempty"`
	// Walked is how many file system entries the walk visited.
	Walked int `json:"walked"`
}

// maxEvidence bounds each class's evidence lines.
const maxEvidence = 20

func (f *Finding) add(format string, a ...any) {
	if len(f.Evidence) < maxEvidence {
		f.Evidence = append(f.Evidence, fmt.Sprintf(format, a...))
	}
}

func (f *Finding) info(format string, a ...any) {
	if len(f.Info) < maxEvidence {
		f.Info = append(f.Info, fmt.Sprintf(format, a...))
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

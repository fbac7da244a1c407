package task

import (
	"fmt"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Default budgets in seconds, as Harbor's TaskConfig defaults them.
const (
	DefaultAgentTimeoutSec    = 600.0
	DefaultVerifierTimeoutSec = 600.0
	DefaultBuildTimeoutSec    = 600.0
)

// benchflowKeys are the top-level frontmatter keys BenchFlow 0.7 knows: its
// task config fields, the document keys, the authoring keys and the legacy
// environment table. A task.md beside a task.toml loads as a task only when
// every top-level key is one of these (see isBenchFlowDocument).
var benchflowKeys = map[string]bool{
	// task config fields
	"schema_version": true, "task": true, "metadata": true, "verifier": true,
	"agent": true, "sandbox": true, "solution": true, "oracle": true,
	"source": true, "reward": true, "multi_step_reward_strategy": true,
	"steps": true, "artifacts": true,
	// document keys
	"agents": true, "benchflow": true, "scenes": true, "user": true,
	// authoring keys
	"image": true, "name": true, "profile": true, "profiles": true,
	// legacy sandbox table
	"environment": true,
}

// configReader interprets a parsed task.toml or task.md frontmatter. pos
// gives lines for errors; unchecked collects the keys read past.
type configReader struct {
	pos       positions
	lazyPos   func() positions // builds pos on first use when set
	markdown  bool
	strict    bool // unknown keys are an error, not a warning
	lookup    LookupEnv
	unchecked []string
	warnings  []string
}

func (r *configReader) errf(key, format string, args ...any) *fileError {
	if r.pos == nil && r.lazyPos != nil {
		r.pos = r.lazyPos()
	}
	return errAt(r.pos.line(key), key, format, args...)
}

func (r *configReader) skip(key string) { r.unchecked = append(r.unchecked, key) }

// apply fills t from the definition m. Errors name the key and its line.
func (r *configReader) apply(t *Task, m map[string]any) error {
	t.AgentTimeoutSec = DefaultAgentTimeoutSec
	t.VerifierTimeoutSec = DefaultVerifierTimeoutSec
	t.BuildTimeoutSec = DefaultBuildTimeoutSec

	if r.markdown {
		// BenchFlow authoring shorthands expand into defaults proctor does
		// not reproduce; refuse them rather than run something else.
		if _, ok := m["image"]; ok {
			return r.errf("image", "the BenchFlow shorthand image: is not supported; set sandbox.docker_image instead")
		}
		for _, k := range []string{"profile", "profiles"} {
			if _, ok := m[k]; ok {
				return r.errf(k, "BenchFlow authoring profiles (%s:) are not supported; write out the tables the profile would fill", k)
			}
		}
		for _, k := range []string{"verifier", "oracle"} {
			if v, ok := m[k]; ok {
				if _, isStr := v.(string); isStr {
					return r.errf(k, "the BenchFlow path shorthand %s: <path> is not supported; put the files in %s/ and write %s as a mapping", k, k, k)
				}
			}
		}
	}
	if _, ok := m["environment"]; ok {
		if _, ok := m["sandbox"]; ok {
			return r.errf("sandbox", "both a sandbox table and the legacy environment table are declared; keep only sandbox")
		}
	}
	if _, ok := m["solution"]; ok {
		if _, ok := m["oracle"]; ok {
			return r.errf("oracle", "both an oracle table and the legacy solution table are declared; keep only oracle")
		}
	}

	keys := sortedKeys(m)
	var verifierEnv, oracleEnv, sandboxEnv map[string]any
	var envNet, agentNet, verifierNet netSpec
	for _, k := range keys {
		v := m[k]
		switch k {
		case "version", "schema_version":
			s, err := r.scalarString(v, k)
			if err != nil {
				return err
			}
			if k == "schema_version" || t.SchemaVersion == "" {
				t.SchemaVersion = s
			}
		case "metadata":
			md, err := r.mapping(v, k)
			if err != nil {
				return err
			}
			t.Metadata = md
		case "task":
			if err := r.readTaskTable(t, v); err != nil {
				return err
			}
		case "name":
			if !r.markdown {
				r.skip(k)
				continue
			}
			s, err := r.str(v, k)
			if err != nil {
				return err
			}
			if t.TaskName == "" {
				t.TaskName = s
			}
		case "verifier":
			tbl, err := r.mapping(v, k)
			if err != nil {
				return err
			}
			for _, sk := range sortedKeys(tbl) {
				p := k + "." + sk
				sv := tbl[sk]
				switch sk {
				case "timeout_sec":
					if t.VerifierTimeoutSec, err = r.timeout(sv, p); err != nil {
						return err
					}
				case "env":
					if verifierEnv, err = r.mapping(sv, p); err != nil {
						return err
					}
				case "user":
					if t.VerifierUser, err = r.user(sv, p); err != nil {
						return err
					}
				case "network_mode", "allowed_hosts", "egress":
					if err := r.readNet(&verifierNet, sk, sv, p); err != nil {
						return err
					}
				default:
					r.skip(p)
				}
			}
		case "agent":
			tbl, err := r.mapping(v, k)
			if err != nil {
				return err
			}
			for _, sk := range sortedKeys(tbl) {
				p := k + "." + sk
				sv := tbl[sk]
				switch sk {
				case "timeout_sec":
					if t.AgentTimeoutSec, err = r.timeout(sv, p); err != nil {
						return err
					}
				case "user":
					if t.AgentUser, err = r.user(sv, p); err != nil {
						return err
					}
				case "network_mode", "allowed_hosts", "egress":
					if err := r.readNet(&agentNet, sk, sv, p); err != nil {
						return err
					}
				default:
					r.skip(p)
				}
			}
		case "environment", "sandbox":
			tbl, err := r.mapping(v, k)
			if err != nil {
				return err
			}
			if sandboxEnv, err = r.readSandbox(t, &envNet, tbl, k); err != nil {
				return err
			}
		case "solution", "oracle":
			tbl, err := r.mapping(v, k)
			if err != nil {
				return err
			}
			for _, sk := range sortedKeys(tbl) {
				p := k + "." + sk
				if sk == "env" {
					if oracleEnv, err = r.mapping(tbl[sk], p); err != nil {
						return err
					}
					continue
				}
				r.skip(p)
			}
		case "source":
			s, err := r.str(v, k)
			if err != nil {
				return err
			}
			t.Source = s
		case "artifacts":
			if v == nil {
				continue
			}
			l, ok := v.([]any)
			if !ok {
				return r.errf(k, "must be a list, not %s", kindOf(v))
			}
			t.Artifacts = l
		case "steps":
			if v != nil {
				t.Unsupported = "multi-step task (steps): not supported yet, listed only"
			}
			r.skip(k)
		case "agents", "scenes", "user":
			if r.markdown && v != nil {
				t.MultiRole = true
			}
			r.skip(k)
		default:
			r.skip(k)
		}
	}

	var err error
	if t.Network, err = envNet.resolve(NetworkPolicy{Mode: NetworkPublic}); err != nil {
		return r.errf(envNet.key, "%v", err)
	}
	if t.AgentNetwork, err = agentNet.resolve(t.Network); err != nil {
		return r.errf(agentNet.key, "%v", err)
	}
	if t.VerifierNetwork, err = verifierNet.resolve(t.Network); err != nil {
		return r.errf(verifierNet.key, "%v", err)
	}
	if envNet.allowInternetSet && envNet.mode != "" {
		r.warnings = append(r.warnings, fmt.Sprintf("%s.network_mode %q overrides the deprecated allow_internet", envNet.table, envNet.mode))
	}

	oracleTable := "solution.env"
	if _, ok := m["oracle"]; ok {
		oracleTable = "oracle.env"
	}
	sandboxTable := "environment.env"
	if _, ok := m["sandbox"]; ok {
		sandboxTable = "sandbox.env"
	}
	ve := resolveEnv(verifierEnv, "verifier.env", r.lookup)
	oe := resolveEnv(oracleEnv, oracleTable, r.lookup)
	se := resolveEnv(sandboxEnv, sandboxTable, r.lookup)
	t.VerifierEnv, t.OracleEnv, t.SandboxEnv = ve.values, oe.values, se.values
	t.UnresolvedEnv = mergeUnresolved(ve.unresolved, oe.unresolved, se.unresolved)
	r.warnings = append(r.warnings, ve.warnings...)
	r.warnings = append(r.warnings, oe.warnings...)
	r.warnings = append(r.warnings, se.warnings...)

	if t.MultiRole {
		r.warnings = append(r.warnings, "multi-role document (agents/scenes/user): runs as one agent with the base prompt")
	}
	if err := r.checkKeys(t, m); err != nil {
		return err
	}
	sort.Strings(r.unchecked)
	return nil
}

// checkKeys fills t.UnknownKeys with the keys of m that neither proctor,
// Harbor nor BenchFlow defines, warns about each, and drops them from the
// unchecked keys. In strict mode any unknown key is an error naming the
// first one's key and line and listing them all.
func (r *configReader) checkKeys(t *Task, m map[string]any) error {
	schema := tomlKeys
	if r.markdown {
		schema = markdownKeys
	}
	unknown := findUnknownKeys(m, schema, r.markdown, func(p string) int {
		if r.pos == nil && r.lazyPos != nil {
			r.pos = r.lazyPos()
		}
		if l, ok := r.pos[p]; ok {
			return l
		}
		return r.pos.line(indexRE.ReplaceAllString(p, "")) // [[task.authors]] keys are indexed without [i]
	})
	if len(unknown) == 0 {
		return nil
	}
	if r.strict {
		parts := make([]string, len(unknown))
		for i, u := range unknown {
			parts[i] = u.String()
		}
		e := errAt(unknown[0].Line, unknown[0].Key, "%s (unknown keys are refused in strict mode)", strings.Join(parts, "; "))
		e.err = ErrUnknownKeys
		return e
	}
	drop := map[string]bool{}
	for _, u := range unknown {
		drop[u.Key] = true
		r.warnings = append(r.warnings, u.String()+": ignored")
	}
	kept := r.unchecked[:0]
	for _, k := range r.unchecked {
		if !drop[k] {
			kept = append(kept, k)
		}
	}
	r.unchecked = kept
	t.UnknownKeys = unknown
	return nil
}

func (r *configReader) readTaskTable(t *Task, v any) error {
	tbl, err := r.mapping(v, "task")
	if err != nil {
		return err
	}
	for _, sk := range sortedKeys(tbl) {
		p := "task." + sk
		sv := tbl[sk]
		switch sk {
		case "name":
			if t.TaskName, err = r.str(sv, p); err != nil {
				return err
			}
		case "description":
			if t.Description, err = r.str(sv, p); err != nil {
				return err
			}
		case "keywords":
			if t.Keywords, err = r.strList(sv, p); err != nil {
				return err
			}
		case "authors":
			if t.Authors, err = r.authors(sv, p); err != nil {
				return err
			}
		default:
			r.skip(p)
		}
	}
	return nil
}

func (r *configReader) readSandbox(t *Task, net *netSpec, tbl map[string]any, table string) (map[string]any, error) {
	var env map[string]any
	net.table = table
	for _, sk := range sortedKeys(tbl) {
		p := table + "." + sk
		sv := tbl[sk]
		var err error
		switch sk {
		case "build_timeout_sec":
			t.BuildTimeoutSec, err = r.timeout(sv, p)
		case "docker_image":
			t.DockerImage, err = r.str(sv, p)
		case "workdir":
			t.Workdir, err = r.str(sv, p)
			if err == nil && t.Workdir != "" {
				if !strings.HasPrefix(t.Workdir, "/") {
					err = r.errf(p, "workdir %q must be an absolute path", t.Workdir)
				} else {
					t.Workdir = path.Clean(t.Workdir)
				}
			}
		case "cpus":
			t.CPUs, err = r.positive(sv, p, "a finite number > 0 (CPUs)")
		case "memory_mb":
			if _, dep := tbl["memory"]; dep {
				continue // the deprecated memory string wins, as in Harbor
			}
			t.MemoryMB, err = r.integer(sv, p, 1, MaxSizeMB, "megabytes")
		case "storage_mb":
			if _, dep := tbl["storage"]; dep {
				continue
			}
			t.StorageMB, err = r.integer(sv, p, 1, MaxSizeMB, "megabytes")
		case "memory", "storage":
			var mb int64
			mb, err = r.size(sv, p)
			if err == nil {
				if sk == "memory" {
					t.MemoryMB = mb
				} else {
					t.StorageMB = mb
				}
				if other, ok := tbl[sk+"_mb"]; ok {
					if n, e := r.integer(other, p+"_mb", 1, MaxSizeMB, "megabytes"); e != nil || n != mb {
						r.warnings = append(r.warnings, fmt.Sprintf("%s (%d MB) and %s_mb disagree; %s wins, as in Harbor", p, mb, p, sk))
					}
				}
			}
		case "gpus":
			var n int64
			n, err = r.integer(sv, p, 0, MaxGPUs, "GPUs")
			t.GPUs = int(n)
		case "allow_internet":
			var b bool
			b, err = r.boolean(sv, p)
			net.allowInternetSet = true
			net.allowInternet = b
			if net.key == "" {
				net.key = p
			}
		case "network_mode", "allowed_hosts", "egress":
			err = r.readNet(net, sk, sv, p)
		case "env":
			env, err = r.mapping(sv, p)
		case "mcp_servers":
			t.MCPServers, err = r.tableList(sv, p)
		case "skills_dir":
			t.SkillsDir, err = r.str(sv, p)
		default:
			r.skip(p)
		}
		if err != nil {
			return nil, err
		}
	}
	return env, nil
}

// netSpec is one table's network keys before resolution.
type netSpec struct {
	table            string
	key              string // first network key seen, for errors
	mode             string
	hosts            []string
	hostsSet         bool
	egressSet        bool
	allowInternetSet bool
	allowInternet    bool
}

func (r *configReader) readNet(n *netSpec, sk string, v any, p string) error {
	if n.key == "" || sk == "network_mode" {
		n.key = p
	}
	if n.table == "" {
		n.table = strings.TrimSuffix(p, "."+sk)
	}
	switch sk {
	case "network_mode":
		s, err := r.str(v, p)
		if err != nil {
			return err
		}
		switch s {
		case NetworkPublic, NetworkNone, NetworkAllowlist:
			n.mode = s
		case "":
		default:
			return r.errf(p, "network_mode %q is not one of public, no-network, allowlist", s)
		}
	case "allowed_hosts", "egress":
		if (sk == "egress" && n.hostsSet) || (sk == "allowed_hosts" && n.egressSet) {
			return r.errf(p, "both egress and allowed_hosts are declared; keep one")
		}
		l, err := r.strList(v, p)
		if err != nil {
			return err
		}
		hosts, err := normalizeHosts(l)
		if err != nil {
			return r.errf(p, "%v", err)
		}
		n.hosts = hosts
		if sk == "egress" {
			n.egressSet = true
		} else {
			n.hostsSet = true
		}
	}
	return nil
}

// resolve turns a table's network keys into a policy, as Harbor does:
// network_mode wins; allowed_hosts without a mode means allowlist;
// allowed_hosts with another mode is an error; the deprecated
// allow_internet = false means no-network; a table with no network key
// inherits base.
func (n netSpec) resolve(base NetworkPolicy) (NetworkPolicy, error) {
	hasHosts := n.hostsSet || n.egressSet
	switch {
	case n.mode != "":
		if hasHosts && len(n.hosts) > 0 && n.mode != NetworkAllowlist {
			return NetworkPolicy{}, fmt.Errorf("allowed hosts are only valid with network_mode = %q, not %q", NetworkAllowlist, n.mode)
		}
		p := NetworkPolicy{Mode: n.mode}
		if n.mode == NetworkAllowlist {
			p.AllowedHosts = n.hosts
		}
		return p, nil
	case hasHosts:
		return NetworkPolicy{Mode: NetworkAllowlist, AllowedHosts: n.hosts}, nil
	case n.allowInternetSet && !n.allowInternet:
		return NetworkPolicy{Mode: NetworkNone}, nil
	}
	return base, nil
}

// normalizeHosts lower-cases, trims and de-duplicates allowlist entries
// (host or host:port, bare host = :443); URLs, paths and blanks inside an
// entry are errors.
func normalizeHosts(in []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, h := range in {
		v := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if v == "" {
			continue
		}
		if strings.Contains(v, "://") || strings.ContainsAny(v, "/ \t*") {
			return nil, fmt.Errorf("allowed host %q must be a host or host:port, not a URL, path or wildcard", h)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

// ---- typed readers -------------------------------------------------------

func (r *configReader) mapping(v any, key string) (map[string]any, error) {
	switch m := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return m, nil
	}
	return nil, r.errf(key, "must be a %s, not %s", r.tableWord(), kindOf(v))
}

func (r *configReader) tableWord() string {
	if r.markdown {
		return "mapping"
	}
	return "table"
}

func (r *configReader) str(v any, key string) (string, error) {
	switch s := v.(type) {
	case nil:
		return "", nil
	case string:
		return s, nil
	}
	return "", r.errf(key, "must be a string, not %s", kindOf(v))
}

// scalarString reads a version-like value written as a string or a number
// (YAML reads schema_version: 1.3 as a float).
func (r *configReader) scalarString(v any, key string) (string, error) {
	switch s := v.(type) {
	case nil:
		return "", nil
	case string:
		return s, nil
	case int64:
		return strconv.FormatInt(s, 10), nil
	case uint64:
		return strconv.FormatUint(s, 10), nil
	case float64:
		return strconv.FormatFloat(s, 'f', -1, 64), nil
	case nonFinite:
		return string(s), nil
	}
	return "", r.errf(key, "must be a string, not %s", kindOf(v))
}

// Bounds of numeric keys. A timeout above MaxTimeoutSec (one year, in
// seconds) is refused so every sum of budgets stays far inside
// time.Duration; a size above MaxSizeMB (2^40 MB) would overflow int64
// bytes; MaxGPUs bounds gpus.
const (
	MaxTimeoutSec = 365 * 24 * 3600.0
	MaxSizeMB     = int64(1) << 40
	MaxGPUs       = int64(1) << 16
)

// number reads a finite number written as an integer or a float. want
// describes the accepted values for the error ("a finite number > 0
// (seconds)"); a non-finite value (TOML nan/inf, YAML .nan/.inf) and any
// other type are refused with it.
func (r *configReader) number(v any, key, want string) (float64, error) {
	switch n := v.(type) {
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	case float64:
		return n, nil
	case nonFinite:
		return 0, r.errf(key, "must be %s, not %s", want, string(n))
	}
	return 0, r.errf(key, "must be %s, not %s", want, kindOf(v))
}

// positive reads a finite number > 0.
func (r *configReader) positive(v any, key, want string) (float64, error) {
	f, err := r.number(v, key, want)
	if err != nil {
		return 0, err
	}
	if !(f > 0) {
		return 0, r.errf(key, "must be %s, not %s", want, formatNumber(f))
	}
	return f, nil
}

// timeout reads a budget in seconds: a finite number > 0 and at most
// MaxTimeoutSec. 0 is refused rather than read as "no limit" (Harbor would
// time the phase out at once; neither is what an author means).
func (r *configReader) timeout(v any, key string) (float64, error) {
	f, err := r.positive(v, key, "a finite number > 0 (seconds)")
	if err != nil {
		return 0, err
	}
	if f > MaxTimeoutSec {
		return 0, r.errf(key, "must be at most %d seconds (one year), not %s", int64(MaxTimeoutSec), formatNumber(f))
	}
	return f, nil
}

// integer reads an integer in [lo, hi] (an integral float such as YAML's
// 2048.0 is accepted); unit names what it counts in the error.
func (r *configReader) integer(v any, key string, lo, hi int64, unit string) (int64, error) {
	want := fmt.Sprintf("an integer >= %d (%s)", lo, unit)
	if lo == 1 {
		want = fmt.Sprintf("an integer > 0 (%s)", unit)
	}
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case uint64:
		if x > uint64(hi) {
			return 0, r.errf(key, "must be at most %d %s, not %d", hi, unit, x)
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) {
			return 0, r.errf(key, "must be %s, not %s", want, formatNumber(x))
		}
		if x > float64(hi) {
			return 0, r.errf(key, "must be at most %d %s, not %s", hi, unit, formatNumber(x))
		}
		if x < float64(lo) {
			return 0, r.errf(key, "must be %s, not %s", want, formatNumber(x))
		}
		n = int64(x)
	case nonFinite:
		return 0, r.errf(key, "must be %s, not %s", want, string(x))
	default:
		return 0, r.errf(key, "must be %s, not %s", want, kindOf(v))
	}
	if n < lo {
		return 0, r.errf(key, "must be %s, not %d", want, n)
	}
	if n > hi {
		return 0, r.errf(key, "must be at most %d %s, not %d", hi, unit, n)
	}
	return n, nil
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (r *configReader) boolean(v any, key string) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		if r.markdown {
			if x, ok := parseBoolWord(b); ok {
				return x, nil
			}
		}
	}
	return false, r.errf(key, "must be a boolean, not %s", kindOf(v))
}

func (r *configReader) user(v any, key string) (string, error) {
	switch u := v.(type) {
	case nil:
		return "", nil
	case string:
		return u, nil
	case int64:
		return strconv.FormatInt(u, 10), nil
	case uint64:
		return strconv.FormatUint(u, 10), nil
	}
	return "", r.errf(key, "must be a user name or uid, not %s", kindOf(v))
}

func (r *configReader) strList(v any, key string) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of strings, not %s", kindOf(v))
	}
	out := make([]string, 0, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			return nil, r.errf(key, "entry %d must be a string, not %s", i, kindOf(e))
		}
		out = append(out, s)
	}
	return out, nil
}

func (r *configReader) tableList(v any, key string) ([]map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of %ss, not %s", r.tableWord(), kindOf(v))
	}
	out := make([]map[string]any, 0, len(l))
	for i, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, r.errf(key, "entry %d must be a %s, not %s", i, r.tableWord(), kindOf(e))
		}
		out = append(out, m)
	}
	return out, nil
}

// authors reads [task].authors as an inline array or [[task.authors]]:
// each entry a table with name (required) and email, or a bare name string.
func (r *configReader) authors(v any, key string) ([]Author, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of authors, not %s", kindOf(v))
	}
	out := make([]Author, 0, len(l))
	for i, e := range l {
		switch a := e.(type) {
		case string:
			out = append(out, Author{Name: a})
		case map[string]any:
			name, _ := a["name"].(string)
			if name == "" {
				return nil, r.errf(key, "author %d has no name", i)
			}
			email, _ := a["email"].(string)
			out = append(out, Author{Name: name, Email: email})
			for _, k := range sortedKeys(a) {
				if k != "name" && k != "email" {
					r.skip(fmt.Sprintf("%s[%d].%s", key, i, k))
				}
			}
		default:
			return nil, r.errf(key, "author %d must be a %s or a name, not %s", i, r.tableWord(), kindOf(e))
		}
	}
	return out, nil
}

// size reads a deprecated memory/storage size string ("2G", "512M",
// "1024K"; an optional trailing B or iB is accepted) into megabytes, as
// Harbor converts it: G = 1024 MB, K = 1/1024 MB, fractions truncated.
func (r *configReader) size(v any, key string) (int64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, r.errf(key, "must be a size string like \"2G\", not %s", kindOf(v))
	}
	u := strings.ToUpper(strings.TrimSpace(s))
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	if u == "" {
		return 0, r.errf(key, "invalid size %q (expected a number and G, M or K)", s)
	}
	mult := 0.0
	switch u[len(u)-1] {
	case 'G':
		mult = 1024
	case 'M':
		mult = 1
	case 'K':
		mult = 1.0 / 1024
	default:
		return 0, r.errf(key, "invalid size %q (expected a number and G, M or K)", s)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(u[:len(u)-1]), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, r.errf(key, "invalid size %q (expected a finite number and G, M or K)", s)
	}
	mb := f * mult
	if mb > float64(MaxSizeMB) {
		return 0, r.errf(key, "size %q is more than %d MB", s, MaxSizeMB)
	}
	if int64(mb) < 1 {
		return 0, r.errf(key, "size %q must be at least 1 MB (as Harbor converts it, fractions of a MB are dropped)", s)
	}
	return int64(mb), nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isBenchFlowDocument reports whether frontmatter fm makes a task.md a
// BenchFlow document: every top-level key is one BenchFlow 0.7 knows
// (benchflowKeys) and task, metadata, agent and the sandbox table
// (sandbox or environment) are mappings (an empty value counts as an empty
// mapping, as BenchFlow reads it). why says which rule failed.
func isBenchFlowDocument(fm map[string]any) (ok bool, why string) {
	for _, k := range sortedKeys(fm) {
		if !benchflowKeys[k] {
			return false, fmt.Sprintf("top-level key %q is not one BenchFlow knows", k)
		}
	}
	for _, k := range []string{"task", "metadata", "agent", "sandbox", "environment"} {
		v, present := fm[k]
		if !present || v == nil {
			continue
		}
		if _, isMap := v.(map[string]any); !isMap {
			return false, fmt.Sprintf("%s is %s, not a mapping", k, kindOf(v))
		}
	}
	return true, ""
}

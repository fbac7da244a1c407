package harness

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/providers"
)

// AgentSpec is an agent directory's agent.toml (DESIGN §5.1):
//
//	install = "apt-get install -y jq"   # run once per task image, as root, cached
//	run = "bash /opt/proctor/agent/agent.sh"
//	max_timeout_sec = 900                # optional cap on the task's [agent].timeout_sec
//	providers = ["anthropic", "openai"]  # the model providers it calls, through the gateway
//	egress = ["llm.corp.example:4000"]   # other hosts it calls (host or host:port)
//	[env]
//	LOG_LEVEL = "info"
type AgentSpec struct {
	Dir     string            `toml:"-"`
	Install string            `toml:"install"`
	Run     string            `toml:"run"`
	Env     map[string]string `toml:"env"`
	// Providers are the model providers the agent calls (pkg/providers
	// names: "anthropic", "openai", "gemini"): its sandbox gets the egress
	// proxy as its model gateway for them whatever the task's network
	// policy, and their credential and base-URL variables (placeholders
	// for the credentials; AgentProviderEnv).
	Providers []string `toml:"providers"`
	// Egress are more hosts the agent calls ("host" or "host:port",
	// allowlist syntax: a self-hosted model gateway), allowed by its
	// egress proxy whatever the task's network policy; tunnelled, never
	// intercepted.
	Egress []string `toml:"egress"`
	// SystemPrompt is a file of the agent directory (a relative path)
	// holding the agent's system prompt; the agent gets its path as
	// ANPORD_SYSTEM_PROMPT_FILE, as the Anpord command harness gives it.
	SystemPrompt string `toml:"system_prompt"`
	// MaxTimeoutSec caps the solve budget in seconds; when agent.toml does
	// not set max_timeout_sec, the Anpord command harness's 15-minute cap
	// (900 s).
	MaxTimeoutSec float64 `toml:"-"`
	// Hash is the hex SHA-256 of the directory's files (sorted paths and
	// contents); it keys the install cache.
	Hash string `toml:"-"`
}

// AgentMount is where the agent directory is copied in the container.
const AgentMount = "/opt/proctor/agent"

// DefaultAgentCapSec is the Anpord command harness's default cap: 15 minutes.
const DefaultAgentCapSec = 900

// agentKeys are agent.toml's keys, in the order the docs give them.
var agentKeys = []string{"run", "install", "env", "providers", "egress", "system_prompt", "max_timeout_sec"}

// tomlTypeError matches the decoder's error for a value of the wrong
// type, whose text names Go's types; its group is the TOML type found.
var tomlTypeError = regexp.MustCompile(`^toml: cannot decode TOML (\w+(?: \w+)?) into`)

// agentKeyType is what agent.toml wants at key, in a user's words.
func agentKeyType(key string) string {
	switch {
	case key == "providers":
		return `a list of strings (providers = ["anthropic"])`
	case key == "egress":
		return `a list of strings (egress = ["pypi.org"])`
	case key == "env":
		return "a table of strings ([env] then NAME = \"value\")"
	case key == "max_timeout_sec":
		return "a number of seconds"
	}
	return "a string"
}

// unknownAgentKey describes an unknown agent.toml key: the keys the file
// has, and first the one it is near (a prefix of the other either way, as
// provider and providers, or one edit away).
func unknownAgentKey(key string) string {
	near := ""
	for _, k := range agentKeys {
		if strings.HasPrefix(k, key) || strings.HasPrefix(key, k) || oneEdit(k, key) {
			near = "did you mean " + k + "? "
			break
		}
	}
	return fmt.Sprintf("unknown key %s (%sagent.toml keys: %s)", key, near, strings.Join(agentKeys, ", "))
}

// oneEdit reports whether a and b differ by one inserted, deleted or
// replaced byte, or by two adjacent bytes swapped.
func oneEdit(a, b string) bool {
	if len(a) < len(b) {
		a, b = b, a
	}
	if len(a)-len(b) > 1 || a == b {
		return false
	}
	i := 0
	for i < len(b) && a[i] == b[i] {
		i++
	}
	switch {
	case len(a) != len(b):
		return a[i+1:] == b[i:]
	case a[i+1:] == b[i+1:]:
		return true
	default:
		return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:]
	}
}

// LoadAgent reads dir/agent.toml. Errors name the file and key.
func LoadAgent(dir string) (*AgentSpec, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(abs, "agent.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", dir, err)
	}
	a := &AgentSpec{Dir: abs}
	file := struct {
		*AgentSpec
		MaxTimeoutSec *float64 `toml:"max_timeout_sec"`
	}{AgentSpec: a}
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		var de *toml.DecodeError
		var se *toml.StrictMissingError
		if errors.As(err, &se) && len(se.Errors) > 0 {
			e := se.Errors[0]
			row, _ := e.Position()
			return nil, fmt.Errorf("%s:%d: %s", path, row, unknownAgentKey(strings.Join(e.Key(), ".")))
		}
		if errors.As(err, &de) {
			row, _ := de.Position()
			if m := tomlTypeError.FindStringSubmatch(de.Error()); m != nil && len(de.Key()) > 0 {
				key := strings.Join(de.Key(), ".")
				return nil, fmt.Errorf("%s:%d: key %s: %s, not a TOML %s", path, row, key, agentKeyType(key), m[1])
			}
			return nil, fmt.Errorf("%s:%d: %s", path, row, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if a.Run == "" {
		return nil, fmt.Errorf("%s: key run: the command that starts the agent is required", path)
	}
	if err := a.checkCalls(b, path); err != nil {
		return nil, err
	}
	if sp := a.SystemPrompt; sp != "" {
		clean := filepath.Clean(filepath.FromSlash(sp))
		fi, err := os.Lstat(filepath.Join(abs, clean))
		switch {
		case filepath.IsAbs(sp) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)):
			return nil, fmt.Errorf("%s:%d: key system_prompt: %q must be a file of the agent directory (a relative path inside it)", path, keyLine(b, "system_prompt"), sp)
		case err != nil || !fi.Mode().IsRegular():
			return nil, fmt.Errorf("%s:%d: key system_prompt: %q is not a regular file of the agent directory", path, keyLine(b, "system_prompt"), sp)
		}
		a.SystemPrompt = filepath.ToSlash(clean)
	}
	a.MaxTimeoutSec = DefaultAgentCapSec
	if p := file.MaxTimeoutSec; p != nil {
		// As for a task's timeouts: 0 is refused rather than read as "no
		// cap", and nan/inf never become a budget.
		if !(*p > 0) || *p > maxAgentCapSec {
			return nil, fmt.Errorf("%s:%d: key max_timeout_sec: must be a finite number > 0 (seconds) and at most %d, not %v",
				path, keyLine(b, "max_timeout_sec"), int64(maxAgentCapSec), *p)
		}
		a.MaxTimeoutSec = *p
	}
	if a.Hash, err = hashDir(abs); err != nil {
		return nil, err
	}
	return a, nil
}

// checkCalls checks providers (names the gateway knows, each once) and
// egress (allowlist entries: host or host:port, never a URL or a
// wildcard), normalising both; the error names the file, line and key.
func (a *AgentSpec) checkCalls(doc []byte, path string) error {
	seen := map[string]bool{}
	for i, n := range a.Providers {
		p, ok := providers.Lookup(strings.TrimSpace(n))
		if !ok {
			var names []string
			for _, k := range providers.All() {
				names = append(names, k.Name)
			}
			return fmt.Errorf("%s:%d: key providers: %q is not a provider the gateway knows (%s)",
				path, keyLine(doc, "providers"), n, strings.Join(names, ", "))
		}
		if seen[p.Name] {
			return fmt.Errorf("%s:%d: key providers: %s is listed twice", path, keyLine(doc, "providers"), p.Name)
		}
		seen[p.Name] = true
		a.Providers[i] = p.Name
	}
	for i, raw := range a.Egress {
		e, err := egress.ParseEntry(raw)
		if err != nil {
			return fmt.Errorf("%s:%d: key egress: %w", path, keyLine(doc, "egress"), err)
		}
		a.Egress[i] = e.String()
	}
	return nil
}

// Vars are the variables agent.toml adds to the agent's environment:
// ANPORD_SYSTEM_PROMPT_FILE when it names a system prompt.
func (a *AgentSpec) Vars() map[string]string {
	if a.SystemPrompt == "" {
		return nil
	}
	return map[string]string{"ANPORD_SYSTEM_PROMPT_FILE": AgentMount + "/" + a.SystemPrompt}
}

// CallsOut reports whether the agent declares anything it calls
// (providers or egress): its sandbox then gets the egress proxy.
func (a *AgentSpec) CallsOut() bool { return len(a.Providers) > 0 || len(a.Egress) > 0 }

// maxAgentCapSec bounds max_timeout_sec: one year, as task timeouts are
// bounded.
const maxAgentCapSec = 365 * 24 * 3600.0

// keyLine returns the 1-based line of the first top-level "key =" in a
// TOML document, or 0.
func keyLine(doc []byte, key string) int {
	for i, l := range bytes.Split(doc, []byte("\n")) {
		l = bytes.TrimSpace(l)
		if rest, ok := bytes.CutPrefix(l, []byte(key)); ok && bytes.HasPrefix(bytes.TrimSpace(rest), []byte("=")) {
			return i + 1
		}
		if bytes.HasPrefix(l, []byte("[")) {
			return 0
		}
	}
	return 0
}

// Budget is the agent's solve budget in seconds: the task's
// [agent].timeout_sec capped at MaxTimeoutSec.
func (a *AgentSpec) Budget(taskTimeoutSec float64) float64 {
	return min(taskTimeoutSec, a.MaxTimeoutSec)
}

func hashDir(dir string) (string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00", filepath.ToSlash(rel))
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Metrics is the Archal Docker harness's metrics.json, as the agent wrote it.
type Metrics map[string]any

// ReadMetrics parses metrics.json; numbers stay numbers, unknown keys are
// kept.
func ReadMetrics(b []byte) (Metrics, error) {
	var m Metrics
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("metrics.json: %w", err)
	}
	return m, nil
}

// Int returns a numeric key as an integer.
func (m Metrics) Int(key string) (int64, bool) {
	if f, ok := m[key].(float64); ok {
		return int64(f), true
	}
	return 0, false
}

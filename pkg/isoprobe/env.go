package isoprobe

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The env class, as the seed defines it: the host's values of the
// variables the sandbox was not given are looked for in the environments
// the agent can read, by value (under any name). The values never enter
// the sandbox: the host sends each one's length and its HMAC-SHA256 under
// a key made for this probe (SealEnv), and the probe computes the same of
// every value, and every window of a long value, it can read.

// EnvValue is one host value the agent must not see: the name of the host
// variable that holds it, its length in bytes and its hex HMAC-SHA256
// under Config.EnvKey.
type EnvValue struct {
	Name string `json:"name"`
	Len  int    `json:"len"`
	MAC  string `json:"mac"`
	// Credential marks a model provider's credential: the sandbox may hold
	// its placeholder, never its value.
	Credential bool `json:"credential,omitempty"`
}

// MinEnvValue is the shortest host value looked for: shorter ones (C,
// /root, true, en_US) are in every sandbox by chance.
const MinEnvValue = 8

// minEnvWindow is the shortest host value also looked for inside longer
// values (a key inside a URL or a header line); shorter ones must be a
// whole value.
const minEnvWindow = 20

// maxEnvWindow is the longest host value looked for inside longer values.
const maxEnvWindow = 512

// engineGiven are values the engine gives a sandbox of its own accord
// (Docker's PATH when the image sets none): a host variable that happens
// to hold one is not dropped from the sandbox.
var engineGiven = []string{"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// SealEnv prepares the env class on the host. host is the host's
// environment (KEY=VALUE, as os.Environ returns it), given what the
// sandbox is given (name → value: the image's ENV, the task's env, the
// arm's variables), credentials the names whose values are a model
// provider's credentials. A host variable is dropped when the sandbox is
// not given it with the same value; a dropped value is looked for when it
// is at least MinEnvValue bytes and is not part of a value the sandbox is
// given (the same path or locale given for another reason is no leak). A
// credential is looked for whatever the sandbox is given: its real value
// there is the leak, its placeholder is not. It returns the fresh key
// (hex), the values to look for, sorted by name, and how many host
// variables were dropped.
func SealEnv(host []string, given map[string]string, credentials []string) (key string, vals []EnvValue, dropped int) {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	givenVals := append(slices.Clone(engineGiven), mapValues(given)...)
	cred := map[string]bool{}
	for _, c := range credentials {
		cred[c] = true
	}
	m := newMatcher(k, nil)
	for _, kv := range host {
		name, v, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		if g, ok := given[name]; ok && g == v && !cred[name] {
			continue
		}
		dropped++
		if len(v) < MinEnvValue {
			continue
		}
		if !cred[name] && slices.ContainsFunc(givenVals, func(g string) bool { return strings.Contains(g, v) }) {
			continue
		}
		vals = append(vals, EnvValue{Name: name, Len: len(v), MAC: m.mac([]byte(v)), Credential: cred[name]})
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i].Name < vals[j].Name })
	return hex.EncodeToString(k), vals, dropped
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// matcher finds the EnvValues in a value.
type matcher struct {
	h     hash.Hash
	byMAC map[string][]EnvValue
	lens  []int
}

func newMatcher(key []byte, vals []EnvValue) *matcher {
	m := &matcher{h: hmac.New(sha256.New, key), byMAC: map[string][]EnvValue{}}
	seen := map[int]bool{}
	for _, v := range vals {
		m.byMAC[v.MAC] = append(m.byMAC[v.MAC], v)
		if !seen[v.Len] {
			seen[v.Len] = true
			m.lens = append(m.lens, v.Len)
		}
	}
	sort.Ints(m.lens)
	return m
}

func (m *matcher) mac(b []byte) string {
	m.h.Reset()
	m.h.Write(b)
	return hex.EncodeToString(m.h.Sum(nil))
}

// find calls hit for every EnvValue that is v, or (at least minEnvWindow
// bytes long) inside v.
func (m *matcher) find(v []byte, hit func(EnvValue)) {
	for _, l := range m.lens {
		switch {
		case l == len(v):
			for _, e := range m.byMAC[m.mac(v)] {
				hit(e)
			}
		case l < len(v) && l >= minEnvWindow && l <= maxEnvWindow:
			for i := 0; i+l <= len(v); i++ {
				for _, e := range m.byMAC[m.mac(v[i:i+l])] {
					hit(e)
				}
			}
		}
	}
}

// alwaysAllowed are the variables the engine and a process set themselves.
var alwaysAllowed = []string{"PATH", "HOSTNAME", "HOME", "TERM", "PWD", "OLDPWD", "SHLVL", "_"}

// envResult is the env class's finding and the names for the report.
type envResult struct {
	f          Finding
	leaked     []string // host variables whose values were seen
	unexpected []string // names beyond the allowlist
}

// envClass looks for the host's values (cfg.EnvValues) in the probe's
// own environment env and in /proc/<pid>/environ of the probe, its parent
// chain, PID 1 and every other process whose environment it can read;
// and for variables beyond cfg.EnvAllowed in env. Open when a host value
// or such a variable is seen; n/a when the host dropped no value long
// enough to look for and no variable is beyond the allowlist; else
// closed. The evidence names variables, never a value.
func envClass(cfg Config, env map[string]string) envResult {
	var r envResult
	if cfg.EnvAllowed != nil {
		ok := map[string]bool{}
		for _, k := range append(slices.Clone(cfg.EnvAllowed), alwaysAllowed...) {
			ok[k] = true
		}
		extra := map[string]bool{}
		for k := range env {
			if !ok[k] {
				extra[k] = true
			}
		}
		r.unexpected = sorted(extra)
	}
	r.f.Status = Closed
	if len(r.unexpected) > 0 {
		r.f.Status = Open
		r.f.add("%d variables beyond the allowlist: %s", len(r.unexpected), strings.Join(r.unexpected, " "))
	}
	if len(cfg.EnvValues) == 0 {
		if r.f.Status != Open {
			r.f.Status = NA
			r.f.add("no host value to look for: the host dropped %d variables, none of them %d bytes or longer and absent from what the sandbox is given", cfg.EnvDropped, MinEnvValue)
		}
		if cfg.EnvAllowed == nil {
			r.f.add("the allowed names are unknown: the names were not checked")
		}
		return r
	}
	key, err := hex.DecodeString(cfg.EnvKey)
	if err != nil || len(key) == 0 {
		r.f.Status = Untested
		r.f.add("the host values cannot be looked for: the key is not hex")
		return r
	}
	m := newMatcher(key, cfg.EnvValues)
	seen := map[string]string{} // host name → where first seen
	scan := func(where string, entries [][]byte) {
		for _, e := range entries {
			_, v, ok := bytes.Cut(e, []byte("="))
			if !ok {
				v = e
			}
			m.find(v, func(ev EnvValue) {
				if _, dup := seen[ev.Name]; !dup {
					seen[ev.Name] = where
					what := "host value of " + ev.Name
					if ev.Credential {
						what += " (a model provider's real credential)"
					}
					r.f.add("%s in %s", what, where)
				}
			})
		}
	}
	own := make([][]byte, 0, len(env))
	for k, v := range env {
		own = append(own, []byte(k+"="+v))
	}
	scan("the probe's environment", own)
	read, unreadable := 1, []string{}
	for _, p := range processes(cfg) {
		b, err := os.ReadFile(cfg.host(path.Join("/proc", p.pid, "environ")))
		if err != nil {
			if p.named != "" {
				unreadable = append(unreadable, p.named)
			}
			continue
		}
		read++
		where := "/proc/" + p.pid + "/environ"
		if p.named != "" {
			where += " (" + p.named + ")"
		}
		scan(where, bytes.Split(b, []byte{0}))
	}
	for n := range seen {
		r.leaked = append(r.leaked, n)
	}
	sort.Strings(r.leaked)
	if len(r.leaked) > 0 {
		r.f.Status = Open
	}
	r.f.add("looked for %d host values (of %d variables the sandbox was not given) in %d environments", len(cfg.EnvValues), cfg.EnvDropped, read)
	if len(unreadable) > 0 {
		r.f.add("not readable by the agent: the environment of %s", strings.Join(unreadable, ", "))
	}
	return r
}

// proc is a process whose environment the env class reads: its pid and,
// for the ones the seed names, what it is.
type proc struct{ pid, named string }

// processes lists the probe itself (/proc/self), its parent chain (PPid
// of each status file), PID 1, then every other process in /proc, each
// once.
func processes(cfg Config) []proc {
	var out []proc
	seen := map[string]bool{}
	out = append(out, proc{pid: "self", named: "the probe"})
	seen["self"] = true
	if pid, ok := statusField(cfg, "self", "Pid"); ok {
		seen[pid] = true
	}
	cur := "self"
	for depth := 1; depth <= 64; depth++ {
		pp, ok := statusField(cfg, cur, "PPid")
		if !ok || pp == "0" || seen[pp] {
			break
		}
		seen[pp] = true
		named := "parent " + strconv.Itoa(depth)
		if pp == "1" {
			named = "PID 1"
		}
		out = append(out, proc{pid: pp, named: named})
		cur = pp
	}
	if !seen["1"] {
		seen["1"] = true
		out = append(out, proc{pid: "1", named: "PID 1"})
	}
	des, _ := os.ReadDir(cfg.host("/proc"))
	for _, de := range des {
		if _, err := strconv.Atoi(de.Name()); err == nil && !seen[de.Name()] {
			seen[de.Name()] = true
			out = append(out, proc{pid: de.Name()})
		}
	}
	return out
}

// statusField reads a field of /proc/<pid>/status.
func statusField(cfg Config, pid, field string) (string, bool) {
	f, err := os.Open(cfg.host(path.Join("/proc", pid, "status")))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

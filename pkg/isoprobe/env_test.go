package isoprobe

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// environ is a /proc/<pid>/environ: NUL-terminated KEY=VALUE entries.
func environ(kv ...string) string { return strings.Join(kv, "\x00") + "\x00" }

// procTree is a /proc where the probe is pid 42, its parent pid 7 (a
// shell of the same user), whose parent is PID 1; pid 99 is another
// process.
func procTree(files map[string]string) map[string]string {
	out := map[string]string{
		"app/":              "",
		"tmp/home/":         "",
		"proc/self/status":  "Name:\tproctor\nPid:\t42\nPPid:\t7\n",
		"proc/self/environ": environ("PATH=/bin"),
		"proc/42/status":    "Name:\tproctor\nPid:\t42\nPPid:\t7\n",
		"proc/7/status":     "Name:\tsh\nPid:\t7\nPPid:\t1\n",
		"proc/7/environ":    environ("PATH=/bin"),
		"proc/1/status":     "Name:\tsleep\nPid:\t1\nPPid:\t0\n",
		"proc/1/environ":    environ("PATH=/bin", "HOSTNAME=abc"),
		"proc/99/environ":   environ("X=1"),
	}
	for k, v := range files {
		out[k] = v
	}
	return out
}

const (
	operatorToken = "op-token-4f1d9a7e2b6c"
	realKey       = "sk-ant-api03-REALKEY-0123456789abcdef"
)

// hostEnv is the launcher's environment in these tests.
var hostEnv = []string{
	"OPERATOR_TOKEN=" + operatorToken,
	"ANTHROPIC_API_KEY=" + realKey,
	"LANG=C.UTF-8",             // too short to look for
	"EDITOR=/usr/bin/vim.tiny", // given to the sandbox under another name
	"HOME=/root",
}

// given is what the sandbox is given (image ENV, task env, arm's own).
var given = map[string]string{"VISUAL": "/usr/bin/vim.tiny", "PROCTOR_TASK": "t"}

// TestEnvHostValues: the host's dropped values are looked for in the
// probe's environment, its parent chain, PID 1 and any other readable
// process, under any name and inside a longer value; the evidence names
// the variable and where, never the value; a provider's placeholder is no
// leak, its real value is.
func TestEnvHostValues(t *testing.T) {
	cases := []struct {
		name   string
		files  map[string]string
		env    []string
		leaked []string
		where  string
	}{
		{name: "nothing of the host's anywhere", env: []string{"PATH=/bin", "ANTHROPIC_API_KEY=proctor-placeholder-0123456789abcdef0123456789abcdef"}},
		{name: "in the probe's own environment under another name", env: []string{"TOKEN=" + operatorToken}, leaked: []string{"OPERATOR_TOKEN"}, where: "the probe's environment"},
		{name: "in the parent's environment", files: map[string]string{"proc/7/environ": environ("PATH=/bin", "OPERATOR_TOKEN="+operatorToken)},
			leaked: []string{"OPERATOR_TOKEN"}, where: "/proc/7/environ (parent 1)"},
		{name: "the real credential in PID 1's environment", files: map[string]string{"proc/1/environ": environ("ANTHROPIC_API_KEY=" + realKey)},
			leaked: []string{"ANTHROPIC_API_KEY"}, where: "/proc/1/environ (PID 1)"},
		{name: "inside a URL of another process", files: map[string]string{"proc/99/environ": environ("DATABASE_URL=postgres://u:" + realKey + "@db/x")},
			leaked: []string{"ANTHROPIC_API_KEY"}, where: "/proc/99/environ"},
	}
	key, vals, dropped := SealEnv(hostEnv, given, []string{"ANTHROPIC_API_KEY"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := closedCfg(t, fsRoot(t, procTree(c.files)))
			cfg.EnvAllowed = nil
			cfg.EnvKey, cfg.EnvValues, cfg.EnvDropped = key, vals, dropped
			rep := Run(context.Background(), cfg, c.env)
			f := rep.Classes[Env]
			ev := strings.Join(f.Evidence, "\n")
			if strings.Contains(ev, operatorToken) || strings.Contains(ev, realKey) {
				t.Fatalf("the evidence holds a value: %s", ev)
			}
			if !slices.Equal(rep.EnvLeaked, c.leaked) {
				t.Fatalf("env_leaked %v, want %v: %+v", rep.EnvLeaked, c.leaked, f)
			}
			if c.leaked == nil {
				if f.Status != Closed || !strings.Contains(ev, "looked for 2 host values") {
					t.Fatalf("env %+v, want closed", f)
				}
				return
			}
			if f.Status != Open || !strings.Contains(ev, c.where) {
				t.Fatalf("env %+v, want open, seen in %s", f, c.where)
			}
			if c.leaked[0] == "ANTHROPIC_API_KEY" && !strings.Contains(ev, "real credential") {
				t.Errorf("the evidence does not say it is a provider's credential: %s", ev)
			}
		})
	}
}

// TestSealEnv: which host values are looked for. A value the sandbox is
// given with the same name, or as part of a value it is given, is not a
// drop; a value shorter than MinEnvValue is not looked for; a credential
// is looked for even when the sandbox is given it; the key is fresh.
func TestSealEnv(t *testing.T) {
	host := []string{
		"OPERATOR_TOKEN=" + operatorToken,
		"ANTHROPIC_API_KEY=" + realKey,
		"LANG=C.UTF-8",
		"EDITOR=/usr/bin/vim.tiny",
		"PROCTOR_TASK=t",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"NO_PROXY=localhost,127.0.0.1",
	}
	g := map[string]string{"VISUAL": "/usr/bin/vim.tiny", "PROCTOR_TASK": "t", "NO_PROXY": "localhost,127.0.0.1,::1", "ANTHROPIC_API_KEY": realKey}
	key, vals, dropped := SealEnv(host, g, []string{"ANTHROPIC_API_KEY"})
	var names []string
	for _, v := range vals {
		names = append(names, v.Name)
		if v.MAC == "" || v.Len < MinEnvValue {
			t.Errorf("%+v", v)
		}
	}
	if !slices.Equal(names, []string{"ANTHROPIC_API_KEY", "OPERATOR_TOKEN"}) || dropped != 6 || !vals[0].Credential || vals[1].Credential {
		t.Fatalf("looked for %v (%+v), dropped %d", names, vals, dropped)
	}
	if k2, _, _ := SealEnv(host, g, nil); k2 == key || len(key) != 64 {
		t.Fatalf("keys %s %s", key, k2)
	}
}

// TestEnvNothingDropped: with no host value to look for, env is n/a (the
// seed's rule); a variable beyond the allowlist still opens it.
func TestEnvNothingDropped(t *testing.T) {
	cfg := closedCfg(t, fsRoot(t, procTree(nil)))
	_, vals, dropped := SealEnv([]string{"LANG=C", "HOME=/root"}, nil, nil)
	cfg.EnvValues, cfg.EnvDropped = vals, dropped
	if got := Run(context.Background(), cfg, []string{"LANG=C"}).Classes[Env]; got.Status != NA {
		t.Fatalf("nothing dropped: %+v, want n/a", got)
	}
	if got := Run(context.Background(), cfg, []string{"SECRET=x"}).Classes[Env]; got.Status != Open {
		t.Fatalf("a name beyond the allowlist: %+v, want open", got)
	}
}

// TestEnvUnreadableProcess: an environment the agent cannot read (PID 1
// is root's) is closed to it and said in the evidence.
func TestEnvUnreadableProcess(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every file; the sandbox tests read PID 1's environment as uid 10001")
	}
	root := fsRoot(t, procTree(map[string]string{"proc/1/environ": environ("OPERATOR_TOKEN=" + operatorToken)}))
	if err := os.Chmod(filepath.Join(root, "proc/1/environ"), 0); err != nil {
		t.Fatal(err)
	}
	cfg := closedCfg(t, root)
	cfg.EnvKey, cfg.EnvValues, cfg.EnvDropped = SealEnv(hostEnv, given, nil)
	f := Run(context.Background(), cfg, nil).Classes[Env]
	if f.Status != Closed || !strings.Contains(strings.Join(f.Evidence, "\n"), "not readable by the agent: the environment of PID 1") {
		t.Fatalf("%+v", f)
	}
}

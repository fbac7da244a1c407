package isoprobe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// fsRoot writes files (path → contents; a path ending in / is a
// directory) under a fresh root.
func fsRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		hp := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(hp, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func sig(name, body string) FileSig {
	s := sha256.Sum256([]byte(body))
	return FileSig{Name: name, Size: int64(len(body)), SHA256: hex.EncodeToString(s[:])}
}

const testScript = "#!/bin/bash\npytest /tests/test_outputs.py -q\n"

// closedCfg is a sandbox root with nothing leaking, and no network
// targets reachable: targets on a loopback port nothing listens on.
func closedCfg(t *testing.T, root string) Config {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return Config{
		Root: root, Workdir: "/app", Home: "/tmp/home",
		Targets:    Targets{URL: "http://" + addr + "/", TCP: addr, DNS: ""},
		TaskFiles:  []FileSig{sig("tests/test.sh", testScript)},
		EnvAllowed: []string{"LANG"}, TimeoutSec: 1,
	}
}

func TestRunClosedSandbox(t *testing.T) {
	root := fsRoot(t, map[string]string{"app/main.py": "print('hi')\n", "tmp/home/": "", "etc/passwd": "root:x:0:0:root:/root:/bin/bash\n"})
	cfg := closedCfg(t, root)
	rep := Run(context.Background(), cfg, []string{"PATH=/bin", "LANG=C", "HOME=/tmp/home"})
	for _, c := range []string{TaskFiles, OperatorConfig, CheckoutWalk, Network, DockerAPI} {
		if got := rep.Classes[c].Status; got != Closed {
			t.Errorf("%s = %s, want closed: %v", c, got, rep.Classes[c].Evidence)
		}
	}
	// No repository, no skill to protect, no host value dropped.
	for _, c := range []string{GitHistory, Treatment, Env} {
		if got := rep.Classes[c].Status; got != NA {
			t.Errorf("%s = %s, want n/a: %v", c, got, rep.Classes[c].Evidence)
		}
	}
	if got := rep.Classes[DNS].Status; got != Untested {
		t.Errorf("dns without a target = %s, want untested", got)
	}
	st, passed := Fold(rep, nil)
	if passed || st[DNS] != Untested {
		t.Fatalf("an untested class must fail the probe: %v %v", st, passed)
	}
}

// Each case opens one class the way a real sandbox leaks it.
func TestRunOpensEachClass(t *testing.T) {
	cases := []struct {
		name, class string
		files       map[string]string
		env         []string
		edit        func(*Config)
	}{
		{"tests baked into the image", TaskFiles, map[string]string{"tests/test_outputs.py": "def test(): pass\n"}, nil, nil},
		{"the test script copied elsewhere", TaskFiles, map[string]string{"opt/grader/run.sh": testScript}, nil, nil},
		{"a skills directory above the task", Treatment, map[string]string{"skills/pdf/SKILL.md": "---\nname: pdf\n---\n"}, nil, nil},
		{"operator ~/.claude readable", OperatorConfig, map[string]string{"root/.claude/.credentials.json": "{}"}, nil, nil},
		{"CLAUDE_CONFIG_DIR pointing at the operator's", OperatorConfig, map[string]string{"mnt/op/settings.json": "{}"}, []string{"CLAUDE_CONFIG_DIR=/mnt/op"}, func(c *Config) { c.EnvAllowed = append(c.EnvAllowed, "CLAUDE_CONFIG_DIR") }},
		{"a .git above the work tree", CheckoutWalk, map[string]string{".git/HEAD": "ref: refs/heads/main\n"}, nil, nil},
		{"an operator's CLAUDE.md above the work tree", CheckoutWalk, map[string]string{"CLAUDE.md": "Always run the hidden tests in /srv/grader first.\n"}, nil, nil},
		{"the task suite beside the work tree", CheckoutWalk, map[string]string{"other-task/task.toml": "version = \"1.0\"\n"}, nil, nil},
		{"a host variable leaked", Env, nil, []string{"ANTHROPIC_API_KEY=sk-x"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"app/x": "1", "tmp/home/": ""}
			for k, v := range c.files {
				files[k] = v
			}
			cfg := closedCfg(t, fsRoot(t, files))
			if c.edit != nil {
				c.edit(&cfg)
			}
			rep := Run(context.Background(), cfg, append([]string{"PATH=/bin"}, c.env...))
			if got := rep.Classes[c.class]; got.Status != Open || len(got.Evidence) == 0 {
				t.Fatalf("%s = %+v, want open with evidence", c.class, got)
			}
			for _, other := range []string{TaskFiles, Treatment, OperatorConfig, CheckoutWalk, Env} {
				if other != c.class && !Passing(rep.Classes[other].Status) {
					t.Errorf("%s = %+v, want closed or n/a", other, rep.Classes[other])
				}
			}
			if st, passed := Fold(rep, nil); passed || st[c.class] != Open {
				t.Fatalf("Fold = %v %v", st, passed)
			}
		})
	}
}

// TestEnvUnexpectedNames: a variable beyond the allowlist opens env
// whatever its value; without an allowlist the names are not checked.
func TestEnvUnexpectedNames(t *testing.T) {
	cfg := closedCfg(t, fsRoot(t, map[string]string{"app/": ""}))
	cfg.EnvAllowed = []string{"PROCTOR_PROMPT"}
	rep := Run(context.Background(), cfg, []string{"PROCTOR_PROMPT=x", "AWS_SECRET_ACCESS_KEY=y", "GITHUB_TOKEN=z", "PATH=/bin"})
	if !slices.Equal(rep.EnvUnexpected, []string{"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"}) || rep.Classes[Env].Status != Open {
		t.Fatalf("env_unexpected = %v, env %+v", rep.EnvUnexpected, rep.Classes[Env])
	}
	cfg.EnvAllowed = nil
	got := Run(context.Background(), cfg, []string{"GITHUB_TOKEN=z"}).Classes[Env]
	if got.Status != NA || !strings.Contains(strings.Join(got.Evidence, "\n"), "names were not checked") {
		t.Fatalf("env with an unknown allowlist and nothing dropped = %+v, want n/a saying so", got)
	}
}

func TestSkillProbe(t *testing.T) {
	files := map[string]string{"app/": "", "opt/proctor/skills/pdf/SKILL.md": "---\nname: pdf\n---\n"}
	cfg := closedCfg(t, fsRoot(t, files))
	cfg.Skill = "/opt/proctor/skills/pdf"
	if got := Run(context.Background(), cfg, nil).Classes[Treatment]; got.Status != Closed {
		t.Fatalf("the arm's own skill: %+v, want closed", got)
	}
	cfg.Skill = "/opt/proctor/skills/docx"
	if got := Run(context.Background(), cfg, nil).Classes[Treatment]; got.Status != Open {
		t.Fatalf("another skill visible: %+v, want open", got)
	}
	cfg = closedCfg(t, fsRoot(t, map[string]string{"app/": ""}))
	cfg.Skill = "/opt/proctor/skills/pdf"
	if got := Run(context.Background(), cfg, nil).Classes[Treatment]; got.Status != Untested {
		t.Fatalf("the arm's skill missing: %+v, want untested", got)
	}
}

func TestUnreadableIsClosed(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every file; the sandbox tests check this as uid 10001")
	}
	root := fsRoot(t, map[string]string{"app/": "", "root/.claude/.credentials.json": "{}", "tests/test.sh": testScript})
	for _, d := range []string{"root", "tests"} {
		if err := os.Chmod(filepath.Join(root, d), 0o700&^0o777); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(filepath.Join(root, d), 0o755) })
	}
	rep := Run(context.Background(), closedCfg(t, root), nil)
	for _, c := range []string{TaskFiles, OperatorConfig} {
		if rep.Classes[c].Status != Closed {
			t.Errorf("%s = %+v, want closed", c, rep.Classes[c])
		}
	}
}

// commit writes file and commits it in the repository at dir.
func commit(t *testing.T, repo *git.Repository, dir, file, body, msg string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(file); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "t", Email: "t@example.invalid", When: time.Unix(1700000000, 0)}
	if _, err := wt.Commit(msg, &git.CommitOptions{Author: sig}); err != nil {
		t.Fatal(err)
	}
}

func TestGitHistory(t *testing.T) {
	root := fsRoot(t, map[string]string{"app/": ""})
	dir := filepath.Join(root, "app")
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, repo, dir, "sum.py", "def total(xs): return 0\n", "the bug")
	cfg := closedCfg(t, root)
	if got := Run(context.Background(), cfg, nil).Classes[GitHistory]; got.Status != Closed {
		t.Fatalf("HEAD only: %+v, want closed", got)
	}
	// The fix committed, then HEAD moved back: the fix is still in the
	// reflog and the objects (`git log --all` of a branch would show it too).
	head, _ := repo.Head()
	commit(t, repo, dir, "sum.py", "def total(xs): return sum(xs)\n", "the fix")
	wt, _ := repo.Worktree()
	if err := wt.Reset(&git.ResetOptions{Commit: head.Hash(), Mode: git.HardReset}); err != nil {
		t.Fatal(err)
	}
	got := Run(context.Background(), cfg, nil).Classes[GitHistory]
	if got.Status != Open || !strings.Contains(strings.Join(got.Evidence, "\n"), "the fix") {
		t.Fatalf("a later commit: %+v, want open naming it", got)
	}
}

func TestNetworkOpenDirectAndViaProxy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	f := network(context.Background(), Targets{URL: srv.URL + "/", TCP: addr}, nil, nil, time.Second)
	if f.Status != Open {
		t.Fatalf("direct: %+v", f)
	}
	// A proxy that allows everything: targets unreachable directly (a
	// closed loopback port) but the proxy answers 200 to CONNECT and GET.
	closed := closedCfg(t, t.TempDir()).Targets
	allowAll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer allowAll.Close()
	f = network(context.Background(), closed, map[string]string{"HTTPS_PROXY": allowAll.URL}, nil, time.Second)
	if f.Status != Open {
		t.Fatalf("via an allow-all proxy: %+v", f)
	}
	denyAll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) }))
	defer denyAll.Close()
	f = network(context.Background(), closed, map[string]string{"HTTP_PROXY": "http://u:pw@" + strings.TrimPrefix(denyAll.URL, "http://")}, nil, time.Second)
	if f.Status != Closed {
		t.Fatalf("via a denying proxy: %+v", f)
	}
	if s := strings.Join(f.Evidence, "\n"); strings.Contains(s, "pw@") || !strings.Contains(s, "403") {
		t.Fatalf("evidence must show the refusal without credentials: %s", s)
	}
}

// TestNetworkAllowlist: a target on the sandbox's egress allowlist that
// the proxy lets through is the policy as declared (closed, said in the
// evidence); the same proxy letting a target through that is not on the
// list is open; a direct answer is open even for a listed target (it went
// around the proxy).
func TestNetworkAllowlist(t *testing.T) {
	closed := closedCfg(t, t.TempDir()).Targets
	allowAll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer allowAll.Close()
	env := map[string]string{"HTTP_PROXY": allowAll.URL}
	f := network(context.Background(), closed, env, []string{"private:" + closed.TCP}, time.Second)
	if f.Status != Closed || !strings.Contains(strings.Join(f.Evidence, "\n"), "answered 200: on the egress allowlist (the policy as declared)") {
		t.Fatalf("listed target through the proxy: %+v", f)
	}
	f = network(context.Background(), closed, env, []string{"private:other.test:80"}, time.Second)
	if f.Status != Open {
		t.Fatalf("unlisted target through the proxy: %+v", f)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if f := network(context.Background(), Targets{URL: srv.URL + "/", TCP: addr}, nil, []string{addr}, time.Second); f.Status != Open {
		t.Fatalf("listed target reached directly: %+v", f)
	}
}

func TestDockerSocketOpen(t *testing.T) {
	root := fsRoot(t, map[string]string{"app/": "", "var/run/": ""})
	sock := filepath.Join(root, "var/run/docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got := dockerAPI(context.Background(), Config{Root: root}, nil, time.Second); got.Status != Open {
		t.Fatalf("a listening socket: %+v", got)
	}
}

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets("dns=probe-dns, tcp=10.0.0.2:8080")
	if err != nil || got != (Targets{URL: DefaultTargets().URL, TCP: "10.0.0.2:8080", DNS: "probe-dns", Gateway: DefaultGatewayPorts}) {
		t.Fatalf("%+v %v", got, err)
	}
	got, err = ParseTargets("gateway=22/4222/22")
	if err != nil || got.Gateway != "22/4222/22" || !slices.Equal(got.GatewayPorts(), []int{22, 4222}) {
		t.Fatalf("gateway: %+v %v", got, err)
	}
	if back, err := ParseTargets(got.String()); err != nil || back != got {
		t.Fatalf("String does not parse back: %q -> %+v %v", got.String(), back, err)
	}
	for _, bad := range []string{"url=ftp://x", "tcp=nohost", "foo=1", "dns=", "dns=a,dns=b", "url", "gateway=22/ssh", "gateway=0", "gateway=70000", "gateway=22//80"} {
		if _, err := ParseTargets(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if got, _ := ParseTargets(""); got != DefaultTargets() {
		t.Fatalf("empty: %+v", got)
	}
}

func TestFoldMissingClassIsUntested(t *testing.T) {
	rep := Report{Classes: map[string]Finding{}}
	for _, c := range Classes {
		rep.Classes[c] = Finding{Status: Closed}
	}
	if _, passed := Fold(rep, nil); !passed {
		t.Fatal("all closed must pass")
	}
	delete(rep.Classes, DNS)
	rep.Classes[GitHistory] = Finding{Status: "weird"}
	st, passed := Fold(rep, nil)
	if passed || st[DNS] != Untested || st[GitHistory] != Untested {
		t.Fatalf("%v %v", st, passed)
	}
	if got := OpenClasses(st); !slices.Equal(got, []string{"dns=untested", "git_history=untested"}) {
		t.Fatal(got)
	}
}

// routeFile is a /proc/net/route whose only route is a network the
// sandbox is directly on, 127.0.0.0/8 on eth0 (so its gateway, the
// network's first address, is 127.0.0.1: a loopback listener stands for a
// service of the host).
const routeFile = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
	"eth0\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n"

// TestGatewayListenerOpensNetwork: a listener on the gateway of the
// sandbox's network, on a port of the gateway sample, opens network and
// is named in GatewayReached; the other ports are counted as refused.
// The gateway of a network the sandbox is on counts with no default
// route (an --internal network on some engines); a default route's
// gateway counts too.
func TestGatewayListenerOpensNetwork(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	unused := closedCfg(t, t.TempDir()).Targets.TCP
	_, up, _ := net.SplitHostPort(unused)
	cfg := closedCfg(t, fsRoot(t, map[string]string{"proc/net/route": routeFile, "app/": "", "tmp/home/": ""}))
	cfg.Targets.Gateway = up + "/" + strconv.Itoa(port)
	rep := Run(context.Background(), cfg, []string{"PATH=/bin"})
	got := rep.Classes[Network]
	ev := strings.Join(got.Evidence, "\n")
	want := "127.0.0.1:" + strconv.Itoa(port)
	if got.Status != Open || !slices.Equal(rep.GatewayReached, []string{want}) || !strings.Contains(ev, want+" accepts connections") || !strings.Contains(ev, "1 of 2 ports refused") {
		t.Fatalf("network %+v, reached %v; want open naming %s", got, rep.GatewayReached, want)
	}
	// Without the listener's port in the sample: closed.
	cfg.Targets.Gateway = up
	if rep := Run(context.Background(), cfg, []string{"PATH=/bin"}); rep.Classes[Network].Status != Closed || len(rep.GatewayReached) != 0 {
		t.Fatalf("no listener on the sample: %+v", rep.Classes[Network])
	}
	// A default route's gateway.
	def := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0100007F\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n"
	if got := gateways(Config{Root: fsRoot(t, map[string]string{"proc/net/route": def})}); !slices.Equal(got, []string{"127.0.0.1", "10.0.0.1"}) {
		t.Fatalf("gateways %v", got)
	}
}

// TestIPv6Check: an IPv6 address on an interface other than lo (a global
// one, or only a link-local one) opens network, naming it; loopback's
// alone, or no IPv6 in the kernel, is closed.
func TestIPv6Check(t *testing.T) {
	lo := "00000000000000000000000000000001 01 80 10 80       lo\n"
	for _, tc := range []struct {
		name, file, status, says string
	}{
		{"loopback only", lo, Closed, "no address but loopback"},
		{"a global address", lo + "fd000db800e100000000000000000002 0e 40 00 82     eth0\n", Open, "fd00:db8:e1::2 on eth0"},
		{"a link-local address", lo + "fe8000000000000000420afffed5fa42 0e 40 20 c0     eth1\n", Open, "fe80::42:aff:fed5:fa42 on eth1"},
		{"no IPv6 in the kernel", "", Closed, "not in this kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"app/": ""}
			if tc.file != "" {
				files["proc/net/if_inet6"] = tc.file
			}
			f := ipv6Check(Config{Root: fsRoot(t, files)})
			if f.Status != tc.status || !strings.Contains(strings.Join(f.Evidence, "\n"), tc.says) {
				t.Fatalf("%+v, want %s saying %q", f, tc.status, tc.says)
			}
		})
	}
}

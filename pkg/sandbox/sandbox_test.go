package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestHandleEnvNotRecorded: a Handle is recorded as JSON (SandboxStarted);
// Spec.Env, which may hold secrets, must not be in it, and a Handle
// rebuilt from the record has none.
func TestHandleEnvNotRecorded(t *testing.T) {
	h := &Handle{Driver: DriverProcess, ID: "/tmp/x", State: map[string]string{"root": "/tmp/x"},
		Env: map[string]string{"API_KEY": "sk-secret-value"}}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Contains(s, "sk-secret-value") || strings.Contains(s, "API_KEY") {
		t.Fatalf("the recorded handle holds the env: %s", s)
	}
	var back Handle
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Env != nil || back.State["root"] != "/tmp/x" || back.Driver != DriverProcess {
		t.Fatalf("rebuilt handle: %+v", back)
	}
}

// TestHostProxyEnv: the host's proxy variables pass to a public verifier
// without credentials; a value that is no URL is dropped.
func TestHostProxyEnv(t *testing.T) {
	host := map[string]string{
		"HTTP_PROXY":  "http://user:secret@proxy.corp:3128",
		"https_proxy": "token@proxy.corp:3129",
		"ALL_PROXY":   "http://%zz",
		"NO_PROXY":    "localhost,.corp",
		"PATH":        "/bin",
	}
	got := HostProxyEnv(func(k string) string { return host[k] })
	want := map[string]string{"HTTP_PROXY": "http://proxy.corp:3128", "https_proxy": "http://proxy.corp:3129", "NO_PROXY": "localhost,.corp"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HostProxyEnv = %v, want %v", got, want)
	}
	for k, v := range got {
		if strings.Contains(v, "secret") || strings.Contains(v, "token") || strings.Contains(v, "user") {
			t.Errorf("%s=%s keeps a credential", k, v)
		}
	}
}

// TestProxyEnv: every proxy variable in both cases points at the sandbox's
// proxy, loopback is exempt, and a sandbox without a proxy gets none.
func TestProxyEnv(t *testing.T) {
	if env := ProxyEnv(&Handle{State: map[string]string{}}); env != nil {
		t.Errorf("no proxy: %v", env)
	}
	env := ProxyEnv(&Handle{State: map[string]string{"proxy": "10.213.0.62:3128"}})
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		if env[k] != "http://10.213.0.62:3128" {
			t.Errorf("%s=%q", k, env[k])
		}
	}
	if env["NO_PROXY"] != "localhost,127.0.0.1,::1" || env["no_proxy"] != env["NO_PROXY"] || len(env) != 8 {
		t.Errorf("env %v", env)
	}
}

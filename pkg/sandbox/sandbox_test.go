package sandbox

import (
	"encoding/json"
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

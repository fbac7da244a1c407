package task

import (
	"reflect"
	"strings"
	"testing"
)

// TestUnsupportedContentIsRefused: task content proctor cannot run as the
// task means is refused per task with the reason (every harness refuses
// it), never run as if it were absent; the good task beside it still
// loads.
func TestUnsupportedContentIsRefused(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "good", nil)
	writeTask(t, root, "schema-9.9", map[string]string{"task.toml": "schema_version = \"9.9\"\n"})
	writeTask(t, root, "old-version-key", map[string]string{"task.toml": "version = \"7\"\n"})
	writeTask(t, root, "compose-bad", map[string]string{"environment/docker-compose.yaml": "services:\n  main: [\n"})
	writeTask(t, root, "separate-no-image", map[string]string{"task.toml": "[verifier]\nenvironment_mode = \"separate\"\n"})
	writeTask(t, root, "collect-sidecar", map[string]string{"task.toml": "[[verifier.collect]]\ncommand = \"true\"\nservice = \"db\"\n"})
	writeTask(t, root, "collect-steps", map[string]string{
		"task.toml":                 "[[verifier.collect]]\ncommand = \"true\"\n[[steps]]\nname = \"a\"\n",
		"steps/a/instruction.md":    "Do a.\n",
		"steps/a/solution/solve.sh": "true\n",
	})
	for name, want := range map[string]string{
		"schema-9.9":        `schema_version "9.9" is not one this version of proctor reads`,
		"old-version-key":   `schema_version "7"`,
		"compose-bad":       "environment/docker-compose.yaml does not parse as YAML",
		"separate-no-image": "tests/Dockerfile is missing and verifier.environment.docker_image is not set",
		"collect-sidecar":   `verifier.collect[0]: service "db" is not a service of the task's environment`,
		"collect-steps":     "verifier.collect in a multi-step task is not supported",
	} {
		tk := mustLoad(t, root, name)
		if !strings.Contains(tk.Unsupported, want) {
			t.Errorf("%s: unsupported %q, want %q", name, tk.Unsupported, want)
		}
		for h, n := range HarnessNeeds {
			if r := tk.Refusal(n); r != tk.Unsupported {
				t.Errorf("%s: harness %s refusal %q, want the reason", name, h, r)
			}
		}
	}
	if g := mustLoad(t, root, "good"); g.Unsupported != "" || g.VerifierMode != "" || g.Healthcheck != nil || g.VerifierCollect != nil {
		t.Errorf("good task: %+v", g)
	}
}

// TestVerifierContent: [environment.healthcheck], [[verifier.collect]] and
// the verifier's environment mode are read as Harbor defines them
// (defaults, the mode implied by [verifier.environment], a copy of the
// task's environment when separate has none of its own).
func TestVerifierContent(t *testing.T) {
	root := t.TempDir()
	writeTask(t, root, "hc", map[string]string{"task.toml": "[environment]\ncpus = 2\n[environment.healthcheck]\ncommand = \"test -f /ready\"\nretries = 5\nstart_period_sec = 2\n" +
		"[[verifier.collect]]\ncommand = \"cp /app/x /logs/artifacts/\"\n[[verifier.collect]]\ncommand = \"true\"\nservice = \"main\"\ntimeout_sec = 5\nuser = \"nobody\"\n"})
	writeTask(t, root, "implied", map[string]string{
		"task.toml":        "[verifier]\nnetwork_mode = \"no-network\"\n[verifier.environment]\ndocker_image = \"python:3.11-slim\"\nmemory_mb = 512\nos = \"linux\"\n",
		"tests/Dockerfile": "FROM debian:bookworm-slim\n",
	})
	writeTask(t, root, "copy", map[string]string{
		"task.toml":        "[environment]\ncpus = 3\nnetwork_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"separate\"\n",
		"tests/Dockerfile": "FROM debian:bookworm-slim\n",
	})
	hc := mustLoad(t, root, "hc")
	if want := (&Healthcheck{Command: "test -f /ready", IntervalSec: 5, TimeoutSec: 30, StartPeriodSec: 2, StartIntervalSec: 5, Retries: 5}); !reflect.DeepEqual(hc.Healthcheck, want) {
		t.Errorf("healthcheck %+v, want %+v", hc.Healthcheck, want)
	}
	if want := []Collect{{Command: "cp /app/x /logs/artifacts/", Service: "main", TimeoutSec: 60}, {Command: "true", Service: "main", TimeoutSec: 5, User: "nobody"}}; !reflect.DeepEqual(hc.VerifierCollect, want) {
		t.Errorf("collect %+v, want %+v", hc.VerifierCollect, want)
	}
	if hc.VerifierMode != "" || hc.VerifierEnvironment != nil || hc.Unsupported != "" {
		t.Errorf("shared verifier: mode %q env %+v unsupported %q", hc.VerifierMode, hc.VerifierEnvironment, hc.Unsupported)
	}
	im := mustLoad(t, root, "implied")
	if im.VerifierMode != VerifierSeparate || im.VerifierEnvironment == nil || im.VerifierEnvironment.DockerImage != "python:3.11-slim" ||
		im.VerifierEnvironment.MemoryMB != 512 || !strings.HasSuffix(im.VerifierEnvironment.Dockerfile, "/implied/tests/Dockerfile") || im.Unsupported != "" {
		t.Errorf("implied separate: mode %q env %+v unsupported %q", im.VerifierMode, im.VerifierEnvironment, im.Unsupported)
	}
	if im.VerifierNetwork.Mode != NetworkNone || im.Network.Mode != NetworkPublic {
		t.Errorf("networks: verifier %v task %v", im.VerifierNetwork, im.Network)
	}
	if !contains(im.UncheckedKeys, "verifier.environment.os") {
		t.Errorf("unchecked %v lacks verifier.environment.os", im.UncheckedKeys)
	}
	cp := mustLoad(t, root, "copy")
	if cp.VerifierMode != VerifierSeparate || cp.VerifierEnvironment == nil || cp.VerifierEnvironment.CPUs != 3 || cp.VerifierNetwork.Mode != NetworkNone {
		t.Errorf("separate with the task's environment: mode %q env %+v network %v", cp.VerifierMode, cp.VerifierEnvironment, cp.VerifierNetwork)
	}
}

// TestVerifierContentErrors: values Harbor's config refuses fail the root
// naming the key.
func TestVerifierContentErrors(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{"[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ncpus = 1\n", "verifier.environment_mode"},
		{"[verifier]\nenvironment_mode = \"split\"\n", `must be "shared" or "separate"`},
		{"[[verifier.collect]]\nservice = \"main\"\n", "verifier.collect[0].command"},
		{"[environment.healthcheck]\ninterval_sec = 1\n", "environment.healthcheck.command"},
	} {
		root := t.TempDir()
		writeTask(t, root, "t", map[string]string{"task.toml": c.toml})
		_, err := Discover(root)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "task.toml") {
			t.Errorf("%q: err %v, want %q naming task.toml", c.toml, err, c.want)
		}
	}
}

package task

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const unknownKeysRoot = "testdata/golden/unknown-keys/root"

// TestMisspelledTableIsWarnedNotApplied is the reported input: an
// [enviroment] table with network_mode = "no-network" must not load
// silently. It loads with the public network (the table is not read), one
// warning naming the table, its line and the right name, and the key in
// UnknownKeys.
func TestMisspelledTableIsWarnedNotApplied(t *testing.T) {
	tk := mustLoad(t, unknownKeysRoot, "misspelled-table")
	want := []UnknownKey{{Key: "enviroment", Line: 3, Table: true, Suggestion: "environment"}}
	if !reflect.DeepEqual(tk.UnknownKeys, want) {
		t.Fatalf("unknown keys %+v, want %+v", tk.UnknownKeys, want)
	}
	if len(tk.Warnings) != 1 || tk.Warnings[0] != "unknown table enviroment (line 3; did you mean environment?): ignored" {
		t.Errorf("warnings %q", tk.Warnings)
	}
	if tk.Network.Mode != NetworkPublic {
		t.Errorf("network %s", tk.Network.Mode)
	}
	if !strings.Contains(strings.Join(tk.Remarks(), "; "), "did you mean environment?") {
		t.Errorf("tasks list would not show the warning: %q", tk.Remarks())
	}
}

// TestUnknownKeySuggestions covers the kind beyond the reported input:
// misspelled keys in every table of both layouts, keys of list entries,
// a key written above its table's header, free-form tables left alone, and
// keys Harbor or BenchFlow define that proctor does not use (known, so
// unchecked and never unknown).
func TestUnknownKeySuggestions(t *testing.T) {
	d, err := Discover(unknownKeysRoot)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, tk := range d.Tasks {
		got[tk.Name] = map[string]string{}
		for _, u := range tk.UnknownKeys {
			got[tk.Name][u.Key] = u.Suggestion
		}
	}
	want := map[string]map[string]string{
		"known-harbor-keys":  {},
		"md-known-benchflow": {},
		"md-misspelled": {
			"agent.timeout": "agent.timeout_sec", "sandbox.network_mod": "sandbox.network_mode", "verifer": "verifier",
		},
		"misspelled-keys": {
			"agent.Timeout_Sec": "agent.timeout_sec", "agent.network-mode": "agent.network_mode",
			"environment.cpu": "environment.cpus", "environment.healthcheck.cmd": "",
			"environment.mcp_servers[0].comand": "environment.mcp_servers[0].command",
			"environment.memory-mb":             "environment.memory_mb", "metdata": "metadata",
			"network_mode": "environment.network_mode", "solution.envv": "solution.env",
			"task.authors[0].emial": "task.authors[0].email", "verifier.timout_sec": "verifier.timeout_sec",
		},
		"misspelled-table": {"enviroment": "environment"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unknown keys and suggestions:\n got %v\nwant %v", got, want)
	}
	byName := map[string]*Task{}
	for _, tk := range d.Tasks {
		byName[tk.Name] = tk
	}
	if u := byName["known-harbor-keys"].UncheckedKeys; !reflect.DeepEqual(u, []string{"environment.gpu_types", "environment.os", "environment.tpu", "task.version"}) {
		t.Errorf("Harbor keys proctor does not use: unchecked %v", u)
	}
	if u := byName["md-known-benchflow"].UncheckedKeys; !reflect.DeepEqual(u, []string{"benchflow", "reward", "sandbox.gpu_types", "verifier.judge", "verifier.pytest_plugins", "verifier.service", "verifier.type"}) {
		t.Errorf("BenchFlow keys proctor does not use: unchecked %v", u)
	}
	mk := byName["misspelled-keys"]
	if mk.VerifierEnv["enviroment"] != "not a table here" || mk.VerifierEnv["ANY_NAME_AT_ALL"] != "free-form" {
		t.Errorf("[verifier.env] is free-form: %v", mk.VerifierEnv)
	}
	if mk.VerifierTimeoutSec != DefaultVerifierTimeoutSec || mk.AgentNetwork.Mode != NetworkPublic {
		t.Errorf("a misspelled key was applied: verifier timeout %v, agent network %v", mk.VerifierTimeoutSec, mk.AgentNetwork)
	}
	for _, w := range []string{
		"unknown key verifier.timout_sec (line 8; did you mean verifier.timeout_sec?): ignored",
		"unknown key network_mode (line 2; did you mean environment.network_mode?): ignored",
	} {
		if !contains(mk.Warnings, w) {
			t.Errorf("warning %q missing from %q", w, mk.Warnings)
		}
	}
}

// TestStrictRefusesUnknownKeys: a strict Loader fails discovery on the
// first file with an unknown key, naming the file, the first key and its
// line and listing every unknown key of the file; Coverage lists each such
// file as malformed; files with only known keys load.
func TestStrictRefusesUnknownKeys(t *testing.T) {
	strict := &Loader{Strict: true}
	_, err := strict.Discover(unknownKeysRoot)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("strict discovery: %v, want an *Error", err)
	}
	if e.File != "md-misspelled/task.md" || e.Line != 9 || e.Key != "agent.timeout" {
		t.Errorf("error at %s:%d key %s, want md-misspelled/task.md:9 key agent.timeout", e.File, e.Line, e.Key)
	}
	for _, s := range []string{"did you mean agent.timeout_sec?", "unknown key sandbox.network_mod (line 3", "unknown table verifer (line 6", "strict"} {
		if !strings.Contains(e.Error(), s) {
			t.Errorf("%q does not mention %q", e.Error(), s)
		}
	}
	cov, err := strict.Coverage(unknownKeysRoot)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, m := range cov.Malformed {
		files = append(files, m.File)
	}
	if !reflect.DeepEqual(files, []string{"md-misspelled/task.md", "misspelled-keys/task.toml", "misspelled-table/task.toml"}) ||
		!reflect.DeepEqual(cov.Tasks, []string{"known-harbor-keys", "md-known-benchflow"}) {
		t.Errorf("strict coverage: malformed %v, tasks %v", files, cov.Tasks)
	}
	for _, name := range []string{"known-harbor-keys", "md-known-benchflow"} {
		if _, err := strict.Load(filepath.Join(unknownKeysRoot, name)); err != nil {
			t.Errorf("strict load of %s: %v", name, err)
		}
	}
	lenient, err := Coverage(unknownKeysRoot)
	if err != nil {
		t.Fatal(err)
	}
	if got := lenient.UnknownKeys["misspelled-table"]; !reflect.DeepEqual(got, []string{"unknown table enviroment (line 3; did you mean environment?)"}) {
		t.Errorf("coverage unknown keys %q", got)
	}
}

// TestNumericKeys checks every numeric key of both layouts against values
// that must be refused with a precise message naming the key and line:
// non-finite numbers (TOML nan/inf, YAML .nan/.inf), 0 where it would
// silently mean "no limit", negatives, fractions of integers, strings and
// values too large; and that valid values load.
func TestNumericKeys(t *testing.T) {
	type key struct{ table, name, want string }
	timeout := "must be a finite number > 0 (seconds)"
	keys := []key{
		{"agent", "timeout_sec", timeout},
		{"verifier", "timeout_sec", timeout},
		{"environment", "build_timeout_sec", timeout},
		{"environment", "cpus", "must be a finite number > 0 (CPUs)"},
		{"environment", "memory_mb", "must be an integer > 0 (megabytes)"},
		{"environment", "storage_mb", "must be an integer > 0 (megabytes)"},
		{"environment", "gpus", "must be an integer >= 0 (GPUs)"},
	}
	type value struct{ toml, yaml, tomlShown, yamlShown string }
	bad := []value{
		{"nan", ".nan", "nan", ".nan"},
		{"inf", ".inf", "inf", ".inf"},
		{"-inf", "-.inf", "-inf", "-.inf"},
		{"-5", "-5", "-5", "-5"},
		{`"soon"`, "soon", "a string", "a string"},
		{"true", "true", "a boolean", "a boolean"},
	}
	for _, k := range keys {
		cases := bad
		if k.name != "gpus" {
			cases = append(cases, value{"0", "0", "0", "0"}, value{"0.0", "0.0", "0", "0"})
		}
		if strings.Contains(k.want, "integer") {
			cases = append(cases, value{"1.5", "1.5", "1.5", "1.5"})
		}
		for _, c := range cases {
			for _, layout := range []string{"toml", "md"} {
				root := t.TempDir()
				table, file, shown := k.table, "t/task.toml", c.tomlShown
				if layout == "toml" {
					writeTask(t, root, "t", map[string]string{"task.toml": fmt.Sprintf("version = \"1.0\"\n\n[%s]\n%s = %s\n", table, k.name, c.toml)})
				} else {
					if table == "environment" {
						table = "sandbox"
					}
					file, shown = "t/task.md", c.yamlShown
					writeFile(t, root, "t/task.md", fmt.Sprintf("---\nschema_version: \"1.0\"\n%s:\n  %s: %s\n---\nDo it.\n", table, k.name, c.yaml))
				}
				want := fmt.Sprintf("%s:4: key %s.%s: %s, not %s", file, table, k.name, k.want, shown)
				if _, err := Discover(root); err == nil || err.Error() != want {
					t.Errorf("%s %s.%s = %s: error %v\nwant %s", layout, table, k.name, c.toml, err, want)
				}
			}
		}
	}

	// Values at the limits.
	root := t.TempDir()
	writeTask(t, root, "big", map[string]string{"task.toml": "[agent]\ntimeout_sec = 1e300\n"})
	if _, err := Discover(root); err == nil || !strings.Contains(err.Error(), "key agent.timeout_sec: must be at most 31536000 seconds (one year), not 1e+300") {
		t.Errorf("huge timeout: %v", err)
	}
	root = t.TempDir()
	writeTask(t, root, "big", map[string]string{"task.toml": "[environment]\nmemory_mb = 1e30\n"})
	if _, err := Discover(root); err == nil || !strings.Contains(err.Error(), "key environment.memory_mb: must be at most 1099511627776 megabytes") {
		t.Errorf("huge memory: %v", err)
	}
	for _, size := range []string{"nanG", "infG", "0G", "512K", "-1G"} {
		root = t.TempDir()
		writeTask(t, root, "s", map[string]string{"task.toml": "[environment]\nmemory = \"" + size + "\"\n"})
		if _, err := Discover(root); err == nil || !strings.Contains(err.Error(), "s/task.toml:2: key environment.memory: ") {
			t.Errorf("memory = %q: %v", size, err)
		}
	}
	root = t.TempDir()
	writeTask(t, root, "ok", map[string]string{"task.toml": "[agent]\ntimeout_sec = 0.5\n[verifier]\ntimeout_sec = 31536000\n" +
		"[environment]\ncpus = 0.5\nmemory_mb = 2048.0\nstorage_mb = 1\ngpus = 0\nbuild_timeout_sec = 60\n"})
	tk := mustLoad(t, root, "ok")
	if tk.AgentTimeoutSec != 0.5 || tk.VerifierTimeoutSec != MaxTimeoutSec || tk.CPUs != 0.5 || tk.MemoryMB != 2048 || tk.StorageMB != 1 || tk.GPUs != 0 || tk.BuildTimeoutSec != 60 {
		t.Errorf("valid numbers: %+v", tk)
	}
	// A non-finite value stays text where text is meant.
	root = t.TempDir()
	writeTask(t, root, "env", map[string]string{"task.toml": "[verifier.env]\nX = nan\n[metadata]\nscore = inf\n"})
	tk = mustLoad(t, root, "env")
	if tk.VerifierEnv["X"] != "nan" || fmt.Sprint(tk.Metadata["score"]) != "inf" {
		t.Errorf("env %v, metadata %v", tk.VerifierEnv, tk.Metadata)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestEveryModelKeyIsKnown loads a task with every key of Harbor's task
// model (schema 1.4), one with every key of BenchFlow's (0.7: TaskConfig
// and the task.md document) and one with the keys published multi-turn
// tasks add ([task] format, workstream, id; [[steps]] dependencies,
// inherit_prior_session): none is unknown (no warning), the keys proctor
// reads past are listed as unchecked (tasks list --verbose shows them),
// and the keys it uses are applied. (Before, format, workstream, id,
// dependencies, inherit_prior_session, the steps' artifacts, agent and
// verifier keys, verifier.hardening and the other BenchFlow additions
// were warned about as unknown.) docs/decisions/2026-12-02-task-keys.md
// classifies every key.
func TestEveryModelKeyIsKnown(t *testing.T) {
	load := func(name string) *Task {
		t.Helper()
		tk, err := Load(filepath.Join("testdata", "keys", name))
		if err != nil {
			t.Fatal(err)
		}
		if len(tk.UnknownKeys) > 0 {
			t.Errorf("%s: unknown keys %v", name, tk.UnknownKeys)
		}
		for _, w := range tk.Warnings {
			if strings.Contains(w, "unknown") {
				t.Errorf("%s: warning %q", name, w)
			}
		}
		return tk
	}
	h := load("harbor")
	if want := []string{"environment.gpu_types", "environment.os", "environment.tpu", "task.version",
		"verifier.environment.env", "verifier.environment.gpu_types", "verifier.environment.gpus", "verifier.environment.healthcheck",
		"verifier.environment.mcp_servers", "verifier.environment.os", "verifier.environment.skills_dir",
		"verifier.environment.storage_mb", "verifier.environment.tpu", "verifier.environment.workdir"}; !slices.Equal(h.UncheckedKeys, want) {
		t.Errorf("harbor: unchecked %q, want %q", h.UncheckedKeys, want)
	}
	// Used: the artifacts (task and steps), a step's own network policy
	// refused by name rather than run as the task's.
	if len(h.Artifacts) != 2 || !reflect.DeepEqual(h.Artifacts[1], Artifact{Source: "/var/log/app", Destination: "logs/app", Exclude: []string{"*.tmp"}, Service: "main"}) ||
		len(h.Steps) != 2 || h.Steps[1].Artifacts[0].Target() != "second" || h.Steps[0].Artifacts[0].Target() != "app/first.txt" {
		t.Errorf("harbor: artifacts %+v, steps %+v", h.Artifacts, h.Steps)
	}
	if !strings.Contains(h.Unsupported, "steps[0].agent.network_mode") {
		t.Errorf("harbor: a step's own network policy is not refused: %q", h.Unsupported)
	}
	b := load("benchflow")
	if want := []string{"agent.prompt_prefix", "reward", "sandbox.bugswarm_image_tag", "sandbox.gpu_types", "sandbox.os",
		"sandbox.setup_commands", "sandbox.tpu", "task.version", "verifier.hardening", "verifier.judge", "verifier.memory",
		"verifier.pytest_plugins", "verifier.reward_range", "verifier.service", "verifier.type"}; !slices.Equal(b.UncheckedKeys, want) {
		t.Errorf("benchflow: unchecked %q, want %q", b.UncheckedKeys, want)
	}
	// Used: sandbox.image (docker_image), the separate verifier under its
	// BenchFlow names, the oracle's budget; setup_commands refused.
	if b.DockerImage != "debian:bookworm-slim" || b.VerifierMode != VerifierSeparate || b.VerifierEnvironment == nil ||
		b.VerifierEnvironment.DockerImage != "python:3.11-slim" || b.OracleTimeoutSec != 900 || len(b.Artifacts) != 2 {
		t.Errorf("benchflow: image %q, verifier %q %+v, oracle budget %g, artifacts %v", b.DockerImage, b.VerifierMode, b.VerifierEnvironment, b.OracleTimeoutSec, b.Artifacts)
	}
	if !strings.Contains(b.Unsupported, "sandbox.setup_commands") {
		t.Errorf("benchflow: setup_commands not refused: %q", b.Unsupported)
	}
	m := load("multiturn")
	if want := []string{"task.format", "task.id", "task.workstream"}; !slices.Equal(m.UncheckedKeys, want) {
		t.Errorf("multiturn: unchecked %q, want %q", m.UncheckedKeys, want)
	}
	if m.Unsupported != "" || len(m.Steps) != 2 || m.Steps[0].InheritPriorSession || !m.Steps[1].InheritPriorSession ||
		!slices.Equal(m.Steps[1].Dependencies, []string{"one"}) {
		t.Errorf("multiturn: unsupported %q, steps %+v", m.Unsupported, m.Steps)
	}
}

// TestStepDependenciesOrder: a dependency on a step not declared before
// refuses the task (the steps run in declared order); artifacts entries
// that would escape the cell's artifacts/ are load errors naming the key.
func TestStepDependenciesOrder(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "t/task.toml", "schema_version = \"1.1\"\n[environment]\ndocker_image = \"x\"\n"+
		"[[steps]]\nname = \"a\"\ndependencies = [\"b\"]\n[[steps]]\nname = \"b\"\n")
	tk, err := Load(filepath.Join(root, "t"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tk.Unsupported, `steps[0].dependencies names "b"`) {
		t.Errorf("unsupported %q", tk.Unsupported)
	}
	for _, c := range []struct{ toml, want string }{
		{"artifacts = [\"/a/../../etc\"]\n", "must not contain '..'"},
		{"artifacts = [{source = \"/a\", destination = \"/abs\"}]\n", "must be a relative path"},
		{"artifacts = [{source = \"/a\", destination = \"manifest.json\"}]\n", "reserved"},
		{"artifacts = [{source = \"rel\", service = \"db\"}]\n", "must be an absolute path"},
		{"artifacts = [3]\n", "must be a path or a table"},
	} {
		writeFile(t, root, "u/task.toml", c.toml)
		if _, err := Load(filepath.Join(root, "u")); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "artifacts[0]") {
			t.Errorf("%q: err %v, want %q naming artifacts[0]", c.toml, err, c.want)
		}
	}
}

// TestUnresolvedEnvRemarkedOnce: tasks list says an unresolved key once,
// in the warning that says why and what to write instead, not also as a
// bare "unresolved env KEY" line.
func TestUnresolvedEnvRemarkedOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "needs-token")
	for rel, body := range map[string]string{
		"task.toml":              "version = \"1.0\"\n[verifier.env]\nMODE = \"strict\"\nAPI_TOKEN = \"${EXAMPLE_API_TOKEN}\"\n",
		"instruction.md":         "Do it.\n",
		"environment/Dockerfile": "FROM debian:bookworm-slim\n",
		"solution/solve.sh":      "true\n",
		"tests/test.sh":          "true\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tk.UnresolvedEnv, []string{"API_TOKEN"}) {
		t.Fatalf("unresolved %q", tk.UnresolvedEnv)
	}
	r := tk.Remarks()
	if len(r) != 1 || !strings.Contains(r[0], "verifier.env.API_TOKEN not forwarded: ") || !strings.Contains(r[0], "write the value itself") {
		t.Errorf("remarks %q, want the one warning that explains API_TOKEN", r)
	}
}

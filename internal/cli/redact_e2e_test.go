package cli

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProxyCredentialsRedacted: the host's proxy variables hold
// credentials written without a scheme (user:pw@host:port, as http_proxy
// often is). A command arm and the Harbor and BenchFlow arms (fake tools
// behind wrappers that print the variables on stdout and stderr, as a
// verbose tool does) run on the host with them. No file of the run's
// output (solve.log, stdout.tail.txt, run.log, every other), no row of the
// artifact and no event of the exported log holds the password; the
// redacted form is there instead. (Before, only URLs with a scheme were
// redacted, and only in the egress proxy's own records.)
func TestProxyCredentialsRedacted(t *testing.T) {
	const secret = "p4ss-w0rd-9q"
	t.Setenv("HTTPS_PROXY", "opuser:"+secret+"@corp-proxy.test:3128")
	t.Setenv("http_proxy", "http://opuser:"+secret+"@corp-proxy.test:3128")
	t.Setenv("PROCTOR_HOME", t.TempDir())
	root := writeTasks(t, 1)
	delegatedFakes(t, "codex task-a pass\nclaude-agent-acp task-a pass\n")
	// Wrappers first on PATH: each prints the proxy variables, then runs
	// the fake tool.
	wrap := t.TempDir()
	fakes, err := filepath.Abs("../../pkg/harness/testdata/fakes")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"harbor", "bench"} {
		script := "#!/usr/bin/env bash\necho \"using proxy $HTTPS_PROXY\"\necho \"proxy (stderr) $http_proxy\" >&2\nexec " + filepath.Join(fakes, tool) + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(wrap, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", wrap+string(os.PathListSeparator)+os.Getenv("PATH"))
	a, out := runMain(t, "tasks", "run", "--tasks-root", root, "--all",
		"--harnesses", "codex", "--harnesses", "benchflow:claude-agent-acp",
		"--harnesses", `command:echo "proxy=$HTTPS_PROXY"; echo "err $HTTPS_PROXY" >&2; echo 1 > {output_dir}/reward.txt`)
	if len(a.Results) != 3 {
		t.Fatalf("%d rows", len(a.Results))
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the proxy password:\n%s", p, b)
		}
		if bytes.Contains(b, []byte("REDACTED@corp-proxy.test:3128")) {
			seen[filepath.Base(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"solve.log", "stdout.tail.txt", "a.json"} {
		if !seen[f] {
			t.Errorf("no %s shows the redacted proxy address (seen in %v)", f, seen)
		}
	}
	for _, r := range a.Results {
		if !strings.Contains(r.StdoutTail, "REDACTED@corp-proxy.test:3128") {
			t.Errorf("%s: stdout tail %q lacks the redacted address", r.Harness, r.StdoutTail)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := mainT(t, []string{"events", "export", a.Run.ID, "--format", "jsonl"}, &stdout, &stderr); code != 0 {
		t.Fatalf("events export: exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), secret) {
		t.Errorf("the event log holds the proxy password")
	}
	if !strings.Contains(stdout.String(), "REDACTED@corp-proxy.test:3128") {
		t.Errorf("the event log lacks the redacted address")
	}
}

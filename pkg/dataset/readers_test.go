package dataset

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// nodeModules returns the node binary and the repo's .cache/node/node_modules
// holding @duckdb/node-api and apache-arrow. When either is missing the test
// is skipped with the reason, or fails when the CI environment variable is
// set (as internal/testutil.Docker does): the fix is `make setup-node`.
func nodeModules(t *testing.T) (node, modules string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if _, ci := os.LookupEnv("CI"); ci {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node is not installed (run `make setup-node`): %v", err)
	}
	root := repoRoot(t)
	modules = filepath.Join(root, ".cache", "node", "node_modules")
	for _, pkg := range []string{"@duckdb/node-api", "apache-arrow"} {
		if _, err := os.Stat(filepath.Join(modules, pkg, "package.json")); err != nil {
			unavailable("%s is not installed in %s (run `make setup-node`): %v", pkg, modules, err)
		}
	}
	return node, modules
}

// repoRoot walks up from the working directory to the directory holding
// go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// readWithNode runs testdata/<script> on file and decodes its JSON output
// into out (numbers as json.Number).
func readWithNode(t *testing.T, script, file string, out any) {
	t.Helper()
	node, modules := nodeModules(t)
	scriptPath, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, scriptPath, file)
	cmd.Dir = filepath.Dir(modules)
	cmd.Env = append(os.Environ(), "NODE_MODULES_DIR="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s %s: %v\n%s", script, file, err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("node %s: output is not JSON: %v\n%s", script, err, stdout.String())
	}
}

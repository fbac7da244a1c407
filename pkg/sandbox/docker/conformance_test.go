package docker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxtest"
)

// testImage is the image the Docker tests run (made by `make setup`).
const testImage = "debian:bookworm-slim"

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Driver, sandbox.Spec) {
		cli := testutil.Docker(t)
		testutil.RequireImage(t, cli, testImage)
		// A pids limit low enough for the fork bomb of the ProcessKiller
		// check to reach it quickly.
		d, err := New(Options{Client: cli, Defaults: sandbox.Limits{PidsLimit: 256}})
		if err != nil {
			t.Fatal(err)
		}
		return d, sandbox.Spec{RunID: "conf-" + randomHex(4), CellID: "conf/cell", Image: testImage, Lifetime: 10 * time.Minute}
	})
}

func writeFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

package testutil

import (
	"os"
	"testing"
)

// EnvE2E gates the long end-to-end variants: set to "long" (`make e2e`)
// they run; otherwise they are skipped, and `make test` (CI) stays under
// its time budget. What is gated and why is in docs/testing.md.
const EnvE2E = "PROCTOR_E2E"

// Long reports whether the long end-to-end variants run (PROCTOR_E2E=long),
// for a test that keeps its core in `make test` and adds cases under
// `make e2e`.
func Long() bool { return os.Getenv(EnvE2E) == "long" }

// LongE2E skips t unless PROCTOR_E2E=long, with a message naming the make
// target that runs it. Only a test whose proof CI already has from a
// shorter test (the same rule through another arm, another user, another
// fixture) is gated: every hostile-agent verdict test, the real Claude and
// Codex cells, the gateway, control and resume tests stay in `make test`.
func LongE2E(t testing.TB) {
	t.Helper()
	if !Long() {
		t.Skipf("a long end-to-end variant: run it with `make e2e` (%s=long); docs/testing.md says why it is not in `make test`", EnvE2E)
	}
}

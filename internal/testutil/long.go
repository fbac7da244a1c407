package testutil

import (
	"os"
	"testing"
)

// EnvE2E gates the long end-to-end variants: set to "long" (`make e2e`)
// they run; otherwise they are skipped, and `make test` (CI) stays under
// its time budget. What is gated and why is in docs/testing.md.
const EnvE2E = "PROCTOR_E2E"

// LongE2E skips t unless PROCTOR_E2E=long, with a message naming the make
// target that runs it. Only a test whose proof CI already has from a
// shorter test (the same rule through another arm, another user, another
// fixture) is gated: every hostile-agent verdict test, the real Claude and
// Codex cells, the gateway, control and resume tests stay in `make test`.
func LongE2E(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvE2E) != "long" {
		t.Skipf("a long end-to-end variant: run it with `make e2e` (%s=long); docs/testing.md says why it is not in `make test`", EnvE2E)
	}
}

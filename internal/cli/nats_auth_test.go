package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestNatsCredentialsFlagsAndEnv: against a cluster that requires a user,
// a command without credentials is refused by the server, and the same
// command with --nats-user/--nats-password or PROCTOR_NATS_USER /
// PROCTOR_NATS_PASSWORD gets in; credentials without --nats are a usage
// error.
func TestNatsCredentialsFlagsAndEnv(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "proctor", Password: "s3cret"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	url := s.ClientURL()

	_, errOut, code := proctor(t, "runs", "list", "--nats", url)
	if code == 0 || !strings.Contains(strings.ToLower(errOut), "authorization violation") {
		t.Fatalf("no credentials: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = proctor(t, "runs", "list", "--nats", url, "--nats-user", "proctor", "--nats-password", "wrong")
	if code == 0 {
		t.Fatalf("a wrong password got in: %q", errOut)
	}
	mustProctor(t, "runs", "list", "--nats", url, "--nats-user", "proctor", "--nats-password", "s3cret")

	setenv(t, "PROCTOR_NATS_USER", "proctor")
	setenv(t, "PROCTOR_NATS_PASSWORD", "s3cret")
	mustProctor(t, "runs", "list", "--nats", url)

	_, errOut, code = proctor(t, "runs", "list")
	if code != ExitUsage || !strings.Contains(errOut, "need --nats") {
		t.Fatalf("credentials without --nats: exit %d, stderr %q", code, errOut)
	}
}

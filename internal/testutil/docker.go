// Package testutil holds helpers shared by the project's tests.
package testutil

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// pingTimeout bounds how long Docker waits for the engine to answer a ping.
const pingTimeout = 5 * time.Second

// Docker returns a client for the local Docker engine, configured from the
// environment (DOCKER_HOST and friends) with API version negotiation, after
// checking that the engine answers a ping. The client is closed when the test
// ends.
//
// When no engine answers, the test is skipped with the reason, except when
// the CI environment variable is set: then the test fails, so that a CI run
// never passes by skipping its Docker tests (as Nomad's
// testutil.DockerCompatible does). The fix is `make setup`.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		unavailable(t, "docker client: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = cli.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		unavailable(t, "docker engine does not answer (run `make setup`): %v", err)
		return nil
	}
	cli.NegotiateAPIVersion(ctx)
	return cli
}

// RequireImage checks that the image ref (for example "python:3.11-slim") is
// present in the engine's local store. It never pulls. A missing image skips
// the test, or fails it when CI is set; the message names `make setup`, which
// pulls or builds the project's base images.
func RequireImage(t testing.TB, cli *client.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	_, err := cli.ImageInspect(ctx, ref)
	switch {
	case err == nil:
	case errdefs.IsNotFound(err):
		unavailable(t, "docker image %s is missing (run `make setup`)", ref)
	default:
		unavailable(t, "docker image %s: %v (run `make setup`)", ref, err)
	}
}

// unavailable skips the test, or fails it when the CI environment variable
// is set to anything.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if _, ci := os.LookupEnv("CI"); ci {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Package bustest starts a real in-process nats-server with JetStream for
// tests, as nats-server's RunBasicJetStreamServer does: a random port, a
// t.TempDir() store, no logs, no signal handlers, shut down on cleanup.
// Every test that needs NATS uses it; there are no mocks of NATS.
package bustest

import (
	"context"
	"testing"

	"github.com/proctor-eval/proctor/pkg/bus"
)

// Server starts an embedded server for the test.
func Server(t testing.TB) *bus.Embedded {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// Bus starts a server and connects a Bus to it over the network (so the
// test exercises the same path as a remote service).
func Bus(t testing.TB) (*bus.Bus, *bus.Embedded) {
	t.Helper()
	e := Server(t)
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, e
}

package bus_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestEmbeddedListensOnLoopbackOnly: the embedded server of `tasks run`
// answers on 127.0.0.1 only, so no sandbox network reaches it.
func TestEmbeddedListensOnLoopbackOnly(t *testing.T) {
	e := bustest.Server(t)
	addr, ok := e.Server.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() || addr.IP.String() != "127.0.0.1" {
		t.Fatalf("embedded server listens on %v, want 127.0.0.1", e.Server.Addr())
	}
	if !strings.HasPrefix(e.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("client URL %s", e.ClientURL())
	}
}

// startConfigured runs an in-process nats-server from the options, on a
// random loopback port with a temp store.
func startConfigured(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// TestSampleConfigRejectsForgedVerdicts runs a server from the shipped
// deploy/nats-server.conf: a client without credentials is refused; the
// service user runs a Bus; the observer user reads events but can publish
// neither a Verdict (core or JetStream) nor work.
func TestSampleConfigRejectsForgedVerdicts(t *testing.T) {
	t.Setenv("PROCTOR_SERVICE_PASSWORD", "service-secret")
	t.Setenv("PROCTOR_OBSERVER_PASSWORD", "observer-secret")
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := startConfigured(t, opts)
	url := s.ClientURL()
	ctx := context.Background()

	if _, err := bus.Connect(ctx, url, nil, nats.MaxReconnects(0)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("a client without credentials: %v, want an authorization violation", err)
	}
	if _, err := bus.Connect(ctx, url, nil, nats.UserInfo("proctor", "wrong")); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	svcOpts, err := bus.Auth{User: "proctor", Password: "service-secret"}.Options()
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Connect(ctx, url, nil, svcOpts...)
	if err != nil {
		t.Fatalf("the service user: %v", err)
	}
	defer b.Close()

	obs, err := nats.Connect(url, nats.UserInfo("observer", "observer-secret"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	seen, err := obs.SubscribeSync("proctor.run.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}

	run, cell := events.NewID(), "t/agent:x/-/0"
	one := 1.0
	forged := events.Must(events.Verdict, run, cell, 1, "verifier", events.VerdictData{Reward: &one})
	data, err := events.Encode(forged)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.Subject(forged)
	// Core publish: the server drops it with a permissions violation.
	if err := obs.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	// JetStream publish: refused, no ack.
	js, err := jetstream.New(obs)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := js.Publish(pctx, subject, data); err == nil {
		t.Fatal("the observer published a Verdict through JetStream")
	}
	if _, err := js.Publish(pctx, events.LaunchSubject, []byte(`{"run_id":"x","cell_id":"y"}`)); err == nil {
		t.Fatal("the observer published a launch job")
	}
	if _, err := b.Events.GetLastMsgForSubject(ctx, subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a forged Verdict is in the log: %v", err)
	}

	// The service's own events are published, and the observer reads them.
	real := events.Must(events.Verdict, run, cell, 1, "verifier", events.VerdictData{Reward: new(float64)})
	if err := b.Publish(ctx, real); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := b.LastEvent(ctx, subject)
	if err != nil || got.ID != real.ID {
		t.Fatalf("last Verdict in the log: %v %v, want the service's", got.ID, err)
	}
	m, err := seen.NextMsg(5 * time.Second)
	if err != nil || !strings.Contains(string(m.Data), real.ID) {
		t.Fatalf("the observer's subscription: %v", err)
	}
}

// TestAuthNkeyAndOptions: a server that knows a user only by its nkey
// takes a client signing with the seed file; inconsistent credentials are
// errors before any connection.
func TestAuthNkeyAndOptions(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "proctor.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startConfigured(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	ctx := context.Background()
	if _, err := bus.Connect(ctx, s.ClientURL(), nil, nats.MaxReconnects(0)); err == nil {
		t.Fatal("a client without the nkey was accepted")
	}
	opts, err := bus.Auth{NkeySeedFile: seedFile}.Options()
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Connect(ctx, s.ClientURL(), nil, opts...)
	if err != nil {
		t.Fatalf("nkey client: %v", err)
	}
	b.Close()

	for _, a := range []bus.Auth{
		{User: "u", CredsFile: "x"},
		{Password: "p"},
		{CredsFile: filepath.Join(t.TempDir(), "missing.creds")},
		{NkeySeedFile: filepath.Join(t.TempDir(), "missing.nk")},
	} {
		if _, err := a.Options(); err == nil {
			t.Errorf("%+v: no error", a)
		}
	}
}

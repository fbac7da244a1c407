// Package bus connects proctor to NATS JetStream: an embedded nats-server
// for single-process use, the streams and KV bucket of DESIGN §7,
// publishing with Nats-Msg-Id = event id, work queues with durable pull
// consumers, and ordered reads of a run's events.
package bus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configures an in-process nats-server. The zero value
// listens on a random loopback port and stores under Home()/jetstream.
type EmbeddedOptions struct {
	// StoreDir is the JetStream file store directory.
	StoreDir string
	// Host defaults to 127.0.0.1; Port 0 means a random free port.
	Host string
	Port int
	// ServerName names the server (default "proctor").
	ServerName string
	// Debug turns on the server's own log on stderr.
	Debug bool
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	Server *server.Server
}

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.Server.ClientURL() }

// Shutdown stops the server and waits for it to finish; safe to call twice.
func (e *Embedded) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}

// StartEmbedded starts nats-server in this process with JetStream on a file
// store and waits until it accepts connections (10 s at most). Streams and
// writes flush to the OS without an fsync per write (DESIGN §7).
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.StoreDir == "" {
		o.StoreDir = filepath.Join(Home(), "jetstream")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	if o.ServerName == "" {
		o.ServerName = "proctor"
	}
	if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("bus: store dir: %w", err)
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoLog:      !o.Debug,
		NoSigs:     true,
		// JetStream's default max payload (1 MiB) holds any event: stdout
		// tails are bounded well below it.
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: nats-server: %w", err)
	}
	if o.Debug {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("bus: embedded nats-server did not become ready within 10s (is the store dir " + o.StoreDir + " locked by another proctor?)")
	}
	return &Embedded{Server: s}, nil
}

// Home is proctor's data directory: $PROCTOR_HOME, else
// $XDG_DATA_HOME/proctor, else ~/.local/share/proctor.
func Home() string { return HomeFrom(os.Getenv) }

// HomeFrom is Home with the variables read through getenv instead of the
// process environment.
func HomeFrom(getenv func(string) string) string {
	if h := getenv("PROCTOR_HOME"); h != "" {
		return h
	}
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "proctor")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "proctor")
	}
	return filepath.Join(os.TempDir(), "proctor")
}

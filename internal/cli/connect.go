package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/proctor-eval/proctor/pkg/bus"
)

// connection is a Bus plus the embedded server behind it, if any.
type connection struct {
	*bus.Bus
	embedded *bus.Embedded
}

func (c *connection) Close() {
	c.Bus.Close()
	if c.embedded != nil {
		c.embedded.Shutdown()
		_ = os.Remove(urlFile())
	}
}

// urlFile is where an embedded server announces its URL, so other proctor
// commands on this machine (watch, runs) reach the running one instead of
// failing on the locked store.
func urlFile() string { return filepath.Join(bus.Home(), "nats.url") }

// connect dials --nats when given, with the credentials of --nats-user /
// --nats-password, --nats-creds or --nats-nkey; else the embedded server of a running
// proctor on this machine; else it starts an embedded server on the store
// under $PROCTOR_HOME.
func (g *globals) connect(ctx context.Context) (*connection, error) {
	log := g.logger()
	if g.natsURL != "" {
		opts, err := g.natsAuth.Options()
		if err != nil {
			return nil, usageError{err}
		}
		b, err := bus.Connect(ctx, g.natsURL, log, opts...)
		if err != nil {
			return nil, err
		}
		return &connection{Bus: b}, nil
	}
	if !g.natsAuth.Empty() {
		return nil, usageError{errors.New("NATS credentials (--nats-user, --nats-password, --nats-creds, --nats-nkey or their PROCTOR_NATS_* env) need --nats URL: the embedded server takes no credentials")}
	}
	if data, err := os.ReadFile(urlFile()); err == nil {
		if b, err := bus.Connect(ctx, string(data), log); err == nil {
			return &connection{Bus: b}, nil
		}
	}
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(bus.Home(), "jetstream")})
	if err != nil {
		return nil, err
	}
	b, err := bus.Connect(ctx, e.ClientURL(), log)
	if err != nil {
		e.Shutdown()
		return nil, err
	}
	if err := os.WriteFile(urlFile(), []byte(e.ClientURL()), 0o644); err != nil {
		b.Close()
		e.Shutdown()
		return nil, fmt.Errorf("write %s: %w", urlFile(), err)
	}
	return &connection{Bus: b, embedded: e}, nil
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
)

// connection is a Bus plus the embedded server behind it, if any.
type connection struct {
	*bus.Bus
	embedded *bus.Embedded
	lock     *storeLock
	// urlFile is the announcement an embedded server removes on Close.
	urlFile string
}

func (c *connection) Close() {
	c.Bus.Close()
	if c.embedded != nil {
		c.embedded.Shutdown()
		_ = os.Remove(c.urlFile)
	}
	c.lock.unlock()
}

// urlFile is where an embedded server announces its URL, so other proctor
// commands on this machine (watch, runs) reach the running one instead of
// failing on the locked store.
func urlFile(home string) string { return filepath.Join(home, "nats.url") }

// connect dials --nats when given, with the credentials of --nats-user /
// --nats-password, --nats-creds or --nats-nkey; else the embedded server of a running
// proctor on this machine; else it starts an embedded server on the store
// under $PROCTOR_HOME, holding the store lock.
func (g *globals) connect(ctx context.Context) (*connection, error) {
	return g.dial(ctx, false)
}

// connectOwner is connect for a command that runs work on the store
// (tasks run, runs resume): without --nats it must own the embedded store,
// so it fails at once, naming the holder's pid, when another process holds
// it (in-process services of two processes would share one work queue and
// the second would die with the first's server), unless that process is a
// viewer, which hands the store over when asked (storeYieldSubject).
func (g *globals) connectOwner(ctx context.Context) (*connection, error) {
	return g.dial(ctx, true)
}

func (g *globals) dial(ctx context.Context, owner bool) (*connection, error) {
	log := g.logger()
	if g.natsURL != "" {
		opts, err := g.natsAuth.Options()
		if err != nil {
			return nil, usageError{err}
		}
		b, err := bus.ConnectReplicas(ctx, g.natsURL, log, g.replicas, opts...)
		if err != nil {
			return nil, err
		}
		return &connection{Bus: b}, nil
	}
	if !g.natsAuth.Empty() {
		return nil, usageError{errors.New("NATS credentials (--nats-user, --nats-password, --nats-creds, --nats-nkey or their PROCTOR_NATS_* env) need --nats URL: the embedded server takes no credentials")}
	}
	if !owner {
		if data, err := os.ReadFile(urlFile(g.home)); err == nil {
			if b, err := bus.Connect(ctx, string(data), log); err == nil {
				return &connection{Bus: b}, nil
			}
		}
	}
	lock, err := lockStore(g.home)
	if errors.Is(err, errStoreBusy) && owner && askYield(ctx, g.home) {
		// A viewer held the store and hands it over.
		fmt.Fprintln(g.stderr, "proctor view hands the store over to this run")
		for deadline := time.Now().Add(yieldLockWait); ; {
			if lock, err = lockStore(g.home); !errors.Is(err, errStoreBusy) || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond): // polling the lock the viewer lets go of
			}
		}
	}
	if errors.Is(err, errStoreBusy) && owner {
		// A lock let go of a moment ago can still be busy (lockBusyGrace).
		for deadline := time.Now().Add(lockBusyGrace); errors.Is(err, errStoreBusy) && time.Now().Before(deadline); {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond): // polling the lock
			}
			lock, err = lockStore(g.home)
		}
		if errors.Is(err, errStoreBusy) {
			return nil, fmt.Errorf("%w: another proctor runs on this store; wait for it to end, set PROCTOR_HOME to another directory, or run against a cluster with --nats", err)
		}
	}
	if errors.Is(err, errStoreBusy) {
		// The holder announces its server's URL just after it locks; a
		// holder that has let go since (a lock still busy for a moment
		// after its holder closed it: lockBusyGrace) leaves the lock to
		// be taken.
		deadline := time.Now().Add(10 * time.Second)
		for {
			if data, rerr := os.ReadFile(urlFile(g.home)); rerr == nil {
				if b, cerr := bus.Connect(ctx, string(data), log); cerr == nil {
					return &connection{Bus: b}, nil
				}
			}
			if lock, err = lockStore(g.home); !errors.Is(err, errStoreBusy) {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%w, and its server at %s does not answer", err, urlFile(g.home))
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond): // polling the holder's announcement
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if owner {
		// This process holds the lock, so no proctor's embedded server
		// runs on the store; a server that answers at the announced URL
		// was started by someone else for this home (a test, an operator's
		// own nats-server) and is used as --nats would be, with this
		// process's services in-process. A stale URL of a dead proctor
		// does not answer.
		if data, rerr := os.ReadFile(urlFile(g.home)); rerr == nil {
			if b, cerr := bus.Connect(ctx, string(data), log); cerr == nil {
				return &connection{Bus: b, lock: lock}, nil
			}
		}
	}
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(g.home, "jetstream")})
	if err != nil {
		lock.unlock()
		return nil, err
	}
	b, err := bus.Connect(ctx, e.ClientURL(), log)
	if err != nil {
		e.Shutdown()
		lock.unlock()
		return nil, err
	}
	if err := os.WriteFile(urlFile(g.home), []byte(e.ClientURL()), 0o644); err != nil {
		b.Close()
		e.Shutdown()
		lock.unlock()
		return nil, fmt.Errorf("write %s: %w", urlFile(g.home), err)
	}
	return &connection{Bus: b, embedded: e, lock: lock, urlFile: urlFile(g.home)}, nil
}

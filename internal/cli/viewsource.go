package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/proctor-eval/proctor/internal/view"
	"github.com/proctor-eval/proctor/pkg/bus"
)

// storeYieldSubject is where a viewer serving the embedded store itself
// takes a request to hand the store over: a `tasks run` or `runs resume`
// that finds the store held asks there before it gives up. A viewer
// answers "ok" and lets go of the store; any other holder has no
// responder, and the asker fails as before.
const storeYieldSubject = "proctor.store.yield"

// yieldGrace bounds how long a viewer that handed the store over leaves
// the store to the asker before it may take it again, should the asker
// never take it (it died, say); it takes the store again as soon as the
// asker has had it. The asker takes the lock within yieldLockWait.
const (
	yieldGrace    = 20 * time.Second
	yieldLockWait = 15 * time.Second
)

// askYield asks the holder of the store, through the server it announced,
// to hand the store over, and reports whether it agreed (only a viewer
// does): its "ok", or its server gone while it answered (it shuts down
// once it has answered, and may take the answer with it). Any other
// holder has no responder.
func askYield(ctx context.Context, home string) bool {
	data, err := os.ReadFile(urlFile(home))
	if err != nil {
		return false
	}
	nc, err := nats.Connect(string(data), nats.Timeout(2*time.Second), nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, storeYieldSubject, nil)
	if errors.Is(err, nats.ErrConnectionClosed) {
		return true
	}
	return err == nil && string(m.Data) == "ok"
}

// viewSource is `proctor view`'s way to the embedded store (no --nats):
// it never holds the store against a run. While a proctor process serves
// the store (a run), it reads through that process's server (nats.url);
// when that process exits, it serves the store itself, holding the store
// lock and announcing its server as a run would, and hands the store over
// to a run that asks (storeYieldSubject), then reads through the run's
// server. Requests wait (view's pending) while the store changes hands.
type viewSource struct {
	g *globals
	// onChange, when set, is told each time the source has a new
	// connection.
	onChange func(view.Log)

	mu      sync.Mutex
	cur     *view.Log     // nil while the store changes hands
	changed chan struct{} // closed and replaced when cur is set
}

func newViewSource(g *globals) *viewSource {
	return &viewSource{g: g, changed: make(chan struct{})}
}

// Log implements view.Source.
func (v *viewSource) Log(ctx context.Context) (view.Log, error) {
	for {
		v.mu.Lock()
		cur, changed := v.cur, v.changed
		v.mu.Unlock()
		if cur != nil {
			return *cur, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return view.Log{}, ctx.Err()
		}
	}
}

func (v *viewSource) set(l *view.Log) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cur = l
	if l != nil {
		close(v.changed)
		v.changed = make(chan struct{})
	}
}

// run keeps the source connected until ctx ends: through a running
// proctor's server while there is one, else serving the store itself.
func (v *viewSource) run(ctx context.Context) {
	var handedAt time.Time // when the store was handed over, until the asker has had it
	for ctx.Err() == nil {
		if v.read(ctx) {
			continue
		}
		if !handedAt.IsZero() && (lockedByOther(v.g.home) || time.Since(handedAt) > yieldGrace) {
			handedAt = time.Time{}
		}
		if handedAt.IsZero() {
			if handed, ok := v.serve(ctx); ok {
				if handed {
					handedAt = time.Now()
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // polling the store's owner and its announcement
		}
	}
}

// read connects to the server announced in nats.url and serves requests
// through it until the connection is lost (its process exited) or ctx
// ends; false when nothing answers there.
func (v *viewSource) read(ctx context.Context) bool {
	data, err := os.ReadFile(urlFile(v.g.home))
	if err != nil {
		return false
	}
	// A server that goes away is that process's end: no reconnecting, and
	// a server stopping while this connects does not hold it.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	b, err := bus.Connect(cctx, string(data), v.g.logger(), nats.NoReconnect())
	cancel()
	if err != nil {
		return false
	}
	lost := make(chan struct{})
	var once sync.Once
	gone := func() { once.Do(func() { close(lost) }) }
	b.NC.SetDisconnectErrHandler(func(*nats.Conn, error) { gone() })
	b.NC.SetClosedHandler(func(*nats.Conn) { gone() })
	if !b.NC.IsConnected() {
		gone()
	}
	log := v.g.logger().With("service", "view")
	log.Debug("reading the store through a running proctor's server", "url", string(data))
	v.publish(view.Log{Bus: b, Lost: lost})
	select {
	case <-lost:
		log.Debug("the server went away", "url", string(data))
	case <-ctx.Done():
	}
	v.set(nil)
	gone()
	b.Close()
	return true
}

// serve takes the store (its lock; false when another process holds it),
// starts the embedded server, announces it and serves requests through it
// until a run asks for the store (handed: true) or ctx ends. It lets go
// of everything before it returns.
func (v *viewSource) serve(ctx context.Context) (handed, ok bool) {
	lock, err := lockStore(v.g.home)
	if err != nil {
		return false, false
	}
	defer lock.unlock()
	if data, err := os.ReadFile(urlFile(v.g.home)); err == nil {
		// A server someone else started for this home (as tasks run
		// uses one): read through it instead.
		if b, err := bus.Connect(ctx, string(data), v.g.logger()); err == nil {
			b.Close()
			return false, false
		}
	}
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: filepath.Join(v.g.home, "jetstream")})
	if err != nil {
		fmt.Fprintln(v.g.stderr, "proctor view: opening the store:", err)
		return false, false
	}
	defer e.Shutdown()
	b, err := bus.Connect(ctx, e.ClientURL(), v.g.logger())
	if err != nil {
		fmt.Fprintln(v.g.stderr, "proctor view: opening the store:", err)
		return false, false
	}
	lost := make(chan struct{})
	defer b.Close()
	defer close(lost)
	defer v.set(nil)
	asked := make(chan struct{}, 1)
	var once sync.Once
	sub, err := b.NC.Subscribe(storeYieldSubject, func(m *nats.Msg) {
		once.Do(func() {
			_ = m.Respond([]byte("ok"))
			asked <- struct{}{}
		})
	})
	if err != nil {
		fmt.Fprintln(v.g.stderr, "proctor view:", err)
		return false, false
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.NC.Flush(); err != nil {
		return false, false
	}
	if err := os.WriteFile(urlFile(v.g.home), []byte(e.ClientURL()), 0o644); err != nil {
		fmt.Fprintf(v.g.stderr, "proctor view: write %s: %v\n", urlFile(v.g.home), err)
		return false, false
	}
	defer func() {
		// Only this process's own announcement.
		if data, err := os.ReadFile(urlFile(v.g.home)); err == nil && string(data) == e.ClientURL() {
			_ = os.Remove(urlFile(v.g.home))
		}
	}()
	log := v.g.logger().With("service", "view")
	log.Debug("serving the store", "url", e.ClientURL())
	v.publish(view.Log{Bus: b, Owned: true, Since: time.Now(), Lost: lost})
	select {
	case <-asked:
		log.Debug("handing the store over to a run")
		_ = b.NC.Flush() // the answer reaches the asker before the server goes
		return true, true
	case <-ctx.Done():
		return false, true
	}
}

// lockedByOther reports whether the store lock names another process
// than this one: another process took it (the lock file keeps the pid of
// its last holder).
func lockedByOther(home string) bool {
	data, err := os.ReadFile(lockPath(home))
	return err == nil && strings.TrimSpace(string(data)) != strconv.Itoa(os.Getpid())
}

func (v *viewSource) publish(l view.Log) {
	v.set(&l)
	if v.onChange != nil {
		v.onChange(l)
	}
}

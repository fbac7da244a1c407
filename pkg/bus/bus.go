package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and bucket names (DESIGN §7).
const (
	EventsStream = "PROCTOR_EVENTS"
	WorkStream   = "PROCTOR_WORK"
	RunsBucket   = "PROCTOR_RUNS"
	NodesBucket  = "PROCTOR_NODES"

	// DuplicateWindow is how long the streams remember Nats-Msg-Id values.
	DuplicateWindow = 2 * time.Minute
	// MaxPending bounds outstanding async publishes before Publish waits.
	MaxPending = 4096
)

// Bus is a JetStream connection with proctor's streams. It is safe for
// concurrent use.
type Bus struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Events jetstream.Stream
	Work   jetstream.Stream
	Runs   jetstream.KeyValue
	// Nodes holds each node's verifier heartbeat (NodeBeat, NodeSeen).
	Nodes jetstream.KeyValue
	// Replicas is the replicas the streams were created with (an
	// existing stream may have more).
	Replicas int
	log      *slog.Logger
	owned    bool

	failMu sync.Mutex
	failed []failedPub
}

// Connect dials url (a nats:// URL, comma-separated for a cluster) and
// makes sure the streams and bucket exist, with the default replicas (see
// ConnectReplicas). A nil logger discards.
func Connect(ctx context.Context, url string, log *slog.Logger, opts ...nats.Option) (*Bus, error) {
	return ConnectReplicas(ctx, url, log, 0, opts...)
}

// ConnectReplicas is Connect with the replicas of the streams and bucket
// it creates: replicas ≤ 0 means R3 when the server is in a cluster that
// knows 3 or more servers, R1 otherwise. An existing stream's replicas
// are never lowered (an operator's R3 stays R3); a higher count than it
// has raises it. Creating the streams retries transient errors (a
// cluster still electing leaders) until ctx ends.
func ConnectReplicas(ctx context.Context, url string, log *slog.Logger, replicas int, opts ...nats.Option) (*Bus, error) {
	opts = append([]nats.Option{nats.Name("proctor"), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", url, err)
	}
	b, err := newBus(ctx, nc, log, replicas)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// ConnectEmbedded connects in-process to an embedded server.
func ConnectEmbedded(ctx context.Context, e *Embedded, log *slog.Logger) (*Bus, error) {
	return Connect(ctx, e.ClientURL(), log, nats.InProcessServer(inProc{e.Server}))
}

type inProc struct{ s *server.Server }

func (p inProc) InProcessConn() (net.Conn, error) { return p.s.InProcessConn() }

func newBus(ctx context.Context, nc *nats.Conn, log *slog.Logger, replicas int) (*Bus, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bus{NC: nc, log: log}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(MaxPending),
		jetstream.WithPublishAsyncErrHandler(b.onAsyncError), jetstream.WithPublishAsyncTimeout(RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	b.JS = js
	if replicas <= 0 {
		replicas = DefaultReplicas(nc)
	}
	b.Replicas = replicas
	if err := Retry(ctx, log, "create the streams", func(ctx context.Context) error { return b.ensure(ctx, replicas) }); err != nil {
		return nil, err
	}
	return b, nil
}

// DefaultReplicas is the replicas of streams proctor creates on the
// connected server: 3 in a cluster of 3 or more known servers, else 1.
func DefaultReplicas(nc *nats.Conn) int {
	if nc.ConnectedClusterName() != "" && len(nc.Servers()) >= 3 {
		return 3
	}
	return 1
}

// keep returns want, or the replicas the stream name already has when
// that is more (an existing stream is never lowered).
func (b *Bus) keep(ctx context.Context, name string, want int) int {
	if s, err := b.JS.Stream(ctx, name); err == nil && s.CachedInfo().Config.Replicas > want {
		return s.CachedInfo().Config.Replicas
	}
	return want
}

func (b *Bus) ensure(ctx context.Context, replicas int) error {
	// One try is bounded by RequestTimeout: a request made while a
	// cluster elects its meta leader has no answer, and Retry tries again.
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var err error
	b.Events, err = b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "proctor event log (DESIGN §7); replay reads it from the start",
		Subjects:    []string{"proctor.run.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicateWindow,
		Replicas:    b.keep(ctx, EventsStream, replicas),
	})
	if err != nil {
		return fmt.Errorf("bus: stream %s: %w", EventsStream, err)
	}
	b.Work, err = b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        WorkStream,
		Description: "proctor work queue: launch and verify.<node> jobs",
		Subjects:    []string{"proctor.work.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicateWindow,
		Replicas:    b.keep(ctx, WorkStream, replicas),
	})
	if err != nil {
		return fmt.Errorf("bus: stream %s: %w", WorkStream, err)
	}
	b.Runs, err = b.keyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      RunsBucket,
		Description: "proctor run index: spec, status, artifact location",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    b.keep(ctx, "KV_"+RunsBucket, replicas),
	})
	if err != nil {
		return err
	}
	b.Nodes, err = b.keyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      NodesBucket,
		Description: "proctor node liveness: each node's verifier heartbeat",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    b.keep(ctx, "KV_"+NodesBucket, replicas),
	})
	return err
}

// keyValue creates or updates the KV bucket of cfg and returns a handle
// that reads through the bucket's stream leader (leaderReads). A bucket
// already as cfg asks, direct gets off, is only bound: the processes
// that connect leave its stream's configuration alone.
func (b *Bus) keyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if s, err := b.JS.Stream(ctx, "KV_"+cfg.Bucket); err == nil {
		c := s.CachedInfo().Config
		if !c.AllowDirect && c.Description == cfg.Description && c.MaxMsgsPerSubject == int64(cfg.History) &&
			c.Storage == cfg.Storage && c.Replicas == cfg.Replicas {
			kv, err := b.JS.KeyValue(ctx, cfg.Bucket)
			if err != nil {
				return nil, fmt.Errorf("bus: kv %s: %w", cfg.Bucket, err)
			}
			return kv, nil
		}
	}
	if _, err := b.JS.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
		return nil, fmt.Errorf("bus: kv %s: %w", cfg.Bucket, err)
	}
	return b.leaderReads(ctx, cfg.Bucket)
}

// leaderReads turns direct gets off for the KV bucket (they are on for
// every bucket the client creates) and returns a handle on it that reads
// through the stream's leader. A direct get is answered by any replica,
// which may not have applied the last write yet: a record just written
// (a run the driver started, a lease renewed, a heartbeat) could read as
// missing or old. A process that (re)creates the bucket turns direct
// gets on again for a moment; the handles that read through the leader
// are right either way.
func (b *Bus) leaderReads(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	s, err := b.JS.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("bus: kv %s: %w", bucket, err)
	}
	if cfg := s.CachedInfo().Config; cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := b.JS.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("bus: kv %s: turn direct gets off: %w", bucket, err)
		}
	}
	kv, err := b.JS.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bus: kv %s: %w", bucket, err)
	}
	return kv, nil
}

// Close flushes pending publishes (5 s at most) and closes the connection
// if Connect opened it.
func (b *Bus) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Flush(ctx); err != nil {
		b.log.Warn("flush on close", "err", err)
	}
	if b.owned {
		b.NC.Close()
	}
}

// RequestTimeout bounds one request to the server (a run record read or
// write, a last-event lookup, an async publish's ack), whatever ctx's
// deadline: a request sent to a server that died (kill -9 of a node) has
// no answer, and a job's handler waiting on it would hold the job, kept
// alive by its heartbeats, for ever. The caller retries a timeout
// (Transient).
const RequestTimeout = 10 * time.Second

// withDefaultTimeout applies d only when ctx has no deadline (as nats.go's
// wrapContextWithoutDeadline does).
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// ErrNotFound is returned for a run id absent from the index.
var ErrNotFound = errors.New("bus: not found")

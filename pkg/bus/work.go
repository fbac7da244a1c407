package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishWork puts a job on the work queue and waits for the stream's ack.
// id is the Nats-Msg-Id: publishing the same job twice inside the
// duplicate window enqueues it once, which makes retrying a transient
// error (Retry) safe; the default deadline is 30 s.
func (b *Bus) PublishWork(ctx context.Context, subject, id string, job any) error {
	data, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("bus: encode job for %s: %w", subject, err)
	}
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, id)
	err = Retry(ctx, b.log, "publish job "+id, func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := b.JS.PublishMsg(pctx, msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("bus: publish job %s: %w", subject, err)
	}
	return nil
}

// MaxDeliver is how many times a work job is delivered at most. A launch
// job's last delivery does not run the cell: it errors it (a poison cell,
// whose every attempt killed its launcher; see launcher.Service).
const MaxDeliver = 5

// WorkConsumer creates (or updates) the durable pull consumer durable on
// the work queue, filtered to subject, with explicit acks. A job not acked
// within ackWait is redelivered (a crashed worker's job goes to another);
// workers extend long jobs with Msg.InProgress. maxAckPending bounds the
// jobs one consumer holds at once.
func (b *Bus) WorkConsumer(ctx context.Context, durable, subject string, ackWait time.Duration, maxAckPending int) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := Retry(ctx, b.log, "consumer "+durable, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		c, err = b.JS.CreateOrUpdateConsumer(ctx, WorkStream, jetstream.ConsumerConfig{
			Durable:       durable,
			FilterSubject: subject,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxAckPending: maxAckPending,
			MaxDeliver:    MaxDeliver,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", durable, subject, err)
	}
	return c, nil
}

// EventConsumer creates (or updates) a durable pull consumer on the event
// log for one filter subject, delivering from the start of the log; services
// use it for run-level triggers (RunRequested, RunPlanned).
func (b *Bus) EventConsumer(ctx context.Context, durable, filter string, ackWait time.Duration) (jetstream.Consumer, error) {
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := b.JS.CreateOrUpdateConsumer(ctx, EventsStream, jetstream.ConsumerConfig{
		Durable:       durable,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", durable, filter, err)
	}
	return c, nil
}

// Job is a received work message.
type Job = jetstream.Msg

// Attempt is the delivery count of a job (1 for the first delivery).
func Attempt(m jetstream.Msg) int {
	md, err := m.Metadata()
	if err != nil || md.NumDelivered < 1 {
		return 1
	}
	return int(md.NumDelivered)
}

// Serve pulls messages from cons and runs handle for each, at most
// concurrency at a time, until ctx ends; then it waits for running handlers
// and returns nil. While a handler runs, the message is kept alive with
// InProgress every heartbeat (0 = no heartbeats), so a long cell is not
// redelivered; a handler that crashes with the process stops heartbeating
// and its job is redelivered after the consumer's AckWait. The handler
// acks, naks or terms the message itself.
//
// A pull left without a server to answer it is replaced at once: when the
// consumer's leader moves (the old leader drops its pending pulls
// unanswered, the new one answers with 409 Leadership Change only those
// it heard of) and when the connection reconnects (a pull parked on the
// server that went away). Serve learns of a move from the 409 and from
// the consumer's leader-elected advisory, so a job published while the
// leader moves waits for the election, not for the client to miss two of
// the pull's 5 s heartbeats
// (docs/decisions/2026-12-03-repull-when-the-leader-moves.md).
func (b *Bus) Serve(ctx context.Context, cons jetstream.Consumer, concurrency int, heartbeat time.Duration, handle func(context.Context, jetstream.Msg)) error {
	concurrency = max(concurrency, 1)
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	w := b.watchPulls(cons)
	defer w.close()
	backoff := RetryFirst
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		pctx, done := w.pull(ctx)
		m, err := cons.Next(jetstream.FetchContext(pctx))
		orphaned := done()
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			if orphaned || errors.Is(err, jetstream.ErrConsumerLeadershipChanged) {
				// The pull's leader is gone: pull the new one now.
				continue
			}
			if Transient(err) {
				// A leader moving, a server restarting: wait and pull
				// again (docs/decisions/2026-12-01-transient-bus-errors.md); only a configuration error ends
				// the service.
				if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
					select {
					case <-ctx.Done():
						return nil
					case <-w.elected:
						// A leader again (no responders while there was
						// none): pull it now.
					case <-time.After(backoff):
					}
					backoff = min(2*backoff, RetryMax)
				}
				continue
			}
			return fmt.Errorf("bus: next job: %w", err)
		}
		backoff = RetryFirst
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			stop := make(chan struct{})
			if heartbeat > 0 {
				go func() {
					t := time.NewTicker(heartbeat)
					defer t.Stop()
					for {
						select {
						case <-t.C:
							_ = m.InProgress()
						case <-stop:
							return
						}
					}
				}()
			}
			handle(ctx, m)
			close(stop)
		}()
	}
}

// errOrphaned is the cause a pending pull is cancelled with when its
// consumer's leader moved or the connection reconnected.
var errOrphaned = errors.New("bus: pull orphaned")

// pullWatch cancels Serve's pending pull when it is orphaned: on the
// consumer's leader-elected advisory and on the connection reconnecting.
type pullWatch struct {
	nc     *nats.Conn
	sub    *nats.Subscription
	status chan nats.Status
	// elected holds a token once a leader was elected or the connection
	// came back since the last pull began: it cuts a backoff short.
	elected chan struct{}

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the pending pull's; nil between pulls
	// reconnects is the connection's reconnect count when the pending
	// pull began: a reconnect before it orphaned no pull of its own.
	reconnects uint64
}

// watchPulls subscribes to cons's leader-elected advisory (sent only by a
// replicated consumer's new leader) and to the connection's reconnects.
// A subscription refused (no permission) leaves the 409 and the pull's
// heartbeats to notice a move, as before.
func (b *Bus) watchPulls(cons jetstream.Consumer) *pullWatch {
	w := &pullWatch{nc: b.NC, status: b.NC.StatusChanged(nats.CONNECTED), elected: make(chan struct{}, 1)}
	if info := cons.CachedInfo(); info != nil {
		subj := "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED." + info.Stream + "." + info.Name
		if sub, err := b.NC.Subscribe(subj, func(*nats.Msg) { w.orphan() }); err == nil {
			w.sub = sub
		}
	}
	go func() {
		for range w.status {
			w.reconnected()
		}
	}()
	return w
}

// pull returns the context of the next pull, under ctx, and the function
// that ends it, reporting whether the pull was orphaned meanwhile.
func (w *pullWatch) pull(ctx context.Context) (context.Context, func() bool) {
	pctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	select {
	case <-w.elected:
	default:
	}
	w.cancel = cancel
	w.reconnects = w.nc.Stats().Reconnects
	w.mu.Unlock()
	return pctx, func() bool {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		orphaned := errors.Is(context.Cause(pctx), errOrphaned)
		cancel(nil)
		return orphaned
	}
}

// orphan cancels the pending pull, if any, and ends a backoff.
func (w *pullWatch) orphan() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel(errOrphaned)
	}
	select {
	case w.elected <- struct{}{}:
	default:
	}
}

// reconnected cancels the pending pull if it began before the
// connection's last reconnect, and ends a backoff.
func (w *pullWatch) reconnected() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil && w.reconnects < w.nc.Stats().Reconnects {
		w.cancel(errOrphaned)
	}
	select {
	case w.elected <- struct{}{}:
	default:
	}
}

func (w *pullWatch) close() {
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
	w.nc.RemoveStatusListener(w.status)
}

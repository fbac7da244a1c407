package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/proctor-eval/proctor/pkg/events"
)

// ErrStop, returned by a Follow callback, ends Follow without an error.
var ErrStop = errors.New("bus: stop")

// LastSeq is the stream sequence of the last event matching filter, or 0
// when there is none.
func (b *Bus) LastSeq(ctx context.Context, filter string) (uint64, error) {
	m, err := b.Events.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("bus: last event on %s: %w", filter, err)
	}
	return m.Sequence, nil
}

// ReadRun calls fn for every event of one run, in stream order from the
// start, and returns once it has delivered the last event stored when it
// was called. An fn error ends the read and is returned.
//
// It reads the stream's range from the run's RunRequested event to its
// last event without a subject filter and skips other runs' events by
// subject: on a file store, a wildcard-filtered consumer costs the server a
// scan of each block's subjects per message, several times the cost of the
// unfiltered read (a run's events are mostly contiguous). A run without a
// RunRequested event (an import of part of a log) is read with the filter.
func (b *Bus) ReadRun(ctx context.Context, runID string, fn func(events.Envelope) error) error {
	filter := events.RunFilter(runID)
	first, err := b.LastSeq(ctx, events.RunSubject(runID, events.RunRequested))
	if err != nil {
		return err
	}
	if first == 0 {
		return b.Read(ctx, []string{filter}, fn)
	}
	last, err := b.LastSeq(ctx, filter)
	if err != nil || last == 0 {
		return err
	}
	prefix := "proctor.run." + runID + "."
	dec := events.Decoder{Owned: true} // the client allocates each message's payload
	return b.scan(ctx, first, func(subject string, data []byte, seq uint64) error {
		if strings.HasPrefix(subject, prefix) {
			e, err := dec.Decode(data)
			if err != nil {
				return fmt.Errorf("bus: event at stream sequence %d: %w", seq, err)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if seq >= last {
			return ErrStop
		}
		return nil
	})
}

// scan delivers every message of the event stream from sequence first on,
// unfiltered, until fn returns ErrStop (nil) or another error.
func (b *Bus) scan(ctx context.Context, first uint64, fn func(subject string, data []byte, seq uint64) error) error {
	cons, err := b.JS.OrderedConsumer(ctx, EventsStream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   first,
	})
	if err != nil {
		return fmt.Errorf("bus: ordered consumer from %d: %w", first, err)
	}
	return consume(ctx, cons, fmt.Sprintf("from sequence %d", first), fn)
}

// consume is iterate with the consumer's Consume callback instead of its
// message iterator, and the stream sequence read from the reply subject
// without a full metadata parse: the bare read's own path (the iterator
// costs a channel hand-off per message). fn runs on the client's delivery
// goroutine, one message at a time; consume returns only once no fn call
// runs or will run. Used for bounded reads (ReadRun), whose fn is quick;
// Follow uses an iterator, whose slow callers must not stall the
// client's heartbeat handling.
func consume(ctx context.Context, cons jetstream.Consumer, what string, fn func(subject string, data []byte, seq uint64) error) error {
	var (
		mu      sync.Mutex
		stopped bool
		done    = make(chan error, 1)
	)
	finish := func(err error) {
		stopped = true
		done <- err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		seq, ok := streamSeq(m.Reply())
		if !ok {
			md, err := m.Metadata()
			if err != nil {
				finish(fmt.Errorf("bus: metadata: %w", err))
				return
			}
			seq = md.Sequence.Stream
		}
		if err := fn(m.Subject(), m.Data(), seq); err != nil {
			if errors.Is(err, ErrStop) {
				err = nil
			}
			finish(err)
		}
	}, jetstream.PullMaxMessages(2048))
	if err != nil {
		return fmt.Errorf("bus: read %s: %w", what, err)
	}
	defer cc.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			stopped = true
			return ctx.Err()
		}
		return <-done
	}
}

// streamSeq reads the stream sequence from a JetStream reply subject of
// the v1 form $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
// seq>.<time>.<pending> (9 tokens); ok is false for any other form (the
// caller then parses the full metadata).
func streamSeq(reply string) (seq uint64, ok bool) {
	if !strings.HasPrefix(reply, "$JS.ACK.") {
		return 0, false
	}
	tok, n := 0, 0
	start := 0
	var field string
	for i := 0; i <= len(reply); i++ {
		if i < len(reply) && reply[i] != '.' {
			continue
		}
		if tok == 5 {
			field = reply[start:i]
		}
		tok++
		n = tok
		start = i + 1
	}
	if n != 9 || field == "" {
		return 0, false
	}
	for i := 0; i < len(field); i++ {
		c := field[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		seq = seq*10 + uint64(c-'0')
	}
	return seq, true
}

// Read is ReadRun for any set of filter subjects on the event log.
func (b *Bus) Read(ctx context.Context, filters []string, fn func(events.Envelope) error) error {
	var last uint64
	for _, f := range filters {
		s, err := b.LastSeq(ctx, f)
		if err != nil {
			return err
		}
		last = max(last, s)
	}
	if last == 0 {
		return nil
	}
	return b.follow(ctx, filters, func(e events.Envelope, seq uint64) error {
		if err := fn(e); err != nil {
			return err
		}
		if seq >= last {
			return ErrStop
		}
		return nil
	})
}

// Follow calls fn for every event matching filters from the start of the
// log and keeps following new ones until ctx ends (returning ctx's error)
// or fn returns ErrStop (returning nil) or another error.
//
// A follow survives the server that holds its consumer dying (kill -9
// included): a consumer that stops sending idle heartbeats (FollowHeartbeat
// missed twice), is deleted, or skips a delivery is replaced by a new one
// that starts at the stream sequence after the last event delivered, so
// each event reaches fn once and in stream order. The first replacement
// after a consumer that delivered is logged at Info, a further one in a
// row at Warn.
func (b *Bus) Follow(ctx context.Context, filters []string, fn func(events.Envelope) error) error {
	return b.follow(ctx, filters, func(e events.Envelope, _ uint64) error { return fn(e) })
}

// FollowSeq is Follow with each event's stream sequence, which LastSeq
// compares with.
func (b *Bus) FollowSeq(ctx context.Context, filters []string, fn func(events.Envelope, uint64) error) error {
	return b.follow(ctx, filters, fn)
}

// FollowHeartbeat is the idle heartbeat a follow asks of its consumer;
// two missed in a row mean the consumer is gone (its server died or is cut
// off) and the follow re-creates it.
const FollowHeartbeat = 3 * time.Second

// followExpiry is how long one pull request of a follow lasts.
const followExpiry = 15 * time.Second

// errResume ends one consumer of a follow: the follow goes on with a new
// consumer from the event after the last one delivered.
type errResume struct{ err error }

func (e errResume) Error() string { return e.err.Error() }
func (e errResume) Unwrap() error { return e.err }

// follow is Follow with each event's stream sequence. It reads through
// ephemeral AckNone pull consumers of its own, not the client's ordered
// consumer: on a cluster, when the server holding an ordered consumer is
// killed, nats.go (v1.55) retries creating its replacement under one name
// for ever inside Next, deaf to ctx, and the replacement can be placed on
// the dead server again; the follow then stalls for good with no error.
// Here each replacement has a new name and its creation is bounded by
// RequestTimeout and retried with backoff (Retry).
func (b *Bus) follow(ctx context.Context, filters []string, fn func(events.Envelope, uint64) error) error {
	var last uint64 // stream sequence of the last event delivered to fn
	wait := RetryFirst
	for {
		before := last
		err := b.followOnce(ctx, filters, &last, fn)
		if last > before {
			wait = RetryFirst // a consumer that delivered was no failure in a row
		}
		var resume errResume
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &resume):
		case !Transient(err):
			return err
		}
		if b.log != nil {
			// A consumer lost once and replaced (a heartbeat missed on a
			// loaded machine) is no news to a user: Info. Failing again
			// before the replacement delivered anything is: Warn.
			level := slog.LevelInfo
			if wait > RetryFirst {
				level = slog.LevelWarn
			}
			b.log.Log(ctx, level, "event follow interrupted, resuming", "filters", filters, "after_seq", last, "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, RetryMax)
	}
}

// followOnce reads the events after stream sequence *last through one new
// consumer until fn stops it (nil), fn fails (its error), the consumer
// fails (errResume) or ctx ends. *last advances with every event fn took.
func (b *Bus) followOnce(ctx context.Context, filters []string, last *uint64, fn func(events.Envelope, uint64) error) error {
	cfg := jetstream.ConsumerConfig{
		Name:              "follow_" + nuid.Next(),
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	}
	if *last > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = *last + 1
	}
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
	cctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	cons, err := b.JS.CreateConsumer(cctx, EventsStream, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("bus: follow %v: create consumer: %w", filters, err)
	}
	defer func() {
		// Best effort: a consumer on a dead server goes by InactiveThreshold.
		go func() {
			dctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
			defer cancel()
			_ = b.JS.DeleteConsumer(dctx, EventsStream, cfg.Name)
		}()
	}()
	it, err := cons.Messages(jetstream.PullMaxMessages(2048), jetstream.PullExpiry(followExpiry),
		jetstream.PullHeartbeat(FollowHeartbeat))
	if err != nil {
		return errResume{fmt.Errorf("bus: follow %v: %w", filters, err)}
	}
	defer it.Stop()
	var delivered uint64 // the consumer's delivery sequence
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if b.NC.IsClosed() {
				return fmt.Errorf("bus: follow %v: %w", filters, err)
			}
			return errResume{fmt.Errorf("bus: follow %v: %w", filters, err)}
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("bus: metadata: %w", err)
		}
		if md.Sequence.Consumer != delivered+1 {
			// A delivery lost on the way (a reconnect): AckNone never
			// redelivers it, so start again after the last one taken.
			return errResume{fmt.Errorf("bus: follow %v: delivery %d after %d", filters, md.Sequence.Consumer, delivered)}
		}
		delivered = md.Sequence.Consumer
		seq := md.Sequence.Stream
		if seq <= *last {
			continue
		}
		e, err := events.Decode(m.Data())
		if err != nil {
			return fmt.Errorf("bus: event at stream sequence %d: %w", seq, err)
		}
		*last = seq
		if err := fn(e, seq); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
}

// LastEvent returns the last event stored on subject (no wildcards needed:
// one cell's CellPlanned, one run's RunRequested). ErrNotFound when there
// is none.
func (b *Bus) LastEvent(ctx context.Context, subject string) (events.Envelope, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	m, err := b.Events.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return events.Envelope{}, fmt.Errorf("%w: no event on %s", ErrNotFound, subject)
	}
	if err != nil {
		return events.Envelope{}, fmt.Errorf("bus: last event on %s: %w", subject, err)
	}
	return events.Decode(m.Data)
}

package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
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
	return b.scan(ctx, first, func(subject string, data []byte, seq uint64) error {
		if strings.HasPrefix(subject, prefix) {
			e, err := events.Decode(data)
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
// Follow keeps the iterator, whose slow callers must not stall the
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
func (b *Bus) Follow(ctx context.Context, filters []string, fn func(events.Envelope) error) error {
	return b.follow(ctx, filters, func(e events.Envelope, _ uint64) error { return fn(e) })
}

func (b *Bus) follow(ctx context.Context, filters []string, fn func(events.Envelope, uint64) error) error {
	cons, err := b.JS.OrderedConsumer(ctx, EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("bus: ordered consumer on %v: %w", filters, err)
	}
	return iterate(ctx, cons, fmt.Sprint(filters), func(_ string, data []byte, seq uint64) error {
		e, err := events.Decode(data)
		if err != nil {
			return fmt.Errorf("bus: event at stream sequence %d: %w", seq, err)
		}
		return fn(e, seq)
	})
}

// iterate delivers the consumer's messages to fn until ctx ends (its
// error), fn returns ErrStop (nil) or another error (returned).
func iterate(ctx context.Context, cons jetstream.Consumer, what string, fn func(subject string, data []byte, seq uint64) error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return fmt.Errorf("bus: read %s: %w", what, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("bus: read %s: %w", what, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("bus: metadata: %w", err)
		}
		if err := fn(m.Subject(), m.Data(), md.Sequence.Stream); err != nil {
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

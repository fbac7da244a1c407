package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Publish sends an event asynchronously with Nats-Msg-Id = e.ID on the
// subject events.Subject(e), the credentials of any proxy address in it
// redacted (egress.RedactCredentials: "user:pw@proxy:3128" with or
// without a scheme), so no event of the log holds one. When too many
// publishes are outstanding it waits (backpressure, never a lost event)
// until ctx ends. A publish that the server later rejects is retried by
// Flush; call Flush before acknowledging the work that produced the
// events.
func (b *Bus) Publish(ctx context.Context, e events.Envelope) error {
	data, err := events.Encode(e)
	if err != nil {
		return err
	}
	data = egress.RedactCredentialsBytes(data)
	return b.publishRaw(ctx, &nats.Msg{Subject: events.Subject(e), Data: data, Header: nats.Header{}}, e.ID)
}

// PublishNow publishes one event synchronously, as Publish does (its
// Nats-Msg-Id = e.ID, its credentials redacted), and returns once the
// stream acknowledged it: dup reports that the stream already held an
// event of that id, stored within DuplicateWindow, and dropped this one.
// It waits for no other publish (Flush does), and one try is bounded by
// RequestTimeout; a timeout is transient and may be retried (Retry), the
// same id dropping the copy of a try that was stored after all.
func (b *Bus) PublishNow(ctx context.Context, e events.Envelope) (dup bool, err error) {
	data, err := events.Encode(e)
	if err != nil {
		return false, err
	}
	msg := &nats.Msg{Subject: events.Subject(e), Data: egress.RedactCredentialsBytes(data), Header: nats.Header{}}
	msg.Header[nats.MsgIdHdr] = []string{e.ID}
	pctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	ack, err := b.JS.PublishMsg(pctx, msg)
	if err != nil {
		return false, fmt.Errorf("bus: publish %s: %w", msg.Subject, err)
	}
	return ack.Duplicate, nil
}

// PublishAll publishes events in order and then waits for every ack.
func (b *Bus) PublishAll(ctx context.Context, evs ...events.Envelope) error {
	for _, e := range evs {
		if err := b.Publish(ctx, e); err != nil {
			return err
		}
	}
	return b.Flush(ctx)
}

func (b *Bus) publishRaw(ctx context.Context, msg *nats.Msg, id string) error {
	msg.Header[nats.MsgIdHdr] = []string{id} // the canonical key: no Set
	for {
		// No options: with any, nats.go allocates them per message. A
		// full window waits up to its default 200 ms before ctx is seen.
		_, err := b.JS.PublishMsgAsync(msg)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return fmt.Errorf("bus: publish %s: %w", msg.Subject, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("bus: publish %s: %w", msg.Subject, ctx.Err())
		}
	}
}

type failedPub struct {
	msg *nats.Msg
	err error
}

// Flush waits until every outstanding publish is acknowledged, then
// republishes synchronously (same Nats-Msg-Id, so the stream drops a
// duplicate) any that failed, retrying transient errors with backoff
// (Retry: a stream leader moving, a node restarting) until ctx ends. It
// returns the first publish that failed for good, or ctx's error.
func (b *Bus) Flush(ctx context.Context) error {
	for {
		select {
		case <-b.JS.PublishAsyncComplete():
		case <-ctx.Done():
			return fmt.Errorf("bus: flush: %w", ctx.Err())
		}
		// nats.go runs the error handler before it closes the channel
		// PublishAsyncComplete returned, so every failure is recorded here.
		b.failMu.Lock()
		failed := b.failed
		b.failed = nil
		b.failMu.Unlock()
		if len(failed) == 0 {
			return nil
		}
		for _, fp := range failed {
			err := Retry(ctx, b.log, "publish "+fp.msg.Subject, func(ctx context.Context) error {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := b.JS.PublishMsg(pctx, fp.msg)
				return err
			})
			if err != nil {
				return fmt.Errorf("bus: publish %s failed (first error: %v): %w", fp.msg.Subject, fp.err, err)
			}
		}
	}
}

// onAsyncError records a publish the server did not acknowledge so Flush
// can publish it again.
func (b *Bus) onAsyncError(_ jetstream.JetStream, msg *nats.Msg, err error) {
	b.failMu.Lock()
	b.failed = append(b.failed, failedPub{msg: msg, err: err})
	b.failMu.Unlock()
}

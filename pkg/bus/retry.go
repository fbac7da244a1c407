package bus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Backoff bounds of Retry: the first wait and the longest.
const (
	RetryFirst = 250 * time.Millisecond
	RetryMax   = 10 * time.Second
)

// Transient reports whether err is a bus error that goes away by itself:
// no responders (a stream leader moving, a server restarting), a request
// that timed out (a stream recovering), a connection reconnecting, a
// server shutting down (a node restarting), a pull cut by its consumer's
// leader moving, an async publish whose ack never came, a placement that
// failed because a node of the cluster is offline. A configuration
// error (bad credentials, a permission violation, an invalid stream
// config) is not transient.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, nats.ErrNoServers),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrSlowConsumer),
		errors.Is(err, jetstream.ErrServerShutdown), errors.Is(err, jetstream.ErrConsumerLeadershipChanged),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 503: JetStream temporarily unavailable (no quorum, leader
		// election); 10008: "JetStream system temporarily unavailable";
		// 10005 "no suitable peers for placement" for a peer that is down:
		// "peer offline" (known to be down) or "miscellaneous issue" (not
		// heard from since the cluster restarted); once it returns the
		// stream or consumer can be placed. Other placement errors (more
		// replicas than servers, which gives no reason; tags; storage)
		// are configuration.
		return apiErr.Code == 503 || apiErr.ErrorCode == 10008 ||
			apiErr.ErrorCode == jsClusterNoPeers && peerDown(apiErr.Description)
	}
	return false
}

// peerDown reports whether a placement error's description gives a peer
// that is down as (one of) its reasons.
func peerDown(desc string) bool {
	return strings.Contains(desc, "peer offline") || strings.Contains(desc, "miscellaneous issue")
}

// jsClusterNoPeers is the JetStream error code of a placement that found
// no suitable peers (nats-server's JSClusterNoPeersErrF).
const jsClusterNoPeers = 10005

// Retry runs fn until it succeeds, returns a non-transient error (see
// Transient) or ctx ends, waiting RetryFirst, then twice as long each time
// up to RetryMax, between tries. Each transient failure is logged as a
// warning naming what. The error is fn's last, or ctx's.
func Retry(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	wait := RetryFirst
	for {
		err := fn(ctx)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if log != nil {
			log.Warn("transient bus error, retrying", "what", what, "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, RetryMax)
	}
}

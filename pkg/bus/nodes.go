package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// NodeBeatEvery is how often a verifier renews its node's heartbeat
// (NodeBeat) by default.
var NodeBeatEvery = 10 * time.Second

// NodeRecord is one node's heartbeat in KV PROCTOR_NODES (key = node
// name, as in the verify queue's subject verify.<node>).
type NodeRecord struct {
	Node string `json:"node"`
	// Process names the verifier that wrote it ("host pid N").
	Process string `json:"process"`
	// At is the writer's clock (RFC 3339), for people; liveness is
	// judged by a reader seeing the entry change (NodeEntry.Revision).
	At string `json:"at"`
}

// NodeEntry is a node's heartbeat entry as read from the bucket.
type NodeEntry struct {
	Record NodeRecord
	// Revision is the entry's revision, which every heartbeat changes: a
	// reader judges silence by how long, on its own monotonic clock, it
	// has seen the same revision, so no other machine's clock plays a
	// part.
	Revision uint64
	// Written is the server's time of the last heartbeat, for people
	// (another machine's clock).
	Written time.Time
}

// NodeBeat records that a verifier of node is alive now.
func (b *Bus) NodeBeat(ctx context.Context, node, process string) error {
	data, err := json.Marshal(NodeRecord{Node: node, Process: process, At: time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	if _, err := b.Nodes.Put(ctx, node, data); err != nil {
		return fmt.Errorf("bus: node heartbeat %s: %w", node, err)
	}
	return nil
}

// NodeSeen returns node's last heartbeat entry; ok is false when the
// node never wrote one.
func (b *Bus) NodeSeen(ctx context.Context, node string) (entry NodeEntry, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	e, err := b.Nodes.Get(ctx, node)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return NodeEntry{}, false, nil
	}
	if err != nil {
		return NodeEntry{}, false, fmt.Errorf("bus: node heartbeat %s: %w", node, err)
	}
	entry = NodeEntry{Revision: e.Revision(), Written: e.Created()}
	_ = json.Unmarshal(e.Value(), &entry.Record) // informative: liveness is the revision's
	return entry, true, nil
}

// Heartbeat renews node's heartbeat every interval (NodeBeatEvery when
// ≤ 0) until ctx ends; a failed write (a server restarting) is logged and
// tried again at the next beat. It returns when ctx ends.
func (b *Bus) Heartbeat(ctx context.Context, node string, every time.Duration, log *slog.Logger) {
	if every <= 0 {
		every = NodeBeatEvery
	}
	if log == nil {
		log = b.log
	}
	host, _ := os.Hostname()
	process := fmt.Sprintf("%s pid %d", host, os.Getpid())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := b.NodeBeat(ctx, node, process); err != nil && ctx.Err() == nil {
			log.Warn("node heartbeat", "node", node, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

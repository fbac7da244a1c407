package trees

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/bus"
)

// Bucket is the object store of trees and cell outputs (DESIGN §7).
const Bucket = "PROCTOR_TREES"

// Open returns the bucket, creating it with the replicas of the bus's
// streams (an existing bucket's replicas are never lowered).
func Open(ctx context.Context, b *bus.Bus) (jetstream.ObjectStore, error) {
	replicas := b.Replicas
	if replicas <= 0 {
		replicas = bus.DefaultReplicas(b.NC)
	}
	if s, err := b.JS.ObjectStore(ctx, Bucket); err == nil {
		if st, err := s.Status(ctx); err == nil && st.Replicas() >= replicas {
			return s, nil
		}
	}
	var s jetstream.ObjectStore
	err := bus.Retry(ctx, nil, "create bucket "+Bucket, func(ctx context.Context) error {
		var err error
		s, err = b.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      Bucket,
			Description: "proctor trees (task revisions, agent and skill directories) and cell outputs",
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("trees: bucket %s: %w", Bucket, err)
	}
	return s, nil
}

// Lookup returns the bucket when it exists; a missing bucket is
// jetstream.ErrObjectNotFound (nothing was stored), so a reader never
// creates it.
func Lookup(ctx context.Context, b *bus.Bus) (jetstream.ObjectStore, error) {
	s, err := b.JS.ObjectStore(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("trees: bucket %s: %w", Bucket, jetstream.ErrObjectNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("trees: bucket %s: %w", Bucket, err)
	}
	return s, nil
}

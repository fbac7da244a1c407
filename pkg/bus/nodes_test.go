package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
)

// TestNodeHeartbeat: a node never heard of is not seen; Heartbeat
// records the node, each renewal a new revision of its entry, and stops
// renewing when its ctx ends.
func TestNodeHeartbeat(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ok, err := b.NodeSeen(ctx, "n1"); err != nil || ok {
		t.Fatalf("unknown node: seen %v, err %v", ok, err)
	}
	before := time.Now()
	hctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.Heartbeat(hctx, "n1", 50*time.Millisecond, nil) }()
	var first bus.NodeEntry
	for {
		seen, ok, err := b.NodeSeen(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if ok && first.Revision == 0 {
			first = seen
			if seen.Written.Before(before.Add(-time.Second)) || seen.Record.Node != "n1" || seen.Record.Process == "" || seen.Revision == 0 {
				t.Fatalf("first heartbeat %+v (started %v)", seen, before)
			}
		}
		if ok && seen.Revision != first.Revision {
			break // renewed
		}
		select {
		case <-ctx.Done():
			t.Fatal("heartbeat not renewed")
		case <-time.After(20 * time.Millisecond): // polling the bucket
		}
	}
	stop()
	<-done
	last, _, err := b.NodeSeen(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	// Ten intervals later the stopped heartbeat was not renewed.
	time.Sleep(500 * time.Millisecond) // the silence itself is what is tested
	if now, _, err := b.NodeSeen(ctx, "n1"); err != nil || now.Revision != last.Revision {
		t.Errorf("heartbeat renewed after its ctx ended: %v then %v (%v)", last, now, err)
	}
}

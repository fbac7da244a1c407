package bus_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// syncBuffer is a bytes.Buffer a logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFollowLogsALoneResumeQuietly: a follow whose consumer is lost once
// and replaced goes on with the next event and says so at Info, which a
// user's default Warn level leaves out; a consumer lost again before its
// replacement delivered anything is a warning.
func TestFollowLogsALoneResumeQuietly(t *testing.T) {
	t.Parallel()
	pub, e := bustest.Bus(t)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := bus.Connect(ctx, e.ClientURL(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	run := events.NewID()
	got := make(chan events.Envelope, 16)
	go func() {
		_ = b.Follow(ctx, []string{"proctor.run." + run + ".>"}, func(ev events.Envelope) error { got <- ev; return nil })
	}()
	publishOne := func(i int) {
		t.Helper()
		ev := events.Must(events.Usage, run, "t/oracle/default/1", 1, "test", events.UsageData{PromptTokens: events.Count(int64(i))})
		if err := pub.PublishAll(ctx, ev); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if g.ID != ev.ID {
				t.Fatalf("the follow took %s, want %s", g.ID, ev.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the follow never took event %d; log:\n%s", i, logs.String())
		}
	}
	// deleteFollower deletes the follow's consumer other than gone, once
	// it exists, and returns its name.
	deleteFollower := func(gone string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			st, err := pub.JS.Stream(ctx, bus.EventsStream)
			if err != nil {
				t.Fatal(err)
			}
			names := st.ConsumerNames(ctx)
			for n := range names.Name() {
				if strings.HasPrefix(n, "follow_") && n != gone {
					if err := pub.JS.DeleteConsumer(ctx, bus.EventsStream, n); err != nil {
						t.Fatal(err)
					}
					return n
				}
			}
			time.Sleep(20 * time.Millisecond) // polling for the consumer
		}
		t.Fatalf("no follow consumer; log:\n%s", logs.String())
		return ""
	}
	publishOne(1)
	deleteFollower("")
	publishOne(2)
	if l := logs.String(); !strings.Contains(l, `level=INFO msg="event follow interrupted, resuming"`) || strings.Contains(l, "level=WARN") {
		t.Fatalf("one lost consumer, replaced and delivering: log:\n%s", l)
	}

	first := deleteFollower("")
	deleteFollower(first)
	publishOne(3)
	if l := logs.String(); !strings.Contains(l, `level=WARN msg="event follow interrupted, resuming"`) {
		t.Fatalf("a consumer lost twice in a row is not a warning: log:\n%s", l)
	}
}

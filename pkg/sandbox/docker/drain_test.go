package docker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// heldWriter holds its first Write until release is closed (proctor's own
// reader behind, a slow bus), then keeps everything written.
type heldWriter struct {
	release <-chan struct{}
	mu      sync.Mutex
	b       strings.Builder
}

func (w *heldWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestDrainWaitsForASlowReader: a command prints 64,000 numbered lines and
// exits while the caller's writer holds its first write for several
// times the drain's bound. Every line is delivered: time proctor's reader
// is behind does not count against DrainMax. It used to close the stream
// at DrainMax and lose the lines the engine still held (an agent's last
// events under a slow event log).
func TestDrainWaitsForASlowReader(t *testing.T) {
	t.Parallel()
	d, _ := newTestDocker(t, nil)
	d.drainMax = 300 * time.Millisecond
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage, Network: sandbox.NetworkNone, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(ctx, h) })
	release := make(chan struct{})
	w := &heldWriter{release: release}
	// The writer is held well past the drain's bound after the command
	// exited: its exit is what the engine reports while the output waits.
	hold := time.AfterFunc(20*d.drainMax, func() { close(release) })
	defer hold.Stop()
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "seq 1 64000; echo end"}, Stdout: w, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	lines := strings.Split(strings.TrimSpace(w.b.String()), "\n")
	if len(lines) != 64001 || lines[len(lines)-1] != "end" {
		t.Fatalf("delivered %d lines ending %q, want 64001 ending \"end\"", len(lines), lines[len(lines)-1])
	}
}

// laggingWriter keeps what is written, taking a while over each write: a
// reader that never catches up.
type laggingWriter struct {
	per time.Duration
	n   int
}

func (w *laggingWriter) Write(p []byte) (int, error) {
	time.Sleep(w.per) // the reader's own slowness under test, not a wait for an event
	w.n += len(p)
	return len(p), nil
}

// TestDrainBoundedWhenTheReaderNeverCatchesUp: a hostile command leaves a
// background process writing without end on the exec's output and exits;
// the reader is always behind it. Exec still returns once DrainBehindMax
// (shortened here) has passed since the drain began, with the output read
// until then: time spent behind is not counted against DrainMax, but it
// cannot hold a cell forever.
func TestDrainBoundedWhenTheReaderNeverCatchesUp(t *testing.T) {
	t.Parallel()
	d, _ := newTestDocker(t, nil)
	d.drainMax, d.drainBehindMax = 300*time.Millisecond, 3*time.Second
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage, Network: sandbox.NetworkNone, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(ctx, h) })
	w := &laggingWriter{per: 20 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "yes flood & exit 0"}, Stdout: w, Timeout: time.Minute})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Exec still drains a background writer the reader never catches up with")
	}
	if w.n == 0 {
		t.Error("nothing of the output was delivered")
	}
}

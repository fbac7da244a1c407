package cli

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestStoreLockBusyAMomentAfterItsHolder: a lock whose holder has let go
// while another descriptor of the same open file lives on (a child
// process forked at that moment, until its exec closes it) is busy, and
// the holder's server is gone. A command reading the store takes the lock
// once it is free, rather than waiting for a server that will never
// answer and failing; a command that must own the store does too, within
// lockBusyGrace. Not parallel: it sets onLockBusy.
func TestStoreLockBusyAMomentAfterItsHolder(t *testing.T) {
	for _, owner := range []bool{false, true} {
		home := t.TempDir()
		l, err := lockStore(home)
		if err != nil {
			t.Fatal(err)
		}
		dup, err := syscall.Dup(int(l.f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		l.unlock()
		if _, err := lockStore(home); !errors.Is(err, errStoreBusy) {
			t.Fatalf("the lock is not busy while a descriptor of its file lives on (%v): the test shows nothing", err)
		}
		var once sync.Once
		onLockBusy = func() { once.Do(func() { _ = syscall.Close(dup) }) } // the forked child execs
		g := &globals{stdout: io.Discard, stderr: io.Discard, home: home}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		c, err := g.dial(ctx, owner)
		cancel()
		onLockBusy = nil
		if err != nil {
			t.Fatalf("owner %v: %v", owner, err)
		}
		if c.lock == nil || c.embedded == nil {
			t.Errorf("owner %v: the command did not take the store (lock %v, server %v)", owner, c.lock != nil, c.embedded != nil)
		}
		c.Close()
		t.Logf("owner %v: the store taken after %v", owner, time.Since(start))
	}
}

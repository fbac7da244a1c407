package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// storeLock is an exclusive flock(2) on $PROCTOR_HOME/proctor.lock, held by
// the one process that runs the embedded server on the store. The kernel
// drops it when that process dies, however it dies, so a lock is never
// stale; the file holds the holder's pid for the message of the next one.
type storeLock struct{ f *os.File }

// lockBusyGrace is how long a command that must own the store retries a
// busy lock before it names the holder. A lock its holder has just let go
// of can stay busy for a moment: flock(2) locks belong to the open file
// description, which a child process forked at that moment by any thread
// of the holder's process shares until its exec closes the descriptor.
const lockBusyGrace = 500 * time.Millisecond

// onLockBusy, when set (by a test), is called each time lockStore finds
// the lock busy.
var onLockBusy func()

// errStoreBusy is returned when another process holds the store.
var errStoreBusy = errors.New("store in use")

func lockPath(home string) string { return filepath.Join(home, "proctor.lock") }

// lockStore takes the lock of the store under home without waiting. When another process
// holds it, the error wraps errStoreBusy and names the holder's pid.
func lockStore(home string) (*storeLock, error) {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockPath(home), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		data, _ := os.ReadFile(lockPath(home))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if onLockBusy != nil {
				onLockBusy()
			}
			return nil, fmt.Errorf("%w: proctor pid %s holds the store under %s", errStoreBusy, holderPid(data), home)
		}
		return nil, fmt.Errorf("lock %s: %w", lockPath(home), err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &storeLock{f: f}, nil
}

func holderPid(data []byte) string {
	if s := strings.TrimSpace(string(data)); s != "" {
		return s
	}
	return "(unknown)"
}

// unlock releases the lock (closing the file drops the flock).
func (l *storeLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

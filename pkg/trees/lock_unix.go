//go:build unix

package trees

import (
	"errors"
	"os"
	"syscall"
)

// canEvict: flock(2) lets eviction skip the trees other holders hold.
const canEvict = true

// lockShared takes a shared flock(2) on f, waiting for an exclusive one
// (an eviction deciding) to be released.
func lockShared(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// tryLockExclusive takes an exclusive flock(2) on f unless someone holds
// a lock on it (false).
func tryLockExclusive(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case !errors.Is(err, syscall.EINTR):
			return false, err
		}
	}
}

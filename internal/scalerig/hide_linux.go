//go:build linux

package scalerig

import (
	"fmt"
	"os"
	"syscall"
)

// ownMountNamespace has the process attr starts begin in a mount
// namespace of its own (a copy of the rig's), where hidePaths may mount
// over the runs' inputs without changing what the rig and the other
// processes see. Starting it needs CAP_SYS_ADMIN; without, the start
// fails (EPERM).
func ownMountNamespace(attr *syscall.SysProcAttr) { attr.Cloneflags |= syscall.CLONE_NEWNS }

// hidePaths hides each of dirs from this process: it mounts an empty,
// read-only tmpfs over each, so that nothing under them exists on the
// process's view of the file system. It refuses (an error, nothing
// mounted) unless the process runs in a mount namespace other than its
// parent's (ownMountNamespace), and it first makes every mount of its
// namespace private, so none of its mounts propagates back to the
// parent's.
func hidePaths(dirs []string) error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("scalerig: hide %v: %w", dirs, err)
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return fmt.Errorf("scalerig: hide %v: %w", dirs, err)
	}
	if self == parent {
		return fmt.Errorf("scalerig: hide %v: the process shares its parent's mount namespace (%s); it must be started in one of its own", dirs, self)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("scalerig: hide %v: make the mounts private: %w", dirs, err)
	}
	for _, d := range dirs {
		if err := syscall.Mount("scale-hidden", d, "tmpfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=4k,mode=0555"); err != nil {
			return fmt.Errorf("scalerig: hide %s: mount an empty tmpfs over it: %w", d, err)
		}
	}
	return nil
}

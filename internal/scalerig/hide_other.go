//go:build !linux

package scalerig

import (
	"errors"
	"syscall"
)

// errNoMountNamespace: only Linux gives a process a mount namespace of
// its own.
var errNoMountNamespace = errors.New("scalerig: hiding paths needs a mount namespace (Linux)")

// ownMountNamespace does nothing here; hidePaths fails.
func ownMountNamespace(*syscall.SysProcAttr) {}

// hidePaths fails: there is no mount namespace to hide paths in.
func hidePaths([]string) error { return errNoMountNamespace }

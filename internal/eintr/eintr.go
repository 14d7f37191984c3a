// Package eintr restarts system calls interrupted by a signal.
//
// Go installs its signal handlers with SA_RESTART, yet some calls fail
// with EINTR all the same: those the kernel never restarts (nanosleep,
// poll, fallocate on some file systems, the locks' blocking calls), and
// every call on a file system whose operations can be interrupted (FUSE,
// NFS mounted intr). The runtime's own preemption signal (SIGURG) arrives
// often, so such a call must be made again, not reported as a failure.
// This is not a retry in the project's sense (see internal/backoff): the
// call is made again at once, as if it had not been interrupted.
package eintr

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Do calls f until it returns something other than EINTR, and returns
// that.
func Do(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Value calls f until its error is something other than EINTR, and
// returns its last results: the descriptor of an open, the count of a
// read.
func Value[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}

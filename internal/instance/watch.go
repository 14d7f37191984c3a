package instance

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// watchPoll bounds how long Watch waits in poll(2) before looking at its
// context again.
const watchPoll = 100 * time.Millisecond

// Watch checks the lock (see Check) whenever its file's links or
// attributes change (inotify: its removal is seen at once) and at least
// every interval (a directory renamed away changes nothing inotify
// reports on the file), until ctx is done. Each time the lock is taken
// again, retaken is called with the lock file's path. When the lock
// cannot be kept, the returned channel receives the *LostError and Watch
// ends; the caller must stop serving the transfer file. Watch also ends
// once the lock is closed. The channel is closed when Watch ends.
func (l *Lock) Watch(ctx context.Context, interval time.Duration, retaken func(path string)) <-chan error {
	out := make(chan error, 1)
	go func() {
		defer close(out)
		n := newNotifier()
		defer n.close()
		for ctx.Err() == nil {
			// Watch the file, then check: a removal before the watch
			// was added is seen by the check, one after by the watch.
			n.add(l.Path())
			again, err := l.Check()
			if errors.Is(err, errClosed) {
				return // released: nothing left to keep
			}
			if err != nil {
				out <- err
				return
			}
			if again {
				if retaken != nil {
					retaken(l.Path())
				}
				continue // watch the new file at once
			}
			n.wait(ctx, interval)
		}
	}()
	return out
}

// notifier is an inotify instance watching the lock file; fd -1 when
// inotify is not available, leaving the periodic check alone.
type notifier struct{ fd int }

func newNotifier() *notifier {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		fd = -1
	}
	return &notifier{fd: fd}
}

// add watches path's file for a change of its links (removal, rename) or
// its removal; watching the same file again is harmless.
func (n *notifier) add(path string) {
	if n.fd >= 0 {
		_, _ = unix.InotifyAddWatch(n.fd, path, unix.IN_ATTRIB|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_DONT_FOLLOW)
	}
}

// wait returns when an event arrives, interval has passed, or ctx is done.
func (n *notifier) wait(ctx context.Context, interval time.Duration) {
	deadline := time.Now().Add(interval)
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if n.fd < 0 {
			t := time.NewTimer(min(left, watchPoll))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		fds := []unix.PollFd{{Fd: int32(n.fd), Events: unix.POLLIN}}
		k, err := unix.Poll(fds, int(min(left, watchPoll).Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if k > 0 {
			n.drain()
			return
		}
	}
}

// drain reads the pending events; what they are does not matter, the
// check that follows looks at the path itself.
func (n *notifier) drain() {
	var buf [4096]byte
	for {
		if k, err := unix.Read(n.fd, buf[:]); k <= 0 || err != nil {
			return
		}
	}
}

func (n *notifier) close() {
	if n.fd >= 0 {
		unix.Close(n.fd)
	}
}

package instance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Watch checks the lock (see Check) whenever inotify reports a change of
// its file's links or attributes (its removal, or another file renamed
// over it) or the move or removal of a directory above it (the control
// directory renamed away), and every interval besides, for what inotify
// cannot see (a symbolic link on the path pointed elsewhere, a mount over
// the directory; every pidRetry while the PID is not written), until ctx
// is done or the lock is closed. Each time the
// lock is taken again, retaken is called with the lock file's path. When
// the lock cannot be kept, the returned channel receives the *LostError
// and Watch ends; the caller must stop serving the transfer file. The
// channel is closed when Watch ends.
func (l *Lock) Watch(ctx context.Context, interval time.Duration, retaken func(path string)) <-chan error {
	out := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-l.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer close(out)
		defer cancel()
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
			wait := interval
			if l.pidPending() {
				wait = min(wait, pidRetry)
			}
			n.wait(ctx, wait)
		}
	}()
	return out
}

// pidRetry is how often Watch checks a lock whose PID could not be
// written yet (a full control file system): Check writes it as soon as
// there is room, so that status and the job scripts can name the daemon.
const pidRetry = time.Second

// pidPending reports whether the lock is held without its PID written.
func (l *Lock) pidPending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f != nil && !l.pid
}

// notifier is an inotify instance watching the lock file, read through
// the runtime's poller, so that a watch waiting for an event or its
// interval costs no wake-up; f nil when inotify is not available, leaving
// the periodic check alone.
type notifier struct {
	fd int // the inotify descriptor, for adding watches (f.Fd would make it blocking)
	f  *os.File
}

func newNotifier() *notifier {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return &notifier{fd: -1}
	}
	return &notifier{fd: fd, f: os.NewFile(uintptr(fd), "inotify")}
}

// add watches path's file for a change of its links (removal, rename) or
// attributes, and each directory above it for its move or removal;
// watching the same file again is harmless.
func (n *notifier) add(path string) {
	if n.f == nil || path == "" {
		return
	}
	_, _ = unix.InotifyAddWatch(n.fd, path, unix.IN_ATTRIB|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_DONT_FOLLOW)
	abs, err := filepath.Abs(path)
	if err != nil {
		return
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		_, _ = unix.InotifyAddWatch(n.fd, dir, unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_ONLYDIR)
		if dir == filepath.Dir(dir) {
			return
		}
	}
}

// wait returns when events arrive (they are read; what they are does not
// matter, the check that follows looks at the path itself), interval has
// passed, or ctx is done.
func (n *notifier) wait(ctx context.Context, interval time.Duration) {
	if n.f == nil {
		t := time.NewTimer(interval)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return
	}
	_ = n.f.SetReadDeadline(time.Now().Add(interval))
	stop := context.AfterFunc(ctx, func() { _ = n.f.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [4096]byte // room for every event a removal or rename raises
	_, _ = n.f.Read(buf[:])
}

func (n *notifier) close() {
	if n.f != nil {
		_ = n.f.Close()
	}
}

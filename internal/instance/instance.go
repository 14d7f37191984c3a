// Package instance makes sure one daemon at most serves a transfer file.
//
// The lock is an exclusive flock(2) on a sidecar file beside the transfer
// file, never on the transfer file itself: the SCR library unlinks and
// recreates the transfer file, and a lock on a removed inode guards
// nothing. flock belongs to the open file description, so the kernel
// releases it when the holder dies, however it dies (SIGKILL, OOM, power
// to the process lost), and a restart can take it at once. The holder
// writes its PID into the sidecar for people and tools to read; the PID is
// information only, the lock is the truth.
package instance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// LockPath returns the sidecar lock file of transferFile: ".<base>.lock" in
// the same directory.
func LockPath(transferFile string) string {
	dir, base := filepath.Split(transferFile)
	return filepath.Join(dir, "."+base+".lock")
}

// HeldError is returned by Acquire when another process holds the lock.
type HeldError struct {
	PID  int    // the holder's PID as written in the lock file; 0 if unknown
	Path string // the lock file
}

func (e *HeldError) Error() string {
	pid := strconv.Itoa(e.PID)
	if e.PID <= 0 {
		pid = "unknown"
	}
	return fmt.Sprintf("already served by PID %s (lock %s)", pid, e.Path)
}

// Lock is a held instance lock. Close releases it; so does the process's
// death.
type Lock struct {
	f *os.File
}

// conflictWait bounds how long Acquire retries a lock it finds taken
// before calling it held: Holder takes a shared lock for a moment to probe,
// and a daemon starting at that moment must not be turned away.
const (
	conflictWait  = 250 * time.Millisecond
	conflictRetry = 10 * time.Millisecond
)

// Acquire takes the instance lock of transferFile without waiting for
// another holder, creating the lock file if needed, and writes the
// calling process's PID into it. If another process holds it, Acquire
// returns a *HeldError naming that process.
func Acquire(transferFile string) (*Lock, error) {
	path := LockPath(transferFile)
	deadline := time.Now().Add(conflictWait)
	for {
		f, err := openLockFile(path, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return nil, err
		}
		err = flock(f, unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			if time.Now().Before(deadline) {
				f.Close()
				time.Sleep(conflictRetry)
				continue
			}
			pid := readPID(f)
			f.Close()
			return nil, &HeldError{PID: pid, Path: path}
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// Someone may have removed or replaced the lock file between our
		// open and our flock: the lock we hold would then guard a file no
		// one else opens. Take the one the path names.
		if same, err := samePath(f, path); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		if err := writePID(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: writing the PID: %w", path, err)
		}
		return &Lock{f: f}, nil
	}
}

// Close releases the lock. The lock file stays: removing it would let a
// process that opened it just before lock a file no one else can find.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Path returns the lock file's path.
func (l *Lock) Path() string {
	if l == nil || l.f == nil {
		return ""
	}
	return l.f.Name()
}

// Holder tells whether a process holds the instance lock of transferFile,
// and its PID if so (0 when the lock file does not say). It probes with a
// shared lock taken and dropped at once, so it never keeps a daemon from
// starting. A missing lock file means no holder.
func Holder(transferFile string) (pid int, held bool, err error) {
	path := LockPath(transferFile)
	f, err := openLockFile(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	err = flock(f, unix.LOCK_SH|unix.LOCK_NB)
	switch {
	case err == nil:
		return 0, false, nil // Close drops the probe's lock
	case errors.Is(err, unix.EWOULDBLOCK):
		return readPID(f), true, nil
	default:
		return 0, false, fmt.Errorf("probe lock %s: %w", path, err)
	}
}

// openLockFile opens the lock file without following a symbolic link and
// refuses anything but a regular file.
func openLockFile(path string, flags int) (*os.File, error) {
	f, err := os.OpenFile(path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("lock %s: refusing a symbolic link", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// samePath tells whether path still names the file f has open.
func samePath(f *os.File, path string) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Lstat(path, &b); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

func writePID(f *os.File) error {
	b := strconv.AppendInt(nil, int64(os.Getpid()), 10)
	b = append(b, '\n')
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(b, 0)
	return err
}

// readPID returns the PID written in the lock file, or 0.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

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
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/backoff"
	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// LockPath returns the sidecar lock file of transferFile: ".<base>.lock" in
// the same directory.
func LockPath(transferFile string) string {
	dir, base := filepath.Split(transferFile)
	return filepath.Join(dir, "."+base+".lock")
}

// HeldError is returned by Acquire when another process holds the lock.
type HeldError struct {
	PID  int    // the holder's PID (from /proc/locks, else as written in the lock file); 0 if unknown
	Path string // the lock file
	// Foreign is set when the lock file belongs to another user, UID.
	Foreign bool
	UID     int
}

func (e *HeldError) Error() string {
	pid := strconv.Itoa(e.PID)
	if e.PID <= 0 {
		pid = "unknown"
	}
	if e.Foreign {
		return fmt.Sprintf("already served by PID %s of another user, uid %d (lock %s)", pid, e.UID, e.Path)
	}
	return fmt.Sprintf("already served by PID %s (lock %s)", pid, e.Path)
}

// ForeignError is returned when the lock file belongs to another user: in
// a sticky world-writable control directory (/dev/shm, /tmp) anyone may
// create a file at the lock's path, and only its owner (or root) may
// remove it, so the daemon refuses to take a lock another user controls.
// It wraps fs.ErrPermission: a restart cannot cure it.
type ForeignError struct {
	Path string
	UID  int // the lock file's owner
	Err  error
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("lock %s belongs to uid %d, not to this daemon's uid %d (%v): another user created it, "+
		"and in a sticky directory only that user or root can remove it; remove it, or use a control directory "+
		"other users cannot write", e.Path, e.UID, os.Geteuid(), e.Err)
}

func (e *ForeignError) Unwrap() error { return e.Err }

// LostError is reported by Check and Watch when the lock file was removed
// or replaced and the lock cannot be taken again: another process (another
// daemon, started meanwhile) holds it now, or the path cannot be used.
type LostError struct {
	Path string
	Err  error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("instance lock %s was removed or replaced and cannot be taken again: %v", e.Path, e.Err)
}

func (e *LostError) Unwrap() error { return e.Err }

// Lock is a held instance lock. Close releases it; so does the process's
// death. Its methods may be called from several goroutines.
type Lock struct {
	mu   sync.Mutex
	f    *os.File
	path string
	pid  bool // the PID is written in f

	closed chan struct{} // closed by Close, ending Watch
}

// conflictWait bounds how long Acquire retries a lock it finds taken
// before calling it held: Holder takes a shared lock for a moment to probe,
// and a daemon starting at that moment must not be turned away.
const conflictWait = 250 * time.Millisecond

// conflictBackoff is the wait between attempts on a lock found taken: a
// probe lasts microseconds, so a short constant wait, unjittered (the
// contenders are processes of one node, not thousands).
func conflictBackoff() backoff.Policy {
	return backoff.Policy{First: 10 * time.Millisecond}
}

// Acquire takes the instance lock of transferFile without waiting for
// another holder, creating the lock file if needed, and writes the
// calling process's PID into it when it can: the lock alone excludes, so a
// control file system without room for the PID (SCR's /dev/shm filled by
// the cache) does not keep the daemon from starting, and Check writes the
// PID later. If another process holds the lock, Acquire returns a
// *HeldError naming it; if the lock file is another user's, a
// *ForeignError.
func Acquire(transferFile string) (*Lock, error) {
	path := LockPath(transferFile)
	f, err := take(path, time.Now().Add(conflictWait), time.Sleep)
	if err != nil {
		return nil, err
	}
	return &Lock{f: f, path: path, pid: writePID(f) == nil, closed: make(chan struct{})}, nil
}

// take opens the lock file at path and locks it, retrying a lock found
// taken until deadline after the waits of conflictBackoff, slept by sleep.
func take(path string, deadline time.Time, sleep func(time.Duration)) (*os.File, error) {
	for busy := 0; ; {
		f, err := openLockFile(path, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return nil, explainOpen(path, err)
		}
		if err := checkOwner(f, path); err != nil {
			f.Close()
			return nil, err
		}
		err = flock(f, unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			if time.Now().Before(deadline) {
				f.Close()
				sleep(conflictBackoff().Wait(busy, 0))
				busy++
				continue
			}
			held := heldBy(f, path)
			f.Close()
			return nil, held
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
		return f, nil
	}
}

// explainOpen turns a failure to open the lock file into a precise error:
// a file of another user (which the kernel refuses to open for writing, or
// to create over in a sticky directory) is a *ForeignError.
func explainOpen(path string, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && int(st.Uid) != os.Geteuid() {
			return &ForeignError{Path: path, UID: int(st.Uid), Err: err}
		}
	}
	return err
}

// checkOwner refuses a lock file another user owns, saying whether a
// process holds it.
func checkOwner(f *os.File, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if int(st.Uid) == os.Geteuid() {
		return nil
	}
	if err := flock(f, unix.LOCK_SH|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return heldBy(f, path)
	}
	return &ForeignError{Path: path, UID: int(st.Uid), Err: fmt.Errorf("owned by another user: %w", fs.ErrPermission)}
}

// heldBy returns the *HeldError of the lock file f, taken by another
// process: its holder as the kernel lists it in /proc/locks (a PID written
// in the file may be a dead daemon's), else the PID in the file.
func heldBy(f *os.File, path string) *HeldError {
	e := &HeldError{PID: readPID(f), Path: path}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) == nil {
		e.UID, e.Foreign = int(st.Uid), int(st.Uid) != os.Geteuid()
		if b, err := os.ReadFile("/proc/locks"); err == nil {
			if pid := flockHolder(b, st.Dev, st.Ino); pid > 0 {
				e.PID = pid
			}
		}
	}
	return e
}

// flockHolder returns the PID holding a flock(2) on the file (dev, ino)
// according to locks, the contents of /proc/locks, or 0. A line reads
// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters ("->") are
// skipped.
func flockHolder(locks []byte, dev, ino uint64) int {
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	for line := range strings.SplitSeq(string(locks), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" || !strings.EqualFold(fields[5], id) {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// Check makes sure the lock still guards the path a second daemon would
// look at. A job script's "rm -rf $cntldir/*" removes the lock file (or
// the whole control directory) from under a running daemon, and a second
// daemon would then create and lock a new file there. When the path no
// longer names the locked file, Check takes the lock again at the path
// (creating the directory and file as needed) and reports retaken; when
// it cannot, another process holding it now, it returns a *LostError and
// the caller must stop serving the file. It also writes the PID if that
// could not be done before.
func (l *Lock) Check() (retaken bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return false, fmt.Errorf("lock %s: %w", l.path, errClosed)
	}
	if same, err := samePath(l.f, l.path); err == nil && same {
		if !l.pid {
			l.pid = writePID(l.f) == nil
		}
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return false, &LostError{Path: l.path, Err: err}
	}
	f, err := take(l.path, time.Now().Add(conflictWait), time.Sleep)
	if err != nil {
		return false, &LostError{Path: l.path, Err: err}
	}
	l.f.Close()
	l.f, l.pid = f, writePID(f) == nil
	return true, nil
}

// errClosed is the error of Check on a closed Lock.
var errClosed = errors.New("closed")

// Close releases the lock. The lock file stays: removing it would let a
// process that opened it just before lock a file no one else can find.
func (l *Lock) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	close(l.closed)
	return err
}

// Path returns the lock file's path.
func (l *Lock) Path() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ""
	}
	return l.path
}

// Holder tells whether a process holds the instance lock of transferFile,
// and its PID if so: the holder /proc/locks names, else the PID written in
// the lock file (0 when neither says; a written PID may be a dead
// daemon's, or be missing when there was no room for it). It probes with a
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
		return heldBy(f, path).PID, true, nil
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

// flock is flock(2), made again when interrupted.
func flock(f *os.File, how int) error {
	return eintr.Do(func() error { return unix.Flock(int(f.Fd()), how) })
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

// writePID writes the PID over the file's start, then cuts the file to
// it: a file that held a PID before has the block the new one needs, so
// this works on a full file system too.
func writePID(f *os.File) error {
	b := strconv.AppendInt(nil, int64(os.Getpid()), 10)
	b = append(b, '\n')
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(b)))
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

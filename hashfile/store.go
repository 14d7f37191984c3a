package hashfile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/backoff"
	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// ErrSymlink is returned by a guarded Store whose path is a symbolic link.
var ErrSymlink = errors.New("refusing a symbolic link")

// Locking selects the kind of file lock, matching how KVTree was built.
type Locking int

const (
	// Flock uses flock(2), KVTree's default.
	Flock Locking = iota
	// Fcntl uses whole-file fcntl(2) record locks (F_SETLKW), KVTree's
	// alternative build, which some parallel file systems require.
	Fcntl
)

// String returns "flock" or "fcntl".
func (l Locking) String() string {
	if l == Fcntl {
		return "fcntl"
	}
	return "flock"
}

// ParseLocking accepts "flock" or "fcntl".
func ParseLocking(s string) (Locking, error) {
	switch s {
	case "flock", "":
		return Flock, nil
	case "fcntl":
		return Fcntl, nil
	}
	return Flock, fmt.Errorf("unknown locking %q: want flock or fcntl", s)
}

// Store is a hash file shared with other processes (the SCR library, other
// tools). Every access takes the file lock the way KVTree does: readers a
// shared lock, updates an exclusive lock held across read, modify and the
// in-place rewrite. The file is never replaced by rename, since the lock
// lives on the open file.
//
// fcntl locks belong to the process, not the descriptor, so a Store also
// serialises its own callers; use one Store per file in a process.
//
// The Context methods never block for long on another process: they try
// the lock without waiting and back off between attempts, so that a
// cancelled context (a signal) is answered within LockRetryMax, and they
// report a long wait to the hook set with OnLockWait.
type Store struct {
	path    string
	locking Locking

	sem chan struct{} // one caller at a time; a channel so that waiting for it is cancellable

	// The tree of the image this Store last read or wrote, with that
	// image's CRC, kept while it is certain to be what the image decodes
	// to: an update of a file that still holds exactly that image (every
	// byte compared with the tree's) starts from it instead of decoding
	// the file again. buf holds the file as read, then the new image
	// encoded over it; no tree aliases it.
	tree *Tree
	crc  uint32
	buf  []byte
	// unseen: a Read or Update found the file holding a version someone
	// else wrote, and no caller has said it looked at it since (see
	// Changed and Seen).
	unseen atomic.Bool
	// rewrites counts the updates whose new image was written (see
	// Rewrites).
	rewrites atomic.Uint64

	guard  func(*unix.Stat_t) error
	onWait func(since time.Time)
	settle *settler    // nil: no settling (settle.go)
	mode   os.FileMode // of a file the Store creates, before the umask

	jrnl journal // makes a rewrite of several pages whole (see journal.go)
}

// fileSig identifies a version of the file: its inode and change time.
type fileSig struct {
	dev, ino uint64
	ctime    unix.Timespec
}

func sigOf(st *unix.Stat_t) fileSig {
	return fileSig{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}
}

// Lock waits: the first lockQuickTries retries come every lockQuick
// (except while settling), then the waits run from LockRetryMin, doubling
// up to LockRetryMax; a wait longer than LockWaitNotice is reported.
const (
	LockRetryMin   = time.Millisecond
	LockRetryMax   = 50 * time.Millisecond
	LockWaitNotice = time.Second
)

// The SCR library holds the lock for one update, a write and an fsync: a
// few milliseconds. Retrying after 1, 2 and 4 ms took the lock up to 4 ms
// after it was let go, and every flush begins with such a wait: the daemon
// is told of the library's write while the library still holds the lock.
// The first retries come every lockQuick instead, for about 5 ms (25
// lock calls at most; none while settling, see lock), and these short
// waits are slept in the kernel: Go's timers round a wait under a
// millisecond up to about one when the process has nothing else to do
// (1.1 ms for 200 µs, 0.25 ms asleep in nanosleep(2), on the development
// machine).
const (
	lockQuick      = 200 * time.Microsecond
	lockQuickTries = 25
)

// lockBackoff returns the wait before retry n (from 0) of a lock held by
// another process. It is not jittered: the lock's contenders are the
// processes of one node (the library, the daemon, scr-ctl), not thousands
// of nodes at once.
func lockBackoff(n int) time.Duration {
	p := backoff.Policy{Spins: lockQuickTries, Spin: lockQuick, First: LockRetryMin, Max: LockRetryMax, Factor: 2}
	return p.Wait(n, 0)
}

// sleepKernel sleeps for d in nanosleep(2), not on a Go timer (see
// lockQuick); interrupted, it sleeps what remains.
func sleepKernel(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_ = eintr.Do(func() error { return unix.Nanosleep(&ts, &ts) })
}

// NewStore returns a Store for the hash file at path.
func NewStore(path string, locking Locking) *Store {
	return &Store{path: path, locking: locking, sem: make(chan struct{}, 1), mode: 0o666,
		jrnl: journal{path: JournalPath(path)}}
}

// CreateMode sets the mode, before the umask, of the file when an Update
// creates it; KVTree's, and the default, is 0666.
func (s *Store) CreateMode(m os.FileMode) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	s.mode = m
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// Guard makes every later access refuse a file that is a symlink (O_NOFOLLOW)
// or whose fstat(2), taken on the opened descriptor so that it cannot be
// swapped after the check, fails check. A daemon uses it to refuse a
// transfer file that someone else could have written.
func (s *Store) Guard(check func(*unix.Stat_t) error) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	s.guard = check
}

// OnLockWait sets a hook called, from the waiting goroutine, when an access
// has waited LockWaitNotice for the file lock (with the time the wait
// began), and again with the zero time when that wait ends.
func (s *Store) OnLockWait(fn func(since time.Time)) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	s.onWait = fn
}

// acquire takes the Store for one caller, or fails when ctx is done.
func (s *Store) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", s.path, context.Cause(ctx))
	}
}

func (s *Store) release() { <-s.sem }

// open opens the file and applies the guard.
func (s *Store) open(flags int) (*os.File, error) {
	if s.guard != nil {
		flags |= unix.O_NOFOLLOW
	}
	f, err := os.OpenFile(s.path, flags|unix.O_CLOEXEC, s.mode)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %w", s.path, ErrSymlink)
		}
		return nil, err
	}
	s.opened(f)
	if s.guard != nil {
		var st unix.Stat_t
		err := unix.Fstat(int(f.Fd()), &st)
		if err == nil {
			err = s.guard(&st)
		}
		if err != nil {
			s.closeFile(f)
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
	}
	return f, nil
}

// Read returns the file's tree, read under a shared lock. A missing file is
// an error wrapping fs.ErrNotExist; an empty file is an empty tree. The tree
// is the caller's to modify.
func (s *Store) Read() (*Tree, error) { return s.ReadContext(context.Background()) }

// ReadContext is Read, giving up when ctx is done.
func (s *Store) ReadContext(ctx context.Context) (*Tree, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	if err := s.beginSettled(ctx); err != nil {
		return nil, err
	}
	f, err := s.open(os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx, f, false); err != nil {
		s.closeFile(f)
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	s.buf, err = readAll(f, s.buf)
	s.buf = Declared(s.buf)
	owner := fileOwner(f)
	s.closeFile(f) // releases the lock before decoding
	if err != nil {
		s.tree = nil
		return nil, fmt.Errorf("%s: read: %w", s.path, err)
	}
	if !s.cached() {
		s.unseen.Store(true)
		s.tree = nil // free before the new tree is made
		t, err := s.decode(nil, owner)
		if err != nil {
			return nil, err
		}
		s.keep(t)
	}
	return s.tree.Clone(), nil
}

// cached reports whether buf holds exactly the image of the kept tree.
func (s *Store) cached() bool {
	return s.tree != nil && matchImage(s.buf, s.tree, s.crc)
}

// keep makes t, nil for none, the tree of the image in buf.
func (s *Store) keep(t *Tree) {
	s.tree = t
	if len(s.buf) >= HeaderSize+crcSize {
		s.crc = binary.BigEndian.Uint32(s.buf[len(s.buf)-crcSize:])
	}
}

// Changed reports whether the file may hold a version that no caller of
// this Store has looked at: it does not hold exactly the image this Store
// last read or wrote (also when nothing was read or written yet, when the
// file is missing, and on any error), or a Read or Update since the last
// Seen found a version someone else wrote. A process watching the file
// uses it to skip the notifications of its own writes: an update of its
// own may read another writer's change and write it back with its own,
// after which the file holds the Store's image and yet a change to look
// at. It reads the file without taking the file lock, so a write under way
// elsewhere may make it report true.
func (s *Store) Changed() bool {
	s.sem <- struct{}{}
	defer s.release()
	return s.unseen.Load() || !s.unchanged()
}

// Seen records that the caller has looked at every version of the file
// this Store has read so far. A watcher calls it from within the Update
// in which it reads the tree: no other Read or Update of the Store runs
// then.
func (s *Store) Seen() { s.unseen.Store(false) }

// unchanged reports, for a caller holding the Store, whether the file
// holds exactly the image this Store last read or wrote.
func (s *Store) unchanged() bool {
	if s.tree == nil {
		return false
	}
	// Through the Store's own open and under its semaphore: closing any
	// descriptor of the file drops this process's fcntl locks, so no
	// update may be holding one now.
	f, err := s.open(os.O_RDONLY)
	if err != nil {
		return false
	}
	defer s.closeFile(f)
	// A file of another size holds another image (or one with a stale tail
	// behind it, see declared, for which false is the safe answer): no
	// need to read it. The library's update that starts a flush is such a
	// change, and reading it here, before the read that follows, cost a
	// fresh daemon a millisecond or two at 2000 entries (its buffer grown
	// here), and tens of milliseconds at 100,000 entries.
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size != int64(len(s.buf)) {
		return false
	}
	if s.buf, err = readAll(f, s.buf); err != nil {
		return false
	}
	s.buf = Declared(s.buf)
	return s.cached()
}

// Rewrites returns how many updates of this Store wrote their new image.
// Updates run one at a time, so a WriteError whose Rewrites is below it
// failed before a rewrite that succeeded.
func (s *Store) Rewrites() uint64 { return s.rewrites.Load() }

// Update applies fn to the file's tree under an exclusive lock and writes
// the result back in place (seek 0, write, ftruncate, fsync), creating the
// file if needed with a mode derived from the umask. If fn returns an error,
// or the file cannot be decoded, nothing is written. If fn leaves the image
// unchanged, nothing is written either, so watchers see no spurious change.
// Update returns the tree as it stands after the call and whether it wrote.
//
// The Store keeps the image it last read or wrote and the tree fn left:
// when the file still holds exactly that image (every byte compared), the
// next Update hands fn that tree instead of decoding the file again. So
// neither the tree fn receives, nor any part of it, may be kept by fn, and
// the tree Update returns may be read but not modified, and only until the
// Store's next call.
func (s *Store) Update(fn func(*Tree) error) (t *Tree, wrote bool, err error) {
	return s.UpdateContext(context.Background(), fn)
}

// UpdateContext is Update, giving up when ctx is done. With fcntl locking
// the lock is released before the fsync, to hold it as briefly as possible.
func (s *Store) UpdateContext(ctx context.Context, fn func(*Tree) error) (t *Tree, wrote bool, err error) {
	if err := s.acquire(ctx); err != nil {
		return nil, false, err
	}
	defer s.release()
	if err := s.beginSettled(ctx); err != nil {
		return nil, false, err
	}
	f, err := s.open(os.O_RDWR | os.O_CREATE)
	if err != nil {
		return nil, false, err
	}
	defer s.closeFile(f)
	if err := s.lock(ctx, f, true); err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.path, err)
	}
	s.buf, err = readAll(f, s.buf)
	s.buf = Declared(s.buf)
	if err != nil {
		s.tree = nil
		return nil, false, fmt.Errorf("%s: read: %w", s.path, err)
	}
	if s.cached() {
		t = s.tree
	} else {
		s.unseen.Store(true)
		s.tree = nil // free before the new tree is made
		if t, err = s.decode(f, fileOwner(f)); err != nil {
			return nil, false, err
		}
	}
	// fn may change t: it is kept again only once it matches the file.
	s.tree = nil
	if err := fn(t); err != nil {
		return nil, false, err
	}
	old := len(s.buf)
	img, from, exact := overwriteImage(s.buf, t)
	s.buf = img
	keep := t
	if !exact {
		keep = nil // the image does not decode to this very tree
	}
	if from == len(img) && len(img) == old {
		s.keep(keep)
		return t, false, nil
	}
	if err := s.writeImage(f, img, from, old); err != nil {
		return nil, false, &WriteError{Path: s.path, Err: err, Rewrites: s.rewrites.Load()}
	}
	s.rewrites.Add(1)
	s.remember(f)
	s.keep(keep)
	return t, true, nil
}

// decode decodes the image in s.buf. One that does not decode may be a
// rewrite cut short by its writer's death: when the journal holds the rest
// of that rewrite, the image it completes replaces s.buf and, given the
// file f opened for writing under the exclusive lock, is written in place
// (see repair). owner is the file's owner, whose journal is trusted.
func (s *Store) decode(f *os.File, owner uint32) (*Tree, error) {
	t, err := Decode(s.buf)
	if err == nil {
		return t, nil
	}
	img, from, jerr := s.jrnl.recover(s.buf, owner)
	if jerr != nil {
		if errors.Is(jerr, fs.ErrNotExist) || errors.Is(jerr, errJournalDone) {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
		return nil, fmt.Errorf("%s: %w (%v)", s.path, err, jerr)
	}
	if f != nil {
		if err := s.repair(f, img, from); err != nil {
			return nil, &WriteError{Path: s.path, Err: fmt.Errorf("completing the rewrite the journal records: %w", err), Rewrites: s.rewrites.Load()}
		}
	}
	s.buf = append(s.buf[:0], img...)
	return Decode(s.buf)
}

// repair writes img, the image a rewrite cut short leaves once completed
// from the journal, in place of the file's bytes from from (before it they
// are the same), makes it durable, and marks the journal's record applied.
// A kill during the repair leaves the record pending and the prefix
// untouched: the next reader completes it the same way.
func (s *Store) repair(f *os.File, img []byte, from int) error {
	if err := rewrite(f, img, from, len(s.buf), false); err != nil {
		return err
	}
	s.rewrites.Add(1)
	s.remember(f)
	if jf, err := s.jrnl.open(os.O_RDWR, fileOwner(f)); err == nil {
		s.jrnl.done(jf)
	}
	return nil
}

// fileOwner returns the uid owning the open file, or this process's.
func fileOwner(f *os.File) uint32 {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return uint32(os.Geteuid())
	}
	return st.Uid
}

// Declared returns the image a file's header declares, when the file is
// longer: what a rewrite leaves when its writer is killed between writing
// a shorter image and cutting the file to it (step 5 of the protocol,
// write then ftruncate, cannot be one step). The image itself is whole
// and is decoded (and its CRC checked) as any other; KVTree's reader also
// reads the size the header gives. The next rewrite cuts the stale tail
// off. Anything that does not declare a size within the file is returned
// as it is, for Decode to judge.
func Declared(b []byte) []byte {
	if len(b) < HeaderSize || binary.BigEndian.Uint32(b[0:]) != Magic {
		return b
	}
	if size := binary.BigEndian.Uint64(b[8:]); size >= HeaderSize && size < uint64(len(b)) {
		return b[:size]
	}
	return b
}

// WriteError is returned by Update when the new image could not be
// written. When the cause is a lack of room (ENOSPC, EDQUOT, EFBIG) the
// file still holds its old image, intact: the room is reserved before the
// first byte of the old image is overwritten.
type WriteError struct {
	Path string
	Err  error
	// Rewrites is the Store's Rewrites when the update failed: once the
	// Store's count has moved past it, an update has rewritten the file
	// since, and the failure no longer tells how the file stands.
	Rewrites uint64
}

func (e *WriteError) Error() string { return e.Path + ": rewrite: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// writeImage is rewrite, journaled when a kill could tear it (see
// journal.go): the record is made durable first, and marked applied once
// the rewrite is. A journal that cannot be written (no room, a file planted
// at its path) leaves the rewrite unjournaled, as it was before: the
// update itself must not fail for it. A failed rewrite leaves its record
// pending, as a torn one needs it.
func (s *Store) writeImage(f *os.File, img []byte, from, old int) error {
	var jf *os.File
	if needsJournal(from, len(img)) {
		jf, _ = s.jrnl.record(img, from, fileOwner(f))
	}
	err := rewrite(f, img, from, old, s.locking == Fcntl)
	if jf != nil {
		if err == nil {
			s.jrnl.done(jf)
		} else {
			jf.Close()
		}
	}
	return err
}

// rewrite replaces the file's image of old bytes (read under the lock just
// taken) with img in place, writing only from from, where the two first
// differ: a commit that changes one WRITTEN of a large file does not write
// and sync the part before it. The rest is written in one call, so that a
// process killed while writing a small image leaves either image whole.
//
// KVTree rewrites in place under its lock (the lock lives on the open
// file, so a rename would break it), and an in-place rewrite that runs out of room
// half-way leaves a torn file neither side can decode. So the room for a
// longer image is secured first, while the old image is still whole:
// RLIMIT_FSIZE is checked, then the blocks beyond the old end are
// allocated with fallocate(FALLOC_FL_KEEP_SIZE), which changes nothing a
// reader sees. Where fallocate is not supported, the growth is written
// beyond the old end first and cut off again if that fails. Overwriting
// the old bytes then needs no new space.
//
// With unlockFirst the file lock is released before the fsync: readers
// see the whole new image either way, and the lock is held only while the
// image changes.
func rewrite(f *os.File, img []byte, from, old int, unlockFirst bool) error {
	if len(img) > old {
		if err := reserve(f, img, old); err != nil {
			return err
		}
	}
	if from < len(img) {
		if _, err := f.WriteAt(img[from:], int64(from)); err != nil {
			return err
		}
	}
	if err := f.Truncate(int64(len(img))); err != nil {
		return err
	}
	if unlockFirst {
		if err := unlock(f); err != nil {
			return err
		}
	}
	return f.Sync()
}

// reserve secures the room for img beyond the old image's end.
func reserve(f *os.File, img []byte, old int) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &lim); err == nil && lim.Cur != unix.RLIM_INFINITY && uint64(len(img)) > lim.Cur {
		return fmt.Errorf("the new image of %d bytes exceeds the file size limit (RLIMIT_FSIZE %d): %w", len(img), lim.Cur, unix.EFBIG)
	}
	fd := int(f.Fd())
	err := eintr.Do(func() error {
		return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, int64(old), int64(len(img)-old))
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
		// No fallocate here: write the growth beyond the old end.
		if _, err := f.WriteAt(img[old:], int64(old)); err != nil {
			if terr := f.Truncate(int64(old)); terr != nil {
				return errors.Join(err, terr)
			}
			return err
		}
		return nil
	default:
		return fmt.Errorf("reserving %d bytes: %w", len(img)-old, err)
	}
}

// readAll reads the whole file from offset 0 into buf, grown to the size
// fstat reports so that a large transfer file is read in one call.
func readAll(f *os.File, buf []byte) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := buf[:0]
	if need := int(fi.Size()) + 1; cap(b) < need {
		b = make([]byte, 0, need+need/32) // room for the file to grow
	}
	for {
		n, err := f.ReadAt(b[len(b):cap(b)], int64(len(b)))
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// lock takes the file lock of f; it is released when f is closed. It
// tries without waiting first. If the lock is taken and ctx can be
// cancelled or a wait hook is set, it retries after the waits s.backoff
// gives, giving up when ctx is done; otherwise it waits in the kernel, as
// KVTree does.
func (s *Store) lock(ctx context.Context, f *os.File, exclusive bool) error {
	err := s.tryLockSettled(ctx, f, exclusive)
	if !errors.Is(err, errBusy) {
		return err
	}
	if ctx.Done() == nil && s.onWait == nil && s.settle == nil {
		return tryLock(f, s.locking, exclusive, true)
	}
	since := time.Now()
	notified := false
	defer func() {
		if notified {
			s.onWait(time.Time{})
		}
	}()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for n := 0; ; n++ {
		if d := s.backoff(n); d < time.Millisecond {
			if ctx.Err() == nil {
				sleepKernel(d)
			}
		} else {
			t.Reset(d)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the %s lock held by another process since %s: %w",
				s.locking, since.Format(time.RFC3339), context.Cause(ctx))
		}
		if err := s.waitSettled(ctx); err != nil {
			return err
		}
		err := s.tryLockSettled(ctx, f, exclusive)
		if !errors.Is(err, errBusy) {
			return err
		}
		if !notified && s.onWait != nil && time.Since(since) >= LockWaitNotice {
			notified = true
			s.onWait(since)
		}
	}
}

// tryLock takes the lock, waiting for it if wait is set; without wait a
// lock held elsewhere is errBusy.
func tryLock(f *os.File, locking Locking, exclusive, wait bool) error {
	fd := int(f.Fd())
	err := eintr.Do(func() error {
		if locking == Fcntl {
			lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
			if exclusive {
				lk.Type = unix.F_WRLCK
			}
			cmd := unix.F_SETLK
			if wait {
				cmd = unix.F_SETLKW
			}
			return unix.FcntlFlock(uintptr(fd), cmd, &lk)
		}
		how := unix.LOCK_SH
		if exclusive {
			how = unix.LOCK_EX
		}
		if !wait {
			how |= unix.LOCK_NB
		}
		return unix.Flock(fd, how)
	})
	switch {
	case err == nil:
		return nil
	case !wait && (errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)):
		return errBusy
	default:
		return fmt.Errorf("%s lock: %w", locking, err)
	}
}

// unlockAny releases the lock of either kind before the file is closed.
func unlockAny(f *os.File, locking Locking) error {
	if locking == Fcntl {
		return unlock(f)
	}
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}

// unlock releases an fcntl lock before the file is closed.
func unlock(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart}
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
}

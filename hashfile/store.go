package hashfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
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
type Store struct {
	path    string
	locking Locking

	mu    sync.Mutex
	rbuf  []byte // last file image read, reused (decoded trees do not alias it)
	wbuf  []byte // last image encoded, reused
	guard func(*unix.Stat_t) error
}

// NewStore returns a Store for the hash file at path.
func NewStore(path string, locking Locking) *Store {
	return &Store{path: path, locking: locking}
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// Guard makes every later access refuse a file that is a symlink (O_NOFOLLOW)
// or whose fstat(2), taken on the opened descriptor so that it cannot be
// swapped after the check, fails check. A daemon uses it to refuse a
// transfer file that someone else could have written.
func (s *Store) Guard(check func(*unix.Stat_t) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guard = check
}

// open opens the file and applies the guard.
func (s *Store) open(flags int) (*os.File, error) {
	if s.guard != nil {
		flags |= unix.O_NOFOLLOW
	}
	f, err := os.OpenFile(s.path, flags|unix.O_CLOEXEC, 0o666)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %w", s.path, ErrSymlink)
		}
		return nil, err
	}
	if s.guard != nil {
		var st unix.Stat_t
		err := unix.Fstat(int(f.Fd()), &st)
		if err == nil {
			err = s.guard(&st)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
	}
	return f, nil
}

// Read returns the file's tree, read under a shared lock. A missing file is
// an error wrapping fs.ErrNotExist; an empty file is an empty tree.
func (s *Store) Read() (*Tree, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.open(os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := lock(f, s.locking, false); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	s.rbuf, err = readAll(f, s.rbuf)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", s.path, err)
	}
	t, err := Decode(s.rbuf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	return t, nil
}

// Update applies fn to the file's tree under an exclusive lock and writes
// the result back in place (seek 0, write, ftruncate, fsync), creating the
// file if needed with a mode derived from the umask. If fn returns an error,
// or the file cannot be decoded, nothing is written. If fn leaves the image
// unchanged, nothing is written either, so watchers see no spurious change.
// Update returns the tree as it stands after the call and whether it wrote.
func (s *Store) Update(fn func(*Tree) error) (t *Tree, wrote bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.open(os.O_RDWR | os.O_CREATE)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if err := lock(f, s.locking, true); err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.path, err)
	}
	s.rbuf, err = readAll(f, s.rbuf)
	if err != nil {
		return nil, false, fmt.Errorf("%s: read: %w", s.path, err)
	}
	t, err = Decode(s.rbuf)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.path, err)
	}
	if err := fn(t); err != nil {
		return nil, false, err
	}
	s.wbuf = AppendEncode(s.wbuf[:0], t)
	if bytes.Equal(s.wbuf, s.rbuf) {
		return t, false, nil
	}
	if err := rewrite(f, s.wbuf, len(s.rbuf)); err != nil {
		return nil, false, &WriteError{Path: s.path, Err: err}
	}
	return t, true, nil
}

// WriteError is returned by Update when the new image could not be
// written. When the cause is a lack of room (ENOSPC, EDQUOT, EFBIG) the
// file still holds its old image, intact: the room is reserved before the
// first byte of the old image is overwritten.
type WriteError struct {
	Path string
	Err  error
}

func (e *WriteError) Error() string { return e.Path + ": rewrite: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// rewrite replaces the file's image of old bytes with img in place. KVTree
// rewrites in place under its lock (the lock lives on the open file, so a
// rename would break it), and an in-place rewrite that runs out of room
// half-way leaves a torn file neither side can decode. So the room for a
// longer image is secured first, while the old image is still whole:
// RLIMIT_FSIZE is checked, then the blocks beyond the old end are
// allocated with fallocate(FALLOC_FL_KEEP_SIZE), which changes nothing a
// reader sees. Where fallocate is not supported, the growth is written
// beyond the old end first and cut off again if that fails. Overwriting
// the old bytes then needs no new space.
func rewrite(f *os.File, img []byte, old int) error {
	if len(img) > old {
		if err := reserve(f, img, old); err != nil {
			return err
		}
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(img))); err != nil {
		return err
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
	for {
		err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, int64(old), int64(len(img)-old))
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
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
		b = make([]byte, 0, need)
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

// lock takes the file lock, waiting for it; the lock is released when f is
// closed.
func lock(f *os.File, locking Locking, exclusive bool) error {
	fd := int(f.Fd())
	for {
		var err error
		if locking == Fcntl {
			lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
			if exclusive {
				lk.Type = unix.F_WRLCK
			}
			err = unix.FcntlFlock(uintptr(fd), unix.F_SETLKW, &lk)
		} else {
			how := unix.LOCK_SH
			if exclusive {
				how = unix.LOCK_EX
			}
			err = unix.Flock(fd, how)
		}
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return fmt.Errorf("%s lock: %w", locking, err)
			}
			return nil
		}
	}
}

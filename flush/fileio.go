package flush

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// openFile is open(2), made again when interrupted.
func openFile(path string, flags int, mode uint32) (int, error) {
	return eintr.Value(func() (int, error) { return unix.Open(path, flags|unix.O_CLOEXEC, mode) })
}

// openSource opens a source read-only without following a final symbolic
// link and without blocking on a FIFO, avoiding atime updates where the
// caller may; with a root, path is resolved beneath it.
func openSource(path, root string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK
	open := func(flags int) (int, error) { return openFile(path, flags, 0) }
	if root != "" {
		rootFD, rel, err := openRoot(root, path)
		if err != nil {
			return -1, err
		}
		defer unix.Close(rootFD)
		open = func(flags int) (int, error) { return openBeneath(rootFD, rel, flags, 0) }
	}
	fd, err := open(flags | unix.O_NOATIME)
	if errors.Is(err, unix.EPERM) {
		fd, err = open(flags)
	}
	return fd, err
}

// openAt is openat(2), made again when interrupted.
func openAt(dirFD int, name string, flags int, mode uint32) (int, error) {
	return eintr.Value(func() (int, error) { return unix.Openat(dirFD, name, flags|unix.O_CLOEXEC, mode) })
}

// openDir opens the destination directory dir, creating it and any missing
// parents with mode 0777 less the umask. Without a root it returns the
// directories whose entries changed, to be fsynced before the first commit;
// with one, every component is created and opened beneath root, and the
// parents of new directories are fsynced at once. who names the file, for
// messages.
func openDir(dir, root, who string) (int, []string, error) {
	if root == "" {
		changed, err := mkdirAll(dir, who)
		if err != nil {
			return -1, nil, err
		}
		fd, err := openFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, nil, osErr(who, "cannot open directory "+dir, err)
		}
		return fd, changed, nil
	}
	rootFD, rel, err := openRoot(root, dir)
	if err != nil {
		return -1, nil, fmt.Errorf("%s: %w", who, err)
	}
	cur := rootFD
	if rel == "." {
		return cur, nil, nil
	}
	done := ""
	for _, comp := range strings.Split(rel, "/") {
		next := filepath.Join(done, comp)
		fd, err := openBeneath(rootFD, next, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if errors.Is(err, unix.ENOENT) {
			err = eintr.Do(func() error { return unix.Mkdirat(cur, comp, 0o777) })
			if err == nil {
				err = fsync(cur)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				fd, err = openBeneath(rootFD, next, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			}
		}
		if cur != rootFD {
			unix.Close(cur)
		}
		if err != nil {
			unix.Close(rootFD)
			return -1, nil, osErr(who, "cannot open directory "+filepath.Join(root, next), err)
		}
		cur, done = fd, next
	}
	unix.Close(rootFD)
	return cur, nil, nil
}

// preadFull reads len(b) bytes at off unless the file ends first; it returns
// the count read, which is short only at end of file.
func preadFull(fd int, b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := eintr.Value(func() (int, error) { return unix.Pread(fd, b[done:], off+int64(done)) })
		if err != nil {
			return done, err
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

// pwriteFull writes all of b at off.
func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := eintr.Value(func() (int, error) { return unix.Pwrite(fd, b, off) })
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b = b[n:]
		off += int64(n)
	}
	return nil
}

// fsync flushes fd's data and metadata to stable storage.
func fsync(fd int) error {
	return eintr.Do(func() error { return unix.Fsync(fd) })
}

// fsyncDir makes the entries of directory dir durable.
func fsyncDir(dir string) error {
	fd, err := openFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	err = fsync(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// ftruncate sets fd's size.
func ftruncate(fd int, size int64) error {
	return eintr.Do(func() error { return unix.Ftruncate(fd, size) })
}

// mkdirAll creates dir and any missing parents with mode 0777 less the
// umask. It returns the directories whose entries changed (the parent of
// each directory it created), which must be fsynced for the new directories
// to be durable. who names the file needing dir, for messages.
func mkdirAll(dir, who string) ([]string, error) {
	var st unix.Stat_t
	var missing []string
	p := dir
	for {
		err := unix.Stat(p, &st)
		if err == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return nil, fmt.Errorf("%s: cannot create directory %s: %s is %s, not a directory: %w", who, dir, p, fileKind(st.Mode), unix.ENOTDIR)
			}
			break
		}
		// ENOTDIR: some ancestor is not a directory; walking up finds it.
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			return nil, osErr(who, "cannot create directory "+dir+": cannot look up "+p, err)
		}
		missing = append(missing, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	var changed []string
	for i := len(missing) - 1; i >= 0; i-- {
		m := missing[i]
		err := eintr.Do(func() error { return unix.Mkdir(m, 0o777) })
		if errors.Is(err, unix.EEXIST) {
			if serr := unix.Stat(m, &st); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				continue // created concurrently by someone else
			}
		}
		if err != nil {
			return changed, osErr(who, "cannot create directory "+m, err)
		}
		changed = append(changed, filepath.Dir(m))
	}
	return changed, nil
}

// segmenter walks the data ranges of a file in offset order: explicit ranges
// when given, else SEEK_DATA/SEEK_HOLE, else (where those are unsupported)
// the whole file as one range.
type segmenter struct {
	fd       int
	explicit bool
	ranges   []Range // sorted, merged; used when explicit
	i        int
	whole    bool  // SEEK_DATA unsupported
	tailDone int64 // the tail up to here was returned (see tail)
	tailFrom int64 // where that tail starts
}

// next returns the first data range [start,end) at or after off, clipped to
// limit; ok is false when no data remains before limit. Calls must come with
// non-decreasing off.
func (s *segmenter) next(off, limit int64) (start, end int64, ok bool, err error) {
	if off >= limit {
		return 0, 0, false, nil
	}
	if s.explicit {
		for s.i < len(s.ranges) && s.ranges[s.i].Off+s.ranges[s.i].Len <= off {
			s.i++
		}
		if s.i == len(s.ranges) {
			return 0, 0, false, nil
		}
		r := s.ranges[s.i]
		start, end = max(off, r.Off), min(r.Off+r.Len, limit)
		return start, end, start < end, nil
	}
	if s.whole {
		return off, limit, true, nil
	}
	d, err := unix.Seek(s.fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		// Only a hole (or nothing) from off on, says the file system; but
		// some miss data there (tmpfs answers ENXIO for the last page of a
		// file whose size is near 2^63-1), so the tail is read, not trusted.
		return s.tail(off, limit)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
		s.whole = true
		return off, limit, true, nil
	case err != nil:
		return 0, 0, false, err
	}
	if d < off {
		d = off // an answer before the offset asked: read from the offset
	}
	if d >= limit {
		return s.tail(off, limit)
	}
	h, err := unix.Seek(s.fd, d, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, false, err
	}
	if h <= d {
		h = limit // no hole after data is impossible: read to the limit
	}
	end = min(h, limit)
	return d, end, d < end, nil
}

// tailWindow is how much of a file's end is read even where SEEK_DATA says
// it is a hole: the largest page (a PMD-sized huge page) a file system's
// seek may misjudge at the end of a file.
const tailWindow = 2 << 20

// tail returns the last tailWindow bytes before limit that lie at or after
// off, as data: what SEEK_DATA claimed to be hole there is read, and holes
// read as zeros, so nothing is lost if the claim was wrong. Once returned,
// the tail is not returned again (calls come with non-decreasing off).
func (s *segmenter) tail(off, limit int64) (start, end int64, ok bool, err error) {
	start = max(off, (limit-1)&^(tailWindow-1), s.tailDone)
	if start >= limit {
		return 0, 0, false, nil
	}
	s.tailDone, s.tailFrom = limit, start
	return start, limit, true, nil
}

// inTail tells whether off lies in a tail returned by tail.
func (s *segmenter) inTail(off int64) bool { return s.tailDone > 0 && off >= s.tailFrom }

// allZero tells whether b holds only zero bytes.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// processUmask returns the process's file mode creation mask, read from
// /proc/self/status (Linux 4.7 and later) without changing it; where that
// line is missing it is set and restored, at the start of a Copier, before
// any of its files is created.
func processUmask() uint32 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		if m, ok := parseUmask(string(b)); ok {
			return m
		}
	}
	m := unix.Umask(0o022)
	unix.Umask(m)
	return uint32(m)
}

// parseUmask returns the mask of the "Umask:" line of a /proc/PID/status.
func parseUmask(status string) (uint32, bool) {
	for line := range strings.Lines(status) {
		v, ok := strings.CutPrefix(line, "Umask:")
		if !ok {
			continue
		}
		m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
		return uint32(m) & 0o777, err == nil
	}
	return 0, false
}

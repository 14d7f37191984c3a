package flush

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// identityXattr is the extended attribute of a partial copy that records
// the identity of the source its bytes were read from. It travels with the
// bytes it describes: a partial copy that is replaced, removed or written by
// someone else takes (or loses) its record with it, and no other file, the
// transfer file included, has to be kept in step with it. Where the file
// system has no user extended attributes, no record is kept and a resume is
// refused (the copy starts again from 0), which costs time but never
// correctness.
const identityXattr = "user.scr-transferd.source"

// identity is what tells one version of a source from another: the file
// (device and inode, so a replacement by rename shows) and its size, data
// modification and status change times (so a rewrite in place shows; the
// status change time cannot be set back by a user the way the modification
// time can).
type identity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func identityOf(st *unix.Stat_t) identity {
	return identity{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// record is the form kept in identityXattr: a digest of String, short
// enough to fit in the inode of common file systems (no extra block).
func (id identity) record() string {
	sum := sha256.Sum256([]byte(id.String()))
	return hex.EncodeToString(sum[:16])
}

// String describes the identity, for messages.
func (id identity) String() string {
	return fmt.Sprintf("v1 dev=%d ino=%d size=%d mtime=%d.%09d ctime=%d.%09d",
		id.dev, id.ino, id.size, id.mtime.Sec, id.mtime.Nsec, id.ctime.Sec, id.ctime.Nsec)
}

// differs says how now differs from id, "" if it does not.
func (id identity) differs(now identity) string {
	switch {
	case now.dev != id.dev || now.ino != id.ino:
		return fmt.Sprintf("it is another file now (inode %d on device %#x, was inode %d on device %#x): replaced, e.g. by a rename",
			now.ino, now.dev, id.ino, id.dev)
	case now.size != id.size:
		return fmt.Sprintf("it now holds %d bytes, %d when the copy started", now.size, id.size)
	case now.mtime != id.mtime || now.ctime != id.ctime:
		return "it was modified (its modification or status change time moved)"
	}
	return ""
}

// recordIdentity stores id on the partial copy fd. A file system without
// user extended attributes (or refusing this one) keeps no record: the
// copy goes on, and a later resume will start again from 0.
func recordIdentity(fd int, id identity) {
	if err := retry(func() error { return unix.Fsetxattr(fd, identityXattr, []byte(id.record()), 0) }); err != nil {
		// Never leave an older record standing for these new bytes.
		_ = unix.Fremovexattr(fd, identityXattr)
	}
}

// dropIdentity removes the record before the partial copy is published:
// the published file carries nothing of the daemon's.
func dropIdentity(fd int) {
	_ = unix.Fremovexattr(fd, identityXattr)
}

// recordedIdentity returns the identity recorded on the partial copy fd,
// ok=false when there is none.
func recordedIdentity(fd int) (string, bool) {
	buf := make([]byte, 256)
	var n int
	err := retry(func() error {
		var err error
		n, err = unix.Fgetxattr(fd, identityXattr, buf)
		return err
	})
	if err != nil || n <= 0 || n >= len(buf) {
		return "", false
	}
	return string(buf[:n]), true
}

// lockPartial takes the exclusive lock of a partial copy without waiting,
// so that no two writers (two daemons, even on different transfer files)
// ever write one partial copy. A file system without flock support leaves
// the copy unlocked rather than failing it.
func lockPartial(fd int) error {
	err := retry(func() error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
	switch {
	case err == nil, errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOLCK):
		return nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return ErrPartialLocked
	}
	return err
}

// place is a path to look up afresh at every commit, beneath a root when
// set, converted once so that the lookups allocate nothing.
type place struct {
	path     string
	confined bool
	p        *byte // path, or the root when confined
	rel      *byte // path relative to the root, when confined
}

func newPlace(path, root string) (place, error) {
	pl := place{path: path, confined: root != ""}
	var err error
	if !pl.confined {
		pl.p, err = unix.BytePtrFromString(path)
		return pl, err
	}
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return pl, fmt.Errorf("%s is %w %s", path, errOutside, root)
	}
	if pl.p, err = unix.BytePtrFromString(root); err != nil {
		return pl, err
	}
	pl.rel, err = unix.BytePtrFromString(rel)
	return pl, err
}

// stat fills st with the status of the file the path leads to now, without
// following a final symbolic link; confined, the kernel resolves it beneath
// the root (openat2 RESOLVE_BENEATH), the root itself opened afresh.
func (pl *place) stat(st *unix.Stat_t) error {
	cwd := unix.AT_FDCWD
	if !pl.confined {
		return retry(func() error {
			_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(cwd), uintptr(unsafe.Pointer(pl.p)),
				uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
			return errnoErr(e)
		})
	}
	rootFD, err := rawOpenat(cwd, pl.p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(rootFD)
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	var fd int
	err = retry(func() error {
		r, _, e := unix.Syscall6(unix.SYS_OPENAT2, uintptr(rootFD), uintptr(unsafe.Pointer(pl.rel)),
			uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		if e == unix.EAGAIN {
			e = unix.EINTR
		}
		fd = int(r)
		return errnoErr(e)
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

func rawOpenat(dirFD int, p *byte, flags int) (int, error) {
	var fd int
	err := retry(func() error {
		r, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirFD), uintptr(unsafe.Pointer(p)), uintptr(flags), 0, 0, 0)
		fd = int(r)
		return errnoErr(e)
	})
	return fd, err
}

// errnoErr turns a raw system call's errno into an error, nil for 0.
func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// sameFile tells whether two stats describe one file.
func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

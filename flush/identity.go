package flush

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// identityXattr is the extended attribute of a partial copy that records
// who wrote it and the identity of the source its bytes were read from (a
// partialRecord). It travels with the
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

// partialRecord is what identityXattr holds on a partial copy: who wrote
// it, the copy that wrote it, the source its bytes were read from, and the
// partial copy's own state at its last commit.
//
//   - owner: a digest of Options.Owner (the transfer file served and the
//     host): a partial copy of another owner is never written, emptied,
//     resumed or removed;
//   - token: drawn afresh by each copy when it creates or resumes the
//     partial copy, and checked at every commit and before publishing:
//     another writer that took the file over (where locks cannot exclude
//     it) writes its own record, so the copy never claims bytes it did not
//     write;
//   - src: the source's identity (identity.record);
//   - ino, written, crc: the partial copy's inode, and the bytes made
//     durable at the last commit with their CRC32. A resume compares them
//     with the file it finds and with the CRC32 of its first written bytes
//     (which it reads anyway): a partial copy replaced (even with this
//     record copied along) or edited while no daemon ran is copied again
//     from 0. The content is compared rather than the status change time,
//     which the copy's own writes after its last commit move.
type partialRecord struct {
	owner, token, src string
	ino               uint64
	written           int64
	crc               uint32
}

// recordVersion starts every partialRecord's encoding.
const recordVersion = "v2"

// encode returns the record's form in identityXattr.
func (p partialRecord) encode() string {
	var b [recordMax]byte
	return string(p.appendTo(b[:0]))
}

// recordMax bounds the size of an encoded record.
const recordMax = 256

// appendTo appends the record's form in identityXattr to b, allocating
// nothing when b has room: it is written at every commit.
func (p partialRecord) appendTo(b []byte) []byte {
	b = append(b, recordVersion...)
	b = append(append(b, " o="...), p.owner...)
	b = append(append(b, " t="...), p.token...)
	b = append(append(b, " s="...), p.src...)
	b = strconv.AppendUint(append(b, " i="...), p.ino, 10)
	b = strconv.AppendInt(append(b, " w="...), p.written, 10)
	b = append(b, " c="...)
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, "0123456789abcdef"[p.crc>>uint(shift)&0xf])
	}
	return b
}

// errBadRecord reports a record that does not decode.
var errBadRecord = errors.New("malformed partial copy record")

// parseRecord decodes an encoded partialRecord.
func parseRecord(s string) (partialRecord, error) {
	var p partialRecord
	f := strings.Fields(s)
	if len(f) != 7 || f[0] != recordVersion {
		return p, fmt.Errorf("%w: %q", errBadRecord, s)
	}
	vals := make(map[string]string, 6)
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return p, fmt.Errorf("%w: field %q", errBadRecord, kv)
		}
		vals[k] = v
	}
	p.owner, p.token, p.src = vals["o"], vals["t"], vals["s"]
	ino, err1 := strconv.ParseUint(vals["i"], 10, 64)
	w, err2 := strconv.ParseInt(vals["w"], 10, 64)
	crc, err3 := strconv.ParseUint(vals["c"], 16, 32)
	if p.owner == "" || p.token == "" || p.src == "" || err1 != nil || err2 != nil || err3 != nil || w < 0 {
		return partialRecord{}, fmt.Errorf("%w: %q", errBadRecord, s)
	}
	p.ino, p.written, p.crc = ino, w, uint32(crc)
	return p, nil
}

// ownerDigest is the owner field of the records written for the owner
// named by Options.Owner.
func ownerDigest(owner string) string {
	sum := sha256.Sum256([]byte("owner\x00" + owner))
	return hex.EncodeToString(sum[:8])
}

// newToken returns a fresh random token for a copy.
func newToken() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; should it, a token from
		// the clock still tells one copy from another.
		return strconv.FormatInt(time.Now().UnixNano(), 16)
	}
	return hex.EncodeToString(b[:])
}

// writeRecord stores rec on the partial copy fd. It reports false when
// the file system keeps no user extended attributes (or refuses this
// one): the copy goes on without a record, and a later resume starts
// again from 0, which costs time but never correctness.
func writeRecord(fd int, rec partialRecord) bool {
	var b [recordMax]byte
	enc := rec.appendTo(b[:0])
	if err := eintr.Do(func() error { return fsetxattr(fd, enc) }); err != nil {
		// Never leave an older record standing for these new bytes.
		_ = unix.Fremovexattr(fd, identityXattr)
		return false
	}
	return true
}

// xattrName is identityXattr as the system calls take it.
var xattrName = [...]byte{'u', 's', 'e', 'r', '.', 's', 'c', 'r', '-', 't', 'r', 'a', 'n', 's', 'f', 'e', 'r', 'd', '.', 's', 'o', 'u', 'r', 'c', 'e', 0}

// fsetxattr sets identityXattr of fd to val, allocating nothing.
func fsetxattr(fd int, val []byte) error {
	_, _, e := unix.Syscall6(unix.SYS_FSETXATTR, uintptr(fd), uintptr(unsafe.Pointer(&xattrName[0])),
		uintptr(unsafe.Pointer(unsafe.SliceData(val))), uintptr(len(val)), 0, 0)
	return errnoErr(e)
}

// fgetxattr reads identityXattr of fd into buf, allocating nothing.
func fgetxattr(fd int, buf []byte) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_FGETXATTR, uintptr(fd), uintptr(unsafe.Pointer(&xattrName[0])),
		uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)), 0, 0)
	return int(n), errnoErr(e)
}

// hasRecord tells whether the partial copy fd carries exactly rec, reading
// it without allocating: it is checked at every commit.
func hasRecord(fd int, rec partialRecord) bool {
	var want, got [recordMax]byte
	enc := rec.appendTo(want[:0])
	var n int
	err := eintr.Do(func() error {
		var err error
		n, err = fgetxattr(fd, got[:])
		return err
	})
	return err == nil && string(got[:n]) == string(enc)
}

// dropIdentity removes the record before the partial copy is published:
// the published file carries nothing of the daemon's.
func dropIdentity(fd int) {
	_ = unix.Fremovexattr(fd, identityXattr)
}

// readRecord returns the record kept on the partial copy fd: ok=false
// when there is none, err when there is one that does not decode.
func readRecord(fd int) (rec partialRecord, ok bool, err error) {
	var buf [recordMax]byte
	var n int
	err = eintr.Do(func() error {
		var err error
		n, err = fgetxattr(fd, buf[:])
		return err
	})
	if err != nil || n <= 0 {
		return rec, false, nil
	}
	rec, err = parseRecord(string(buf[:n]))
	return rec, err == nil, err
}

// lockPartial takes the exclusive lock of a partial copy without waiting,
// so that no two writers (two daemons, even on different transfer files)
// ever write one partial copy. A file system without flock support leaves
// the copy unlocked rather than failing it.
func lockPartial(fd int) error {
	err := eintr.Do(func() error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
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
		return eintr.Do(func() error {
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
	err = eintr.Do(func() error {
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
	err := eintr.Do(func() error {
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

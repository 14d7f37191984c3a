package daemon

import (
	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// A copy published durably under its name whose completion could not be
// recorded (the transfer file could not be rewritten: a full control file
// system, RLIMIT_FSIZE) is not copied again: the daemon remembers it, and
// the next attempt records it without copying, once sure that neither the
// source nor DESTINATION changed since. Each retry used to copy the whole
// batch again (every attempt replacing the published files), while only
// the record was missing.

// stamp is what tells whether a file changed since it was looked at: the
// file (device, inode) and its size, modification and status change times.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// stampOf returns the stamp of the file path leads to, not following a
// final symbolic link.
func stampOf(path string) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return stamp{}, err
	}
	return stamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// unrecorded is a published copy whose completion is not recorded yet.
type unrecorded struct {
	dest     string
	size     int64
	crc      uint32
	warnings string
	src, dst stamp // the source and DESTINATION as they were once published
}

// noteUnrecorded returns what to remember of f's copy, published with
// crc, when its completion could not be recorded; nil when the source or
// DESTINATION cannot be looked at (the file is then copied again).
func noteUnrecorded(f transfer.File, crc uint32, warnings string) *unrecorded {
	src, err1 := stampOf(f.Src)
	dst, err2 := stampOf(f.Dest)
	if err1 != nil || err2 != nil || dst.size != f.Size {
		return nil
	}
	return &unrecorded{dest: f.Dest, size: f.Size, crc: crc, warnings: warnings, src: src, dst: dst}
}

// stillPublished tells whether u still stands for f: same DESTINATION and
// SIZE, and neither the source nor DESTINATION changed since.
func (u *unrecorded) stillPublished(f transfer.File) bool {
	if u == nil || u.dest != f.Dest || u.size != f.Size {
		return false
	}
	src, err1 := stampOf(f.Src)
	dst, err2 := stampOf(f.Dest)
	return err1 == nil && err2 == nil && src == u.src && dst == u.dst
}

// recordOnly completes j without copying when its copy was published
// before and only its record failed (j.reuse): the file is returned
// complete for its group's record. ok is false when the file must be
// copied.
func recordOnly(j *job) (res flush.Result, ok bool) {
	u := j.reuse
	if !u.stillPublished(j.file) {
		j.reuse = nil // copied again: nothing of the earlier copy is used
		return res, false
	}
	return flush.Result{Written: u.size, CRC: u.crc, Complete: true}, true
}

// notePublished remembers, from the result r of a file's copy, a copy
// published whose record failed, and forgets it once recorded.
func (d *daemon) notePublished(r result) {
	if r.err == nil || r.job.unrecorded == nil {
		delete(d.published, r.job.file.Src)
		return
	}
	d.published[r.job.file.Src] = r.job.unrecorded
}

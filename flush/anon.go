package flush

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// A fresh copy in a Batch is written to an unnamed file (open(2) with
// O_TMPFILE in the destination directory) and given its name once durable
// (linkat(2)): one change of the directory per file, where a named partial
// copy costs two (its creation and its rename) and both hold the
// directory's lock. With thousands of small files in one directory that
// lock is what limits the copy. An unnamed partial copy has nothing to
// resume, nothing another writer could open, and leaves nothing behind
// after a crash; a batch's small file is never resumed anyway. When
// DESTINATION exists already, linkat cannot replace it: the copy then takes
// its partial copy's name and is renamed over DESTINATION, as a named
// partial copy is. File systems without O_TMPFILE, and a process without
// /proc, get named partial copies: linkat of an unnamed file goes through
// /proc/self/fd wherever the kernel does not let the process link the
// descriptor itself (see linkTemp), and only the link can tell.

// errNoAnon reports that unnamed partial copies cannot be used here.
var errNoAnon = errors.New("no unnamed files in this directory")

// createAnon opens an unnamed file in directory dir for a partial copy,
// or returns errNoAnon when the file system or the process cannot make
// one and give it a name later; the Batch then remembers not to try dir
// again.
func (b *Batch) createAnon(dir int) (int, error) {
	b.mu.Lock()
	no, proc := b.named || b.noAnon[dir], b.proc
	b.mu.Unlock()
	if no {
		return -1, errNoAnon
	}
	fd, err := openAt(dir, ".", unix.O_RDWR|unix.O_TMPFILE, 0o666)
	// Whether /proc can name the file is asked once per Batch, not once
	// per file: should /proc go away meanwhile, linkAnon fails and the
	// copy is tried again.
	if err == nil && (proc || unix.Access(procFD(fd), unix.F_OK) == nil) {
		if !proc {
			b.mu.Lock()
			b.proc = true
			b.mu.Unlock()
		}
		return fd, nil
	}
	if err == nil {
		_ = unix.Close(fd) // no /proc: it could never be named
		err = errNoAnon
	}
	switch {
	case errors.Is(err, errNoAnon), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR),
		errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		b.mu.Lock()
		if b.noAnon == nil {
			b.noAnon = map[int]bool{}
		}
		b.noAnon[dir] = true
		b.mu.Unlock()
		return -1, errNoAnon
	}
	return -1, err
}

// procFD is the /proc path of descriptor fd, through which linkat names
// an unnamed file without CAP_DAC_READ_SEARCH.
func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// linkTemp links the unnamed partial copy at name in its directory. It
// links the descriptor itself (AT_EMPTY_PATH) where the kernel allows it,
// as it does a process with CAP_DAC_READ_SEARCH (the daemon run as root),
// else through its /proc/self/fd link, a path walk through procfs for
// every file. A Copier that was refused once links through /proc from then
// on.
func (r *run) linkTemp(name string) error {
	viaProc := func() error {
		return eintr.Do(func() error {
			return unix.Linkat(unix.AT_FDCWD, procFD(r.tmp), r.dir, name, unix.AT_SYMLINK_FOLLOW)
		})
	}
	if r.c.procLink.Load() {
		return viaProc()
	}
	err := eintr.Do(func() error { return unix.Linkat(r.tmp, "", r.dir, name, unix.AT_EMPTY_PATH) })
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) {
		return err
	}
	// Refused, or a real ENOENT (the directory removed), which the link
	// through /proc reports too.
	if err := viaProc(); err != nil {
		return err
	}
	r.c.procLink.Store(true)
	return nil
}

// linkAnon gives the durable unnamed partial copy its final name. When
// DESTINATION exists, the copy takes its partial copy's name and is renamed
// over it, so that DESTINATION is replaced in one step as by a named
// partial copy.
func (r *run) linkAnon() error {
	err := r.linkTemp(r.base)
	if err == nil {
		r.linked = true
		return nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return osErr(r.dstName(), "cannot link the copy into place", err)
	}
	if err := r.nameAnon(); err != nil {
		return err
	}
	// Replacing a file is not undone: the directory is checked again
	// right before.
	if err := r.checkDirPlace(); err != nil {
		return err
	}
	if err := eintr.Do(func() error { return unix.Renameat(r.dir, r.tmpName, r.dir, r.base) }); err != nil {
		return r.renameFailed(err)
	}
	return nil
}

// nameAnon links the unnamed partial copy at its partial copy's name. A
// partial copy already there that no writer holds locked is stale (a
// batch's file is copied from 0) and is removed first; one another writer
// holds is left alone and the copy fails, to be tried again.
func (r *run) nameAnon() error {
	link := func() error { return r.linkTemp(r.tmpName) }
	// Locked before it has a name, so that no other writer can take it
	// for a stale partial copy.
	if err := r.lockTemp(); err != nil {
		return err
	}
	err := link()
	if errors.Is(err, unix.EEXIST) {
		if err := r.removeStalePartial(); err != nil {
			return err
		}
		err = link()
	}
	if err != nil {
		return osErr(r.dstName(), "cannot name partial copy "+r.tmpPath, err)
	}
	r.anon = false
	return nil
}

// removeStalePartial removes the partial copy at tmpName, unless another
// writer holds it locked or its record names another owner: another
// owner's partial copy is never removed nor written, whatever its age.
func (r *run) removeStalePartial() error {
	fd, err := openAt(r.dir, r.tmpName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return osErr(r.dstName(), "cannot open partial copy "+r.tmpPath, err)
	}
	defer unix.Close(fd)
	if err := lockPartial(fd); err != nil {
		return r.lockedErr(fd, err)
	}
	var held, named unix.Stat_t
	if err := unix.Fstat(fd, &held); err != nil {
		return osErr(r.dstName(), "cannot stat partial copy "+r.tmpPath, err)
	}
	if held.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: partial copy %s: %w: it is %s", r.dstName(), r.tmpPath, ErrNotRegular, fileKind(held.Mode))
	}
	if err := partialOwnedBy(fd, r.c.owner); err != nil {
		return fmt.Errorf("%s: partial copy %s: %w", r.dstName(), r.tmpPath, err)
	}
	if err := unix.Fstatat(r.dir, r.tmpName, &named, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(&held, &named) {
		return fmt.Errorf("%s: %w: partial copy %s changed while it was being removed; will try again", r.dstName(), ErrPartialLocked, r.tmpPath)
	}
	if err := unix.Unlinkat(r.dir, r.tmpName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return osErr(r.dstName(), "cannot remove stale partial copy "+r.tmpPath, err)
	}
	return nil
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// errNoFloor: the file system has no unnamed files (O_TMPFILE), so
// there is no floor to measure the daemon's way.
var errNoFloor = errors.New("no O_TMPFILE on this file system")

// durableFloor copies the files at paths into the new directory dir with
// only the steps any tool must take that makes the daemon's promise (no
// name for a file before its bytes are durable, nothing reported before
// the names are): in one thread, each file into an unnamed file
// (O_TMPFILE) with one read and one write; then one syncfs for the data, each copy linked under its name, and one
// syncfs for the names. It has no check, no CRC, no transfer file, no
// confinement and no retry. Its time beside
// cp -r + sync tells how much of the daemon's cost for small files is the
// promise itself on this machine and how much the daemon's own work. (It
// is no floor for large files: the daemon starts the write-back of each
// of those on its own, and copies several at once.)
func durableFloor(paths []string, dir string) (time.Duration, error) {
	start := time.Now()
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, err
	}
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(d)
	var tmps []int
	defer func() {
		for _, fd := range tmps {
			_ = unix.Close(fd)
		}
	}()
	var buf []byte
	copyOne := func(p string) error {
		s, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		var st unix.Stat_t
		if err := unix.Fstat(s, &st); err != nil {
			return err
		}
		t, err := unix.Open(dir, unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o644)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return errNoFloor
		}
		if err != nil {
			return fmt.Errorf("unnamed file in %s: %w", dir, err)
		}
		tmps = append(tmps, t)
		if int64(cap(buf)) < st.Size {
			buf = make([]byte, st.Size)
		}
		b := buf[:st.Size]
		if n, err := unix.Pread(s, b, 0); err != nil || n != len(b) {
			return fmt.Errorf("reading %s: %d bytes, %v", p, n, err)
		}
		if n, err := unix.Pwrite(t, b, 0); err != nil || n != len(b) {
			return fmt.Errorf("writing a copy of %s: %d bytes, %v", p, n, err)
		}
		return nil
	}
	for _, p := range paths {
		if err := copyOne(p); err != nil {
			return 0, err
		}
	}
	if err := unix.Syncfs(d); err != nil {
		return 0, err
	}
	for i, t := range tmps {
		name := filepath.Base(paths[i])
		err := unix.Linkat(t, "", d, name, unix.AT_EMPTY_PATH)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) {
			err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(t), d, name, unix.AT_SYMLINK_FOLLOW)
		}
		if err != nil {
			return 0, fmt.Errorf("linking the copy of %s: %w", paths[i], err)
		}
	}
	if err := unix.Syncfs(d); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

package flush

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// openExistingDir opens directory dir, beneath root when set, without
// creating anything. A missing directory is (-1, nil).
func openExistingDir(dir, root string) (int, error) {
	var fd int
	var err error
	if root == "" {
		fd, err = openFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	} else {
		rootFD, rel, rerr := openRoot(root, dir)
		if rerr != nil {
			return -1, rerr
		}
		fd, err = openBeneath(rootFD, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(rootFD)
	}
	if errors.Is(err, unix.ENOENT) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("cannot open directory %s: %w", dir, err)
	}
	return fd, nil
}

// Partials returns the paths of the partial copies (IsPartialName) in
// directory dir, resolved beneath root when root is set. A missing
// directory holds none.
func Partials(dir, root string) ([]string, error) {
	fd, err := openExistingDir(dir, root)
	if err != nil || fd < 0 {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("cannot list directory %s: %w", dir, err)
	}
	var out []string
	for _, n := range names {
		if IsPartialName(n) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out, nil
}

// RemovePartial removes the partial copy at path (which must have a partial
// copy's name), resolved beneath root when root is set, unless another
// process holds its lock (an error wrapping ErrPartialLocked) or its
// record says it was written for another owner than owner (see
// Options.Owner; an error wrapping ErrPartialForeign): then it is left.
// One without a record (written before records were kept, or where the
// file system keeps no extended attributes) has no known owner and is
// removed when unlocked. It reports whether it removed a file; a
// missing one is no error.
func RemovePartial(path, root, owner string) (bool, error) {
	if !IsPartialName(path) {
		return false, fmt.Errorf("%s: %w: not a partial copy's name", path, ErrInvalidJob)
	}
	dirFD, err := openExistingDir(filepath.Dir(path), root)
	if err != nil || dirFD < 0 {
		return false, err
	}
	defer unix.Close(dirFD)
	base := filepath.Base(path)
	fd, err := openAt(dirFD, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, osErr("partial copy "+path, "cannot open", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, osErr("partial copy "+path, "cannot stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("partial copy %s: %w: it is %s; left alone", path, ErrNotRegular, fileKind(st.Mode))
	}
	if err := lockPartial(fd); err != nil {
		if errors.Is(err, ErrPartialLocked) {
			return false, fmt.Errorf("partial copy %s: %w; left alone", path, err)
		}
		return false, osErr("partial copy "+path, "cannot lock", err)
	}
	if err := partialOwnedBy(fd, ownerDigest(owner)); err != nil {
		return false, fmt.Errorf("partial copy %s: %w", path, err)
	}
	// Remove the name only while it still leads to the file locked here.
	var now unix.Stat_t
	if err := unix.Fstatat(dirFD, base, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(&now, &st) {
		return false, nil
	}
	if err := eintr.Do(func() error { return unix.Unlinkat(dirFD, base, 0) }); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, osErr("partial copy "+path, "cannot remove", err)
	}
	return true, nil
}

// partialOwnedBy returns an error wrapping ErrPartialForeign when the
// partial copy open at fd carries a record of another owner than the
// digest owner; one without a record, or whose record does not decode,
// has no owner to respect.
func partialOwnedBy(fd int, owner string) error {
	rec, ok, _ := readRecord(fd)
	if ok && rec.owner != owner {
		return fmt.Errorf("%w (record %s); left alone", ErrPartialForeign, rec.encode())
	}
	return nil
}

package flush

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Sentinel errors returned (wrapped, with the file and the numbers involved)
// by Copy. Operating-system failures are wrapped as well, so
// errors.Is(err, fs.ErrNotExist) or errors.Is(err, unix.ENOSPC) also work.
var (
	// ErrSizeMismatch: the source's size differs from SIZE in the transfer file.
	ErrSizeMismatch = errors.New("size differs from SIZE in the transfer file")
	// ErrSourceChanged: the source shrank, grew or was modified while it was copied.
	ErrSourceChanged = errors.New("changed during the copy")
	// ErrSourceReplaced: the source is not the file the copy started from
	// any more, though it may hold SIZE bytes: it was replaced (by a rename
	// or a new file at its path) or rewritten. It wraps ErrSourceChanged.
	// The partial copy is discarded; copying again from 0 is the remedy.
	ErrSourceReplaced = fmt.Errorf("%w: replaced or rewritten", ErrSourceChanged)
	// ErrDestinationMoved: DESTINATION, looked up afresh, no longer leads to
	// the file the copy wrote (its directory was renamed away, perhaps
	// recreated): nothing is recorded complete, the copy is made again.
	ErrDestinationMoved = errors.New("destination directory moved during the copy")
	// ErrPartialLocked: another process holds the lock of the partial copy,
	// so it is writing the same DESTINATION.
	ErrPartialLocked = errors.New("the partial copy is locked by another process writing the same DESTINATION")
	// ErrPartialForeign: the partial copy at DESTINATION's partial-copy name
	// was written for another transfer file or on another node (its
	// record says so): it is neither written, emptied, resumed nor
	// removed, and the copy is tried again later.
	ErrPartialForeign = errors.New("the partial copy belongs to the copy of another transfer file or node")
	// ErrPartialTaken: the partial copy's record no longer carries this
	// copy's token: another writer took the file over (where file locks
	// are node-local or missing), so its bytes are not this copy's and are
	// not claimed.
	ErrPartialTaken = fmt.Errorf("%w: another writer took the partial copy over", ErrDestinationChanged)
	// ErrNotRegular: the source (or the partial copy) is not a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrDestinationChanged: the partial copy was removed or replaced by
	// someone else while it was written.
	ErrDestinationChanged = errors.New("destination changed during the copy")
	// ErrVerifyMismatch: Options.VerifyAfter found that the written copy differs
	// from the data read from the source.
	ErrVerifyMismatch = errors.New("verification failed")
	// ErrInvalidJob: the Job itself is unusable (empty path, negative SIZE,
	// data range outside the file, destination equal to the source).
	ErrInvalidJob = errors.New("invalid copy request")
)

// osErr wraps an errno from operation op ("cannot open", ...) on the file
// named by side ("source /a/b") so that the message reads in plain words.
func osErr(side, op string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("%s: %s: it is a symbolic link, which is not followed (%w)", side, op, err)
	}
	return fmt.Errorf("%s: %s: %w", side, op, err)
}

// fileKind names the type of a file from its stat mode, for messages.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFREG:
		return "a regular file"
	}
	return "of an unknown type"
}

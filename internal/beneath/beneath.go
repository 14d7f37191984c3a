// Package beneath confines paths to a root directory: the one rule by which
// the daemon keeps sources beneath --allow-src and destinations beneath
// --allow-dest (package flush), and by which package cache keeps the
// companions of a checkpoint (the other members of a SIONlib set, the other
// volumes of a LIME partition set) beneath the same root.
//
// The rule, for a path and a root:
//
//   - Lexically first (Rel): both are cleaned (filepath.Clean), so a ".."
//     in the path removes the name before it as text, whatever that name is
//     on disk; the cleaned path must then be the root or lie beneath it.
//     A path outside is refused (ErrOutside) before anything is opened.
//   - Then by the kernel (Open): the rest of the path, relative to a
//     descriptor of the root, is resolved by openat2(2) with RESOLVE_BENEATH
//     and RESOLVE_NO_MAGICLINKS. A ".." met while resolving (in a link's
//     target) is resolved on disk and may not climb above the root; a
//     relative symbolic link in a directory component is followed while it
//     stays beneath the root; a symbolic link with an absolute target is
//     refused wherever it is, even one naming a place inside the root; so
//     is a /proc magic link; any resolution leading out of the root fails
//     with ErrOutside. A file system that is mounted beneath the root is
//     beneath it.
//   - A final symbolic link is never followed when a file is opened: Open
//     adds O_NOFOLLOW, and the open fails with unix.ELOOP, whether the link
//     leads inside the root or out of it. A directory opened as such
//     (O_DIRECTORY) is a component on the way to the files in it, so a
//     relative link to a directory beneath the root is followed as it would
//     be in the middle of a path.
//   - Where openat2 is refused (ENOSYS: a seccomp filter, or a kernel older
//     than 5.6) the open fails with ErrNoOpenat2; there is no weaker
//     fallback.
package beneath

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// ErrOutside reports a path that does not lie beneath its confining root,
// lexically (Rel, OpenRoot) or once the kernel resolved it (Open).
var ErrOutside = errors.New("outside the directory it is confined to")

// ErrNoOpenat2 explains an ENOSYS from openat2(2). The kernel has had the
// call since Linux 5.6; on a newer kernel ENOSYS comes from a seccomp
// filter, most often systemd's RestrictSUIDSGID=yes, whose filter cannot
// inspect openat2's mode and so refuses the whole call.
var ErrNoOpenat2 = errors.New("openat2(2), which confines files beneath --allow-src/--allow-dest, is not available: " +
	"likely a seccomp filter refuses it (systemd's RestrictSUIDSGID=yes does: remove it from the unit; " +
	"a container runtime's profile may too), or the kernel is older than 5.6")

// Rel returns path relative to root, both cleaned, and whether it lies
// beneath root (or is root, "."). It is the lexical half of the rule: it
// looks at no file.
func Rel(root, path string) (string, bool) {
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// OpenRoot opens the directory root and returns a descriptor of it and
// path relative to it, for Open. A path lexically outside root is refused
// with ErrOutside before root is opened.
func OpenRoot(root, path string) (int, string, error) {
	rel, ok := Rel(root, path)
	if !ok {
		return -1, "", fmt.Errorf("%s is %w %s", path, ErrOutside, root)
	}
	fd, err := eintr.Value(func() (int, error) {
		return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, "", fmt.Errorf("confining directory %s: %w", root, err)
	}
	return fd, rel, nil
}

// Open opens rel relative to the directory dirFD by the kernel half of the
// rule (see the package comment): O_NOFOLLOW is added unless flags ask for
// a directory, resolution leaving dirFD's tree fails with ErrOutside and a
// refused openat2 with ErrNoOpenat2; other errors are the system call's.
func Open(dirFD int, rel string, flags int, mode uint32) (int, error) {
	if flags&unix.O_DIRECTORY == 0 {
		flags |= unix.O_NOFOLLOW
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := eintr.Value(func() (int, error) { return unix.Openat2(dirFD, rel, &how) })
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN):
			// A rename or mount somewhere on the system raced the
			// resolution: openat2 asks to be called again.
			continue
		case errors.Is(err, unix.EXDEV):
			return -1, fmt.Errorf("%s leads %w (%w)", rel, ErrOutside, err)
		case errors.Is(err, unix.ENOSYS):
			return -1, fmt.Errorf("%w (%w)", ErrNoOpenat2, err)
		}
		return -1, err
	}
}

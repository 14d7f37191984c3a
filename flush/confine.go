package flush

import (
	"fmt"

	"github.com/scr-transferd/scr-transferd/internal/beneath"
	"golang.org/x/sys/unix"
)

// ErrNoOpenat2 explains an ENOSYS from openat2(2), which confines files
// beneath --allow-src/--allow-dest: see beneath.ErrNoOpenat2.
var ErrNoOpenat2 = beneath.ErrNoOpenat2

// errOutside reports a path that does not lie beneath its confining root.
var errOutside = beneath.ErrOutside

// openRoot opens the confining directory root and returns path relative to
// it, which must stay beneath it lexically (beneath.OpenRoot).
func openRoot(root, path string) (int, string, error) {
	return beneath.OpenRoot(root, path)
}

// openBeneath opens rel relative to dirFD by the one rule of package
// beneath: the kernel refuses any resolution (through "..", an absolute or a
// relative symbolic link) that leaves dirFD's tree, and a final symbolic
// link is not followed unless a directory is asked for.
func openBeneath(dirFD int, rel string, flags int, mode uint32) (int, error) {
	return beneath.Open(dirFD, rel, flags, mode)
}

// CheckConfinement opens dir beneath itself with openat2, as a confined
// copy opens every file, so that the daemon can say at start, rather than
// file by file, that confinement cannot work here (errors.Is(err,
// ErrNoOpenat2)). Other errors (dir missing, say) are returned as they are.
func CheckConfinement(dir string) error {
	fd, err := openFile(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("confining directory %s: %w", dir, err)
	}
	defer unix.Close(fd)
	sub, err := openBeneath(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("confining directory %s: %w", dir, err)
	}
	return unix.Close(sub)
}

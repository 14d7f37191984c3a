package flush

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrNoOpenat2 explains an ENOSYS from openat2(2). The kernel has had the
// call since Linux 5.6; on a newer kernel ENOSYS comes from a seccomp
// filter, most often systemd's RestrictSUIDSGID=yes, whose filter cannot
// inspect openat2's mode and so refuses the whole call.
var ErrNoOpenat2 = errors.New("openat2(2), which confines files beneath --allow-src/--allow-dest, is not available: " +
	"likely a seccomp filter refuses it (systemd's RestrictSUIDSGID=yes does: remove it from the unit; " +
	"a container runtime's profile may too), or the kernel is older than 5.6")

// explainOpenat2 names the likely cause when openat2 answered ENOSYS, and
// returns any other error unchanged.
func explainOpenat2(err error) error {
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%w (%w)", ErrNoOpenat2, err)
	}
	return err
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

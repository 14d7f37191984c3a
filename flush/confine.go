package flush

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// errNoOpenat2 explains an ENOSYS from openat2(2). The kernel has had the
// call since Linux 5.6; on a newer kernel ENOSYS comes from a seccomp
// filter, most often systemd's RestrictSUIDSGID=yes, whose filter cannot
// inspect openat2's mode and so refuses the whole call.
var errNoOpenat2 = errors.New("openat2(2), which confines files beneath --allow-src/--allow-dest, is not available: " +
	"likely a seccomp filter refuses it (systemd's RestrictSUIDSGID=yes does: remove it from the unit; " +
	"a container runtime's profile may too), or the kernel is older than 5.6")

// explainOpenat2 names the likely cause when openat2 answered ENOSYS, and
// returns any other error unchanged.
func explainOpenat2(err error) error {
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%w (%w)", errNoOpenat2, err)
	}
	return err
}

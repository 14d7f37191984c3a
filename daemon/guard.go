package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// refusal is a transfer file or control directory the daemon will not use.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

// IsRefusal reports whether err is the daemon refusing a control
// directory or transfer file it does not trust (another user's, or one
// others may write): a permanent error, which a restart cannot cure.
func IsRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

func refuse(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// The trust policy. The daemon runs as the job's user and trusts that
// user, root, and, unless --strict-modes is given, the group of the
// transfer file and control directory when they are group-writable: the
// SCR library (KVTree) creates both from the user's umask (0666 and 0777
// &^ umask), so under umask 002, RHEL's default with user-private groups,
// they are 0664 and 0775. Whoever can write the transfer file decides
// what the daemon copies where, so a file or directory that any other
// user may write (world-writable, the directory without the sticky bit) or
// that another user owns is refused; --insecure accepts them anyway.

// transferFileGuard returns the check of the transfer file's fstat(2),
// made on the opened descriptor: it refuses a file that another user owns
// or that other users may write, and, if strict, one that its group may
// write.
func transferFileGuard(strict bool) func(st *unix.Stat_t) error {
	return func(st *unix.Stat_t) error {
		uid := uint32(os.Geteuid())
		switch {
		case st.Uid != uid:
			return refuse("refusing a transfer file owned by uid %d (the daemon runs as uid %d); use --insecure to accept it", st.Uid, uid)
		case st.Mode&0o002 != 0:
			return refuse("refusing a transfer file that other users may write (mode %04o); chmod o-w it or use --insecure", st.Mode&0o7777)
		case strict && st.Mode&0o020 != 0:
			return refuse("refusing a transfer file that group %s may write (mode %04o) under --strict-modes; chmod g-w it", groupName(st.Gid), st.Mode&0o7777)
		}
		return nil
	}
}

// checkControlDir refuses a control directory that another user (root
// aside) owns, or that other users may write without the sticky bit: they
// could replace the transfer file. If strict, it refuses one that its group
// may write without the sticky bit too.
func checkControlDir(dir string, strict bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("control directory %s: %w", dir, err)
	}
	uid := uint32(os.Geteuid())
	sticky := st.Mode&unix.S_ISVTX != 0
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return refuse("control directory %s is not a directory (a symbolic link?)", dir)
	case st.Uid != uid && st.Uid != 0:
		return refuse("refusing control directory %s owned by uid %d (the daemon runs as uid %d); use --insecure to accept it", dir, st.Uid, uid)
	case st.Mode&0o002 != 0 && !sticky:
		return refuse("refusing control directory %s that other users may write (mode %04o); chmod o-w it or use --insecure", dir, st.Mode&0o7777)
	case strict && st.Mode&0o020 != 0 && !sticky:
		return refuse("refusing control directory %s that group %s may write (mode %04o) under --strict-modes; chmod g-w it", dir, groupName(st.Gid), st.Mode&0o7777)
	}
	return nil
}

// groupWritable returns a description of the group that may write the
// transfer file or its directory (not sticky), or "" when none may. The
// daemon logs it at start: that group's members can direct the daemon.
func groupWritable(file, dir string) string {
	var parts []string
	var st unix.Stat_t
	if unix.Lstat(dir, &st) == nil && st.Mode&0o020 != 0 && st.Mode&unix.S_ISVTX == 0 {
		parts = append(parts, fmt.Sprintf("control directory (mode %04o, group %s)", st.Mode&0o7777, groupName(st.Gid)))
	}
	if unix.Lstat(file, &st) == nil && st.Mode&0o020 != 0 {
		parts = append(parts, fmt.Sprintf("transfer file (mode %04o, group %s)", st.Mode&0o7777, groupName(st.Gid)))
	}
	return strings.Join(parts, " and ")
}

// groupName returns "name (gid N)", or "gid N" when the name is unknown.
func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name + " (gid " + id + ")"
	}
	return "gid " + id
}

// createTransferFile creates an empty transfer file if there is none, with
// a mode the daemon's own checks accept under any umask: never writable by
// other users, and not by the group either under --strict-modes.
func createTransferFile(path string, strict bool) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, createMode(strict))
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating the transfer file: %w", err)
	}
	return f.Close()
}

// createMode is the mode the daemon creates the transfer file with, before
// the umask.
func createMode(strict bool) os.FileMode {
	if strict {
		return 0o644
	}
	return 0o664
}

// confinedRoot returns the prefix, among prefixes, that path lies under
// once cleaned (so ".." cannot climb out), the longest if several do. With
// no prefixes every absolute path is allowed and the root is "".
func confinedRoot(path string, prefixes []string) (root string, ok bool) {
	if !filepath.IsAbs(path) {
		return "", false
	}
	if len(prefixes) == 0 {
		return "", true
	}
	p := filepath.Clean(path)
	for _, pre := range prefixes {
		pre = filepath.Clean(pre)
		if (p == pre || strings.HasPrefix(p, strings.TrimSuffix(pre, "/")+"/")) && len(pre) > len(root) {
			root, ok = pre, true
		}
	}
	return root, ok
}

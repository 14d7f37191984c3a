package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// refusal is a transfer file or control directory the daemon will not use.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// transferFileGuard refuses a transfer file that another user owns or that
// group or other may write: whoever can write it decides what the daemon
// copies where. The check runs on the opened descriptor.
func transferFileGuard(st *unix.Stat_t) error {
	uid := uint32(os.Geteuid())
	switch {
	case st.Uid != uid:
		return refuse("refusing a transfer file owned by uid %d (the daemon runs as uid %d); use --insecure to accept it", st.Uid, uid)
	case st.Mode&0o022 != 0:
		return refuse("refusing a transfer file that group or other may write (mode %04o); chmod go-w it or use --insecure", st.Mode&0o7777)
	}
	return nil
}

// checkControlDir refuses a control directory that another user (root
// aside) owns, or that group or other may write without the sticky bit:
// they could replace the transfer file.
func checkControlDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("control directory %s: %w", dir, err)
	}
	uid := uint32(os.Geteuid())
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return refuse("control directory %s is not a directory (a symbolic link?)", dir)
	case st.Uid != uid && st.Uid != 0:
		return refuse("refusing control directory %s owned by uid %d (the daemon runs as uid %d); use --insecure to accept it", dir, st.Uid, uid)
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		return refuse("refusing control directory %s that group or other may write (mode %04o); chmod go-w it or use --insecure", dir, st.Mode&0o7777)
	}
	return nil
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

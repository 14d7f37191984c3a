package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestConfinedRoot(t *testing.T) {
	prefixes := []string{"/p/lustre", "/p/lustre/proj", "/dev/shm/"}
	tests := []struct {
		path     string
		prefixes []string
		root     string
		ok       bool
	}{
		{"/p/lustre/a/b", prefixes, "/p/lustre", true},
		{"/p/lustre/proj/x", prefixes, "/p/lustre/proj", true}, // the longest prefix
		{"/p/lustre", prefixes, "/p/lustre", true},
		{"/p/lustre2/x", prefixes, "", false}, // a sibling with the prefix as its start
		{"/p/lustre/../etc/passwd", prefixes, "", false},
		{"/dev/shm/x", prefixes, "/dev/shm", true},
		{"relative/x", prefixes, "", false},
		{"/anything", nil, "", true},
		{"relative", nil, "", false},
	}
	for _, tc := range tests {
		root, ok := confinedRoot(tc.path, tc.prefixes)
		if root != tc.root || ok != tc.ok {
			t.Errorf("confinedRoot(%q) = %q, %v; want %q, %v", tc.path, root, ok, tc.root, tc.ok)
		}
	}
}

func TestCheckControlDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mk("target", 0o700), link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir    string
		strict bool
		want   string // "" when accepted
	}{
		{mk("private", 0o700), false, ""},
		{mk("shared-read", 0o755), false, ""},
		{mk("sticky", os.ModeSticky|0o777), false, ""},
		{mk("sticky-strict", os.ModeSticky|0o777), true, ""},
		{mk("group-writable", 0o770), false, ""}, // the library's own under umask 002
		{mk("umask-002", 0o775), false, ""},
		{mk("group-writable-strict", 0o775), true, "may write (mode 0775) under --strict-modes"},
		{mk("world-writable", 0o777), false, "other users may write (mode 0777)"},
		{mk("world-writable-strict", 0o777), true, "other users may write (mode 0777)"},
		{mk("other-only", 0o703), false, "other users may write (mode 0703)"},
		{link, false, "is not a directory"},
		{filepath.Join(base, "missing"), false, "no such file or directory"},
	}
	for _, tc := range tests {
		err := checkControlDir(tc.dir, tc.strict)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s refused: %v", filepath.Base(tc.dir), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", filepath.Base(tc.dir), err, tc.want)
		}
	}
}

func TestParseVerify(t *testing.T) {
	for _, s := range []string{"off", "before", "after", "both"} {
		v, err := ParseVerify(s)
		if err != nil || v.String() != s {
			t.Errorf("ParseVerify(%q) = %v, %v", s, v, err)
		}
	}
	if _, err := ParseVerify("sometimes"); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

func TestTransferFileGuard(t *testing.T) {
	me := uint32(os.Geteuid())
	for _, tc := range []struct {
		name   string
		uid    uint32
		mode   uint32
		strict bool
		want   string // "" when accepted
	}{
		{"umask 022", me, 0o644, false, ""},
		{"umask 077", me, 0o600, false, ""},
		{"umask 002", me, 0o664, false, ""},
		{"umask 002 strict", me, 0o664, true, "under --strict-modes"},
		{"umask 022 strict", me, 0o644, true, ""},
		{"world-writable", me, 0o666, false, "other users may write (mode 0666)"},
		{"other-writable only", me, 0o602, false, "other users may write (mode 0602)"},
		{"foreign owner", me + 1, 0o600, false, "owned by uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &unix.Stat_t{Uid: tc.uid, Mode: unix.S_IFREG | tc.mode}
			err := transferFileGuard(tc.strict)(st)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCreateTransferFileUnderAnyUmask(t *testing.T) {
	dir := t.TempDir()
	for _, strict := range []bool{false, true} {
		for _, mask := range []int{0, 0o002, 0o022, 0o077} {
			path := filepath.Join(dir, fmt.Sprintf("t-%v-%03o", strict, mask))
			old := unix.Umask(mask)
			err := createTransferFile(path, strict)
			unix.Umask(old)
			if err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Stat(path, &st); err != nil {
				t.Fatal(err)
			}
			if err := transferFileGuard(strict)(&st); err != nil {
				t.Errorf("umask %03o strict %v: the daemon refuses the file it created: %v", mask, strict, err)
			}
		}
	}
}

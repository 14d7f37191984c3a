package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		dir  string
		want string // "" when accepted
	}{
		{mk("private", 0o700), ""},
		{mk("shared-read", 0o755), ""},
		{mk("sticky", os.ModeSticky|0o777), ""},
		{mk("group-writable", 0o770), "group or other may write (mode 0770)"},
		{mk("world-writable", 0o777), "group or other may write (mode 0777)"},
		{link, "is not a directory"},
		{filepath.Join(base, "missing"), "no such file or directory"},
	}
	for _, tc := range tests {
		err := checkControlDir(tc.dir)
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

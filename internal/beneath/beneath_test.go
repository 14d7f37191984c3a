package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRel(t *testing.T) {
	tests := []struct {
		root, path string
		want       string
		ok         bool
	}{
		{"/r", "/r/a/b", "a/b", true},
		{"/r", "/r", ".", true},
		{"/r/", "/r/a", "a", true},
		{"/r", "/r/a/../b", "b", true},
		{"/r", "/r/../o/x", "", false},
		{"/r", "/r/..", "", false},
		{"/r", "/rx/a", "", false},
		{"/r", "/o", "", false},
		{"/r", "r/a", "", false},
		{"/", "/any/where", "any/where", true},
		{"/r", "/r/..x", "..x", true},
		{"/r/./s", "/r/s/a", "a", true},
	}
	for _, tc := range tests {
		got, ok := Rel(tc.root, tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Rel(%q, %q) = %q, %v; want %q, %v", tc.root, tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// Outcomes of an open, by the rule.
const (
	opened  = "opened"
	outside = "outside"
	symlink = "final symlink"
)

// outcome classifies the result of an open by the rule.
func outcome(err error) string {
	switch {
	case err == nil:
		return opened
	case errors.Is(err, ErrOutside):
		return outside
	case errors.Is(err, unix.ELOOP):
		return symlink
	}
	return err.Error()
}

// tree builds, in a fresh directory, root/{a, sub/f} and out/x with the
// symbolic links the rule is about, and returns root.
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root, out := filepath.Join(dir, "root"), filepath.Join(dir, "out")
	for _, d := range []string{filepath.Join(root, "sub"), out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "a"), filepath.Join(root, "sub", "f"), filepath.Join(out, "x")} {
		if err := os.WriteFile(f, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"lnk":     "a",                               // final symlink to a file inside
		"lnkout":  filepath.Join(out, "x"),           // final symlink to a file outside
		"d":       "sub",                             // relative link to a directory inside
		"e":       "../out",                          // relative link to a directory outside
		"absin":   filepath.Join(root, "sub"),        // absolute link to a directory inside
		"absout":  out,                               // absolute link to a directory outside
		"sub/up":  "..",                              // ".." in a link, staying inside
		"sub/up2": "../..",                           // ".." in a link, leading out
		"dlnk":    "d",                               // a link to a link to a directory inside
		"sub/fl":  "../lnk",                          // a final link whose target is a link
		"proc":    "/proc/self/root",                 // an absolute (magic) link
		"dd":      filepath.Join("sub", "..", "sub"), // ".." within, resolved on disk
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestOpen is the rule's table: what a file or directory open beneath the
// root gives for each kind of path.
func TestOpen(t *testing.T) {
	root := tree(t)
	tests := []struct {
		rel   string
		dir   bool // open as a directory (O_DIRECTORY)
		want  string
		about string
	}{
		{"a", false, opened, "a plain file"},
		{"sub/f", false, opened, "a file in a directory"},
		{"lnk", false, symlink, "a final symlink to a file inside is not followed"},
		{"lnkout", false, symlink, "a final symlink to a file outside is not followed"},
		{"sub/fl", false, symlink, "a final symlink to a symlink is not followed"},
		{"d/f", false, opened, "a relative link to a directory inside is followed"},
		{"dlnk/f", false, opened, "a chain of relative links inside is followed"},
		{"dd/f", false, opened, "a link whose target holds .. staying inside"},
		{"e/x", false, outside, "a relative link to a directory outside"},
		{"absin/f", false, outside, "an absolute link, even to a directory inside"},
		{"absout/x", false, outside, "an absolute link to a directory outside"},
		{"sub/up/a", false, opened, ".. in a link staying inside"},
		{"sub/up2/out/x", false, outside, ".. in a link leading out"},
		{"sub/../a", false, opened, ".. in the path staying inside"},
		{"../out/x", false, outside, ".. in the path leading out"},
		{filepath.Join(filepath.Dir(root), "out", "x"), false, outside, "an absolute path"},
		{"proc/etc/passwd", false, outside, "a /proc link"},
		{".", true, opened, "the root itself"},
		{"d", true, opened, "a final link to a directory inside, opened as a directory"},
		{"e", true, outside, "a final link to a directory outside, opened as a directory"},
		{"absin", true, outside, "a final absolute link, opened as a directory"},
	}
	rootFD, rel, err := OpenRoot(root, root)
	if err != nil || rel != "." {
		t.Fatalf("OpenRoot: %q, %v", rel, err)
	}
	defer unix.Close(rootFD)
	for _, tc := range tests {
		flags := unix.O_RDONLY
		if tc.dir {
			flags |= unix.O_DIRECTORY
		}
		fd, err := Open(rootFD, tc.rel, flags, 0)
		if err == nil {
			unix.Close(fd)
		}
		if got := outcome(err); got != tc.want {
			t.Errorf("%s: Open(%q) gives %q (%v), want %q", tc.about, tc.rel, got, err, tc.want)
		}
	}
}

func TestOpenRootOutside(t *testing.T) {
	root := tree(t)
	for _, p := range []string{filepath.Join(root, "..", "out", "x"), "/etc/passwd", filepath.Join(root+"x", "a")} {
		fd, _, err := OpenRoot(root, p)
		if !errors.Is(err, ErrOutside) {
			if err == nil {
				unix.Close(fd)
			}
			t.Errorf("OpenRoot(%q): %v, want ErrOutside", p, err)
		}
	}
	if _, _, err := OpenRoot(filepath.Join(root, "missing"), filepath.Join(root, "missing", "a")); !errors.Is(err, unix.ENOENT) {
		t.Errorf("OpenRoot of a missing root: %v, want ENOENT", err)
	}
}

// FuzzRel: whatever the root and path, a path Rel accepts is the root
// joined with the answer, and the answer never climbs out or is absolute;
// one it refuses is not the root or beneath it.
func FuzzRel(f *testing.F) {
	for _, s := range [][2]string{{"/r", "/r/a"}, {"/r", "/r/../x"}, {"/", "/a"}, {"r", "r/a"}, {"/r", "/rx"}, {"/r/", "/r/./a//b/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, root, path string) {
		rel, ok := Rel(root, path)
		if !ok {
			clean, r := filepath.Clean(path), filepath.Clean(root)
			if clean == r || (r == "/" && filepath.IsAbs(clean)) || (len(clean) > len(r) && clean[:len(r)+1] == r+"/") {
				t.Fatalf("Rel(%q, %q) refused a path beneath the root", root, path)
			}
			return
		}
		if rel == ".." || len(rel) >= 3 && rel[:3] == "../" || filepath.IsAbs(rel) {
			t.Fatalf("Rel(%q, %q) = %q climbs out", root, path, rel)
		}
		if got := filepath.Join(filepath.Clean(root), rel); got != filepath.Clean(path) {
			t.Fatalf("Rel(%q, %q) = %q, but joined it is %q", root, path, rel, got)
		}
	})
}

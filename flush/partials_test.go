package flush

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRemovePartial(t *testing.T) {
	dir := t.TempDir()
	plain := TempPath(filepath.Join(dir, "plain"))
	locked := TempPath(filepath.Join(dir, "locked"))
	isDir := TempPath(filepath.Join(dir, "isdir"))
	notPartial := filepath.Join(dir, "data.ckpt")
	for _, p := range []string{plain, locked, notPartial} {
		writeFile(t, p, []byte("x"))
	}
	mustOK(t, os.Mkdir(isDir, 0o755))
	f, err := os.Open(locked)
	mustOK(t, err)
	defer f.Close()
	mustOK(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))

	got, err := Partials(dir, "")
	mustOK(t, err)
	slices.Sort(got)
	want := []string{isDir, locked, plain}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Partials = %v, want %v", got, want)
	}
	tests := []struct {
		path    string
		removed bool
		err     error
	}{
		{plain, true, nil},
		{plain, false, nil}, // already gone
		{locked, false, ErrPartialLocked},
		{isDir, false, ErrNotRegular},
		{notPartial, false, ErrInvalidJob},
		{TempPath(filepath.Join(dir, "missing", "x")), false, nil},
	}
	for _, tc := range tests {
		removed, err := RemovePartial(tc.path, "", "")
		if removed != tc.removed || (tc.err == nil) != (err == nil) || tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("RemovePartial(%s) = %v, %v; want %v, %v", tc.path, removed, err, tc.removed, tc.err)
		}
	}
	for _, p := range []string{locked, isDir, notPartial} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	// Confined: a path leading outside the root is refused.
	if _, err := RemovePartial(TempPath(filepath.Join(dir, "..", "x")), dir, ""); !errors.Is(err, errOutside) {
		t.Errorf("outside the root: %v", err)
	}
}

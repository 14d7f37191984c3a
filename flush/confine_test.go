package flush

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/cache"
	"golang.org/x/sys/unix"
)

func TestConfinedCopy(t *testing.T) {
	tests := []struct {
		name string
		// setup builds the tree under root and returns the job's paths.
		setup   func(t *testing.T, root string) (src, dst string)
		wantErr string // "" for success
	}{
		{"plain, new directories beneath the root", func(t *testing.T, root string) (string, string) {
			return filepath.Join(root, "cache", "a"), filepath.Join(root, "pfs", "x", "y", "a")
		}, ""},
		{"symlink that stays beneath", func(t *testing.T, root string) (string, string) {
			mustOK(t, os.MkdirAll(filepath.Join(root, "pfs", "real"), 0o755))
			mustOK(t, os.Symlink("real", filepath.Join(root, "pfs", "alias")))
			return filepath.Join(root, "cache", "a"), filepath.Join(root, "pfs", "alias", "a")
		}, ""},
		{"source reached with ..", func(t *testing.T, root string) (string, string) {
			return filepath.Join(root, "cache", "..", "outside", "secret"), filepath.Join(root, "pfs", "a")
		}, "outside the directory it is confined to"},
		{"source directory is a symlink out", func(t *testing.T, root string) (string, string) {
			mustOK(t, os.Symlink(filepath.Join(root, "outside"), filepath.Join(root, "cache", "sub")))
			return filepath.Join(root, "cache", "sub", "secret"), filepath.Join(root, "pfs", "a")
		}, "outside the directory it is confined to"},
		{"destination directory is a symlink out", func(t *testing.T, root string) (string, string) {
			mustOK(t, os.Symlink(filepath.Join(root, "outside"), filepath.Join(root, "pfs", "sub")))
			return filepath.Join(root, "cache", "a"), filepath.Join(root, "pfs", "sub", "planted")
		}, "outside the directory it is confined to"},
		{"destination directory is a relative symlink out", func(t *testing.T, root string) (string, string) {
			mustOK(t, os.Symlink("../outside", filepath.Join(root, "pfs", "sub")))
			return filepath.Join(root, "cache", "a"), filepath.Join(root, "pfs", "sub", "planted")
		}, "outside the directory it is confined to"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"cache", "pfs", "outside"} {
				mustOK(t, os.MkdirAll(filepath.Join(root, d), 0o755))
			}
			data := randBytes(100000, 7)
			writeFile(t, filepath.Join(root, "cache", "a"), data)
			writeFile(t, filepath.Join(root, "outside", "secret"), data)
			src, dst := tc.setup(t, root)
			job := Job{Src: src, Dst: dst, Size: int64(len(data)),
				SrcRoot: filepath.Join(root, "cache"), DstRoot: filepath.Join(root, "pfs")}
			res, err := NewCopier(nil, Options{}).Copy(context.Background(), job, nil)
			if tc.wantErr == "" {
				if err != nil || !res.Complete {
					t.Fatalf("confined copy failed: %v", err)
				}
				got, err := os.ReadFile(dst)
				mustOK(t, err)
				if !bytes.Equal(got, data) {
					t.Fatal("copy differs")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errOutside) {
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
			entries, _ := os.ReadDir(filepath.Join(root, "outside"))
			if len(entries) != 1 {
				t.Fatalf("something was written outside the root: %v", entries)
			}
		})
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPartialCopyRemovedDuringCopy: once the partial copy is unlinked by
// someone else, no further offset may be committed as durable, and the
// committed offset falls back to 0.
func TestPartialCopyRemovedDuringCopy(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "out", "dst")
	want := randBytes(4<<20, 31)
	writeFile(t, src, want)
	var commits []int64
	commit := func(w int64, _ uint32) error {
		commits = append(commits, w)
		if len(commits) == 1 {
			mustOK(t, os.Remove(TempPath(dst)))
		}
		return nil
	}
	_, err := NewCopier(nil, Options{BufSize: 64 << 10, SyncBytes: 256 << 10}).
		Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(want))}, commit)
	if !errors.Is(err, ErrDestinationChanged) {
		t.Fatalf("got %v, want ErrDestinationChanged", err)
	}
	if len(commits) != 2 || commits[0] <= 0 || commits[1] != 0 {
		t.Fatalf("commits %v: want one offset, then 0 once the partial copy was gone", commits)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("published a copy whose partial file was removed")
	}
}

// TestCopyAndInspectAgree: the copy (opening a source beneath SrcRoot) and
// package cache (opening a file beneath Options.RootDir) follow one rule,
// so they give the same answer for the same path: both open it, both
// refuse it as outside, or both refuse a final symbolic link.
func TestCopyAndInspectAgree(t *testing.T) {
	dir := t.TempDir()
	root, out, pfs := filepath.Join(dir, "cache"), filepath.Join(dir, "out"), filepath.Join(dir, "pfs")
	for _, d := range []string{filepath.Join(root, "sub"), out, pfs} {
		mustOK(t, os.MkdirAll(d, 0o755))
	}
	data := bytes.Repeat([]byte("checkpoint data\n"), 4096)
	for _, f := range []string{filepath.Join(root, "a"), filepath.Join(root, "sub", "f"), filepath.Join(out, "x")} {
		writeFile(t, f, data)
	}
	for name, target := range map[string]string{
		"lnk": "a", "lnkout": filepath.Join(out, "x"), "d": "sub", "e": "../out",
		"absin": filepath.Join(root, "sub"), "sub/up": "..",
	} {
		mustOK(t, os.Symlink(target, filepath.Join(root, name)))
	}
	for i, rel := range []string{"a", "sub/f", "lnk", "lnkout", "d/f", "e/x", "absin/f", "sub/up/a", "sub/../a", "../out/x"} {
		src := filepath.Join(root, rel)
		if rel == "sub/../a" {
			src = root + "/" + rel // kept as written, not cleaned by Join
		}
		job := Job{Src: src, Dst: filepath.Join(pfs, strconv.Itoa(i)), Size: int64(len(data)), SrcRoot: root, DstRoot: pfs}
		_, copyErr := NewCopier(nil, Options{}).Copy(context.Background(), job, nil)
		_, inspectErr := cache.InspectWith(context.Background(), src, cache.Options{RootDir: root})
		if c, i := confinement(copyErr), confinement(inspectErr); c != i {
			t.Errorf("%s: the copy says %q (%v), cache says %q (%v)", rel, c, copyErr, i, inspectErr)
		}
	}
}

// confinement classifies an error by the confinement rule's outcomes.
func confinement(err error) string {
	switch {
	case err == nil:
		return "opened"
	case errors.Is(err, errOutside):
		return "outside"
	case errors.Is(err, unix.ELOOP):
		return "final symbolic link"
	}
	return "other: " + err.Error()
}

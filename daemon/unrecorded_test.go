package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestUnrecordedStillPublished: a published copy whose record failed is
// recorded without copying only while neither its source nor DESTINATION
// changed, and only for the same DESTINATION and SIZE.
func TestUnrecordedStillPublished(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, f *transfer.File)
		want   bool
	}{
		{"unchanged", func(*testing.T, *transfer.File) {}, true},
		{"source rewritten", func(t *testing.T, f *transfer.File) {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(f.Src, later, later); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"DESTINATION replaced", func(t *testing.T, f *transfer.File) {
			tmp := f.Dest + ".new"
			if err := os.WriteFile(tmp, []byte("abcd"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, f.Dest); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"DESTINATION removed", func(t *testing.T, f *transfer.File) {
			if err := os.Remove(f.Dest); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"another DESTINATION", func(_ *testing.T, f *transfer.File) { f.Dest += ".2" }, false},
		{"another SIZE", func(_ *testing.T, f *transfer.File) { f.Size++ }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := transfer.File{Src: filepath.Join(dir, "src"), Dest: filepath.Join(dir, "dst"), Size: 4}
			for _, p := range []string{f.Src, f.Dest} {
				if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			u := noteUnrecorded(f, 1, "")
			if u == nil {
				t.Fatal("nothing noted of a published copy")
			}
			tc.change(t, &f)
			if got := u.stillPublished(f); got != tc.want {
				t.Fatalf("stillPublished = %v, want %v", got, tc.want)
			}
		})
	}
}

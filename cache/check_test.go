package cache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

// feedAll feeds data to c the way a copy of a sparse file does: in pieces
// of size piece, leaving out every all-zero piece (a hole).
func feedAll(t *testing.T, c *Check, data []byte, piece int) {
	t.Helper()
	for off := 0; off < len(data); off += piece {
		p := data[off:min(off+piece, len(data))]
		if !bytes.ContainsFunc(p, func(r rune) bool { return r != 0 }) {
			continue
		}
		if err := c.Feed(int64(off), p); err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("Feed at %d: %v", off, err)
			}
			return // the verdict came early; the copy stops
		}
	}
}

// TestCheckAgreesWithInspect: the streamed check of every shared sample,
// fed in pieces of several sizes with holes left out, reaches Inspect's
// verdict, with companions opened beneath the samples' directory.
func TestCheckAgreesWithInspect(t *testing.T) {
	for _, sub := range []string{"ftiff", "lime", "sion"} {
		dir := shareddata.Dir(t, sub)
		names, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range names {
			path := filepath.Join(dir, e.Name())
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want, wantErr := Inspect(context.Background(), path)
			for _, piece := range []int{1 << 20, 4096, 1000} {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				c := StartCheck(context.Background(), f, int64(len(data)), path, Options{RootDir: dir})
				if _, _, done := c.Early(); !done {
					feedAll(t, c, data, piece)
				}
				got, gotErr := c.Wait()
				c.Close()
				f.Close()
				if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
					t.Errorf("%s/%s, pieces of %d: error %v, Inspect says %v", sub, e.Name(), piece, gotErr, wantErr)
					continue
				}
				if gotErr == nil && (got.Kind != want.Kind || got.Detail != want.Detail || !slices.Equal(got.Ranges, want.Ranges) ||
					!slices.Equal(got.Warnings, want.Warnings) || !slices.Equal(got.Companions, want.Companions)) {
					t.Errorf("%s/%s, pieces of %d: report %+v, Inspect says %+v", sub, e.Name(), piece, got, want)
				}
			}
		}
	}
}

// TestCheckCompanionOutsideRoot: a companion reached through a symbolic
// link that leaves the root is not opened; the check fails naming it.
func TestCheckCompanionOutsideRoot(t *testing.T) {
	sion := shareddata.Dir(t, "sion")
	in, out := t.TempDir(), t.TempDir()
	data, err := os.ReadFile(filepath.Join(sion, "multifile_6t_2f.sion"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(in, "m.sion")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// Outside: a FIFO, which a plain open for reading would block on.
	if err := syscall.Mkfifo(filepath.Join(out, "m.sion.000001"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(out, "m.sion.000001"), filepath.Join(in, "m.sion.000001")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := InspectFile(context.Background(), f, int64(len(data)), path, Options{RootDir: in})
	if err == nil || !strings.Contains(err.Error(), "m.sion.000001") {
		t.Fatalf("report %+v, error %v: the member leading outside the root should be refused by name", rep, err)
	}
	t.Log(err)
}

// TestCompanionFinalSymlink: a companion that is itself a symbolic link is
// not followed, even to the real member beside it, as the copy does not
// follow a source that is one: the check fails naming it.
func TestCompanionFinalSymlink(t *testing.T) {
	sion := shareddata.Dir(t, "sion")
	in := t.TempDir()
	for _, name := range []string{"multifile_6t_2f.sion", "multifile_6t_2f.sion.000001"} {
		data, err := os.ReadFile(filepath.Join(sion, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(in, strings.Replace(name, "multifile_6t_2f", "real", 1)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(in, "m.sion")
	if err := os.Rename(filepath.Join(in, "real.sion"), path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.sion.000001", filepath.Join(in, "m.sion.000001")); err != nil {
		t.Fatal(err)
	}
	rep, err := InspectWith(context.Background(), path, Options{RootDir: in})
	if err == nil || !strings.Contains(err.Error(), "m.sion.000001") || !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("report %+v, error %v: the member that is a symbolic link should be refused by name", rep, err)
	}
	if _, err := Inspect(context.Background(), path); err != nil {
		t.Fatalf("unconfined, the set is sound (the link followed): %v", err)
	}
}

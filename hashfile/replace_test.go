package hashfile

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestReplace: fn gets the raw bytes of a file that does not decode, and
// the tree it returns replaces them; a nil tree writes nothing; a missing
// file is not created.
func TestReplace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.scrinfo")
	good := New()
	good.SetValue("COMMAND", "RUN")
	bad := Encode(good)
	bad[len(bad)-1] ^= 1 // the CRC
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(path, Flock)
	if _, err := s.Read(); !errors.Is(err, ErrFormat) {
		t.Fatalf("read of a corrupt file: %v", err)
	}
	for _, write := range []bool{false, true} {
		var got []byte
		wrote, err := s.Replace(context.Background(), func(raw []byte) (*Tree, error) {
			got = bytes.Clone(raw)
			if !write {
				return nil, nil
			}
			return good, nil
		})
		if err != nil || wrote != write || !bytes.Equal(got, bad) {
			t.Fatalf("write %v: wrote %v, %v; raw %x", write, wrote, err, got)
		}
	}
	tr, err := s.Read()
	if err != nil || !tr.Equal(good) {
		t.Fatalf("after Replace: %v %v", tr, err)
	}
	missing := NewStore(filepath.Join(t.TempDir(), "none"), Flock)
	if _, err := missing.Replace(context.Background(), func([]byte) (*Tree, error) { return good, nil }); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Replace of a missing file: %v", err)
	}
}

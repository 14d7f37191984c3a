package cache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/scr-transferd/scr-transferd/cache/cachetest"
)

// TestSamples: every sample scr-ctl demo shows is sound as the kind it
// claims, and each damaged one is refused: data bytes flipped where the
// format carries hashes, the magic number zeroed elsewhere.
func TestSamples(t *testing.T) {
	dir := t.TempDir()
	for _, s := range cachetest.Samples() {
		p := filepath.Join(dir, s.Name)
		if err := s.Write(p); err != nil {
			t.Fatal(err)
		}
		rep, err := Inspect(context.Background(), p)
		if err != nil || string(rep.Kind) != s.Kind {
			t.Fatalf("%s: %v, %v; want a sound %s file", s.Name, rep, err, s.Kind)
		}
		if rep.Kind == Plain {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Kind == FTIFF {
			b[1000] ^= 0xff
		} else {
			copy(b, make([]byte, 4))
		}
		bad := filepath.Join(dir, "bad-"+s.Name)
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err = Inspect(context.Background(), bad)
		var fe *FormatError
		if !errors.As(err, &fe) || string(fe.Kind) != s.Kind {
			t.Errorf("damaged %s: %v, %v; want a %s FormatError", s.Name, rep, err, s.Kind)
		}
	}
}

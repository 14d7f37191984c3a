package flush

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSegmenterReadsTheTail: where SEEK_DATA says nothing but hole remains,
// the last tailWindow bytes are still returned as data (once), because
// some file systems miss data at the end of a file.
func TestSegmenterReadsTheTail(t *testing.T) {
	const limit = 5<<20 + 100
	p := filepath.Join(t.TempDir(), "f")
	writeSparse(t, p, limit, []Range{{Off: 0, Len: 4096}}, 1)
	f, err := os.Open(p)
	mustOK(t, err)
	defer f.Close()
	s := segmenter{fd: int(f.Fd())}
	type span struct{ start, end int64 }
	var got []span
	for off := int64(0); ; {
		start, end, ok, err := s.next(off, limit)
		mustOK(t, err)
		if !ok {
			break
		}
		got = append(got, span{start, end})
		off = end
	}
	want := []span{{0, 4096}, {4 << 20, limit}}
	if s.whole {
		t.Skip("no SEEK_DATA here")
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("spans %v, want %v", got, want)
	}
}

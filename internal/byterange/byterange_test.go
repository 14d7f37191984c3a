package byterange_test

import (
	"testing"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/cache/cachetest"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/internal/byterange"
)

// TestOneRange: cache's ranges of a checkpoint are flush's ranges to copy
// and cachetest's, with no conversion (this does not compile where they
// are distinct types).
func TestOneRange(t *testing.T) {
	var rs []cache.Range = cachetest.MergeRanges([]cachetest.Range{{Off: 8, Len: 2}, {Off: 0, Len: 4}, {Off: 4, Len: 1}})
	var copied []flush.Range = rs
	var one []byterange.Range = copied
	if len(one) != 2 || one[0] != (byterange.Range{Off: 0, Len: 5}) || one[1].End() != 10 {
		t.Fatalf("merged ranges %+v, want [0,5) and [8,10)", one)
	}
}

func TestEnd(t *testing.T) {
	for _, tc := range []struct {
		r    byterange.Range
		want int64
	}{
		{byterange.Range{}, 0},
		{byterange.Range{Off: 3}, 3},
		{byterange.Range{Off: 3, Len: 4}, 7},
	} {
		if got := tc.r.End(); got != tc.want {
			t.Errorf("%+v.End() = %d, want %d", tc.r, got, tc.want)
		}
	}
}

package flush

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/scr-transferd/scr-transferd/internal/byterange"
)

// Range is a span [Off, Off+Len) of the source that holds data; cache.Range
// is the same type.
type Range = byterange.Range

// normalizeRanges validates in against a file of size bytes and writes into
// dst[:0] the same data ranges sorted by offset, with empty ones dropped and
// overlapping or touching ones merged. It never allocates more than len(in)
// entries.
func normalizeRanges(dst, in []Range, size int64) ([]Range, error) {
	out := dst[:0]
	for _, r := range in {
		if r.Off < 0 || r.Len < 0 {
			return out[:0], fmt.Errorf("%w: data range [%d,+%d) has a negative offset or length", ErrInvalidJob, r.Off, r.Len)
		}
		if r.Off > size || r.Len > size-r.Off {
			return out[:0], fmt.Errorf("%w: data range [%d,+%d) lies beyond SIZE %d", ErrInvalidJob, r.Off, r.Len, size)
		}
		if r.Len > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Range) int { return cmp.Compare(a.Off, b.Off) })
	n := 0
	for _, r := range out {
		if n > 0 {
			last := &out[n-1]
			if end := last.Off + last.Len; r.Off <= end {
				if e := r.Off + r.Len; e > end {
					last.Len = e - last.Off
				}
				continue
			}
		}
		out[n] = r
		n++
	}
	return out[:n], nil
}

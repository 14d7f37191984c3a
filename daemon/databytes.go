package daemon

import "github.com/scr-transferd/scr-transferd/cache"

// dataBetween returns the bytes of [from, to) that hold data in a
// checkpoint whose format says where its data lies (a SIONlib container:
// the gaps between its chunks are holes, not copied), and to-from for any
// other file or when the format is not known: what a copy of that span
// transfers, for the rates the log states.
func (v *checkpointVerifier) dataBetween(from, to int64) int64 {
	if v == nil || v.rep == nil || v.rep.Kind != cache.SION {
		return max(to-from, 0)
	}
	var n int64
	for _, r := range v.rep.Ranges {
		n += max(0, min(r.Off+r.Len, to)-max(r.Off, from))
	}
	return n
}

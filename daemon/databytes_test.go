package daemon

import (
	"testing"

	"github.com/scr-transferd/scr-transferd/cache"
)

// TestDataBetween: the bytes a copy of [from, to) transfers, for the
// rates in the log: a SIONlib container's data ranges only, the whole
// span of any other file.
func TestDataBetween(t *testing.T) {
	sion := &checkpointVerifier{rep: &cache.Report{Kind: cache.SION,
		Ranges: []cache.Range{{Off: 0, Len: 100}, {Off: 1000, Len: 50}, {Off: 4000, Len: 10}}}}
	plain := &checkpointVerifier{rep: &cache.Report{Kind: cache.Plain}}
	for _, tc := range []struct {
		name     string
		v        *checkpointVerifier
		from, to int64
		want     int64
	}{
		{"sion whole", sion, 0, 5000, 160},
		{"sion resumed inside a range", sion, 1020, 5000, 40},
		{"sion resumed in a hole", sion, 2000, 5000, 10},
		{"plain", plain, 100, 5000, 4900},
		{"unverified", nil, 0, 5000, 5000},
		{"nothing", sion, 5000, 5000, 0},
	} {
		if got := tc.v.dataBetween(tc.from, tc.to); got != tc.want {
			t.Errorf("%s: dataBetween(%d, %d) = %d; want %d", tc.name, tc.from, tc.to, got, tc.want)
		}
	}
}

package daemon

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/transfer"
)

func TestBackoffCeiling(t *testing.T) {
	const lo, hi = time.Second, time.Minute
	for _, tc := range []struct{ prev, want time.Duration }{
		{0, time.Second},
		{time.Second, 2 * time.Second},
		{16 * time.Second, 32 * time.Second},
		{32 * time.Second, time.Minute},
		{time.Minute, time.Minute},
		{100 * time.Millisecond, time.Second}, // below lo: lo
	} {
		if got := backoffCeiling(tc.prev, lo, hi); got != tc.want {
			t.Errorf("after %v: %v, want %v", tc.prev, got, tc.want)
		}
	}
}

func TestJittered(t *testing.T) {
	for _, tc := range []struct {
		ceiling time.Duration
		u       float64
		want    time.Duration
	}{
		{10 * time.Second, 0, 5 * time.Second},
		{10 * time.Second, 0.5, 7500 * time.Millisecond},
		{10 * time.Second, 0.999, 9995 * time.Millisecond},
		{10 * time.Second, -1, 5 * time.Second}, // clamped
		{10 * time.Second, 2, 10 * time.Second}, // clamped
		{time.Second, 0.25, 625 * time.Millisecond},
		{0, 0.7, 0},
	} {
		if got := jittered(tc.ceiling, tc.u); got != tc.want {
			t.Errorf("jittered(%v, %v) = %v, want %v", tc.ceiling, tc.u, got, tc.want)
		}
	}
}

// TestRetriesSpread: a thousand nodes whose copy of the same file failed at
// the same moment (a parallel file system outage) retry spread over half
// of their back-off, not in lockstep; each waits at least half of it and at
// most all of it, and the ceiling still doubles up to --retry-max.
func TestRetriesSpread(t *testing.T) {
	const nodes = 1000
	f := transfer.File{Src: "/cache/rank_0.ckpt", Dest: "/pfs/rank_0.ckpt"}
	for failures, ceiling := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		var waits []time.Duration
		for i := range nodes {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			d := &daemon{cfg: Settings{RetryMin: time.Second, RetryMax: 4 * time.Second}, retries: map[string]*retry{}, rand: rng.Float64}
			var r *retry
			for range failures + 1 {
				before := time.Now()
				r = d.backoff(f)
				if w := r.at.Sub(before); w < r.wait || w > r.wait+time.Second {
					t.Fatalf("retry at %v after the failure, its wait is %v", w, r.wait)
				}
			}
			if r.delay != ceiling {
				t.Fatalf("after %d failures: back-off %v, want %v", failures+1, r.delay, ceiling)
			}
			if r.wait < ceiling/2 || r.wait > ceiling {
				t.Fatalf("after %d failures: wait %v outside [%v, %v]", failures+1, r.wait, ceiling/2, ceiling)
			}
			waits = append(waits, r.wait)
		}
		// In tenths of the jitter window [ceiling/2, ceiling], each of
		// which should hold about 100 of the 1000 nodes.
		var bins [10]int
		for _, w := range waits {
			bins[min(int(10*(w-ceiling/2)/(ceiling/2)), 9)]++
		}
		if slices.Min(bins[:]) < nodes/20 || slices.Max(bins[:]) > nodes/5 {
			t.Errorf("after %d failures: retries of %d nodes per tenth of [%v, %v]: %v, want about %d each",
				failures+1, nodes, ceiling/2, ceiling, bins, nodes/10)
		}
	}
}

package backoff

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestCeiling: the ceiling doubles (or grows by Factor) from First up to
// Max after the spins, on fixed attempt counts, for the policies the
// project uses and the edge cases of the fields.
func TestCeiling(t *testing.T) {
	const ms = time.Millisecond
	files := Policy{First: time.Second, Max: time.Minute, Factor: 2, Jitter: Equal}
	lock := Policy{Spins: 25, Spin: 200 * time.Microsecond, First: ms, Max: 50 * ms}
	for _, tc := range []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"files first", files, 0, time.Second},
		{"files second", files, 1, 2 * time.Second},
		{"files sixth", files, 5, 32 * time.Second},
		{"files capped", files, 6, time.Minute},
		{"files far", files, 1 << 20, time.Minute},
		{"files max int", files, math.MaxInt, time.Minute},
		{"negative attempt", files, -3, time.Second},
		{"lock spin first", lock, 0, 200 * time.Microsecond},
		{"lock spin last", lock, 24, 200 * time.Microsecond},
		{"lock after spins", lock, 25, ms},
		{"lock doubling", lock, 30, 32 * ms},
		{"lock capped", lock, 31, 50 * ms},
		{"zero factor doubles", Policy{First: ms, Max: time.Second}, 3, 8 * ms},
		{"factor 3", Policy{First: ms, Max: time.Second, Factor: 3}, 2, 9 * ms},
		{"factor below 1 constant", Policy{First: ms, Max: time.Second, Factor: 0.5}, 4, ms},
		{"zero max constant", Policy{First: 10 * ms}, 7, 10 * ms},
		{"max below first", Policy{First: 10 * ms, Max: ms}, 0, 10 * ms},
		{"zero policy", Policy{}, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Ceiling(tc.n); got != tc.want {
				t.Errorf("Ceiling(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
}

// TestWait: equal jitter draws the wait from [ceiling/2, ceiling) by the
// draw passed in, clamped; no jitter, and the spins, ignore the draw.
func TestWait(t *testing.T) {
	equal := Policy{First: 10 * time.Second, Max: time.Minute, Jitter: Equal}
	plain := Policy{First: 10 * time.Second, Max: time.Minute}
	spins := Policy{Spins: 2, Spin: time.Millisecond, First: time.Second, Jitter: Equal}
	for _, tc := range []struct {
		name string
		p    Policy
		n    int
		u    float64
		want time.Duration
	}{
		{"equal low", equal, 0, 0, 5 * time.Second},
		{"equal middle", equal, 0, 0.5, 7500 * time.Millisecond},
		{"equal high", equal, 0, 0.999, 9995 * time.Millisecond},
		{"equal clamped below", equal, 0, -1, 5 * time.Second},
		{"equal clamped above", equal, 0, 2, 10 * time.Second},
		{"equal second attempt", equal, 1, 0.25, 12500 * time.Millisecond},
		{"equal capped", equal, 9, 0, 30 * time.Second},
		{"plain ignores the draw", plain, 1, 0.9, 20 * time.Second},
		{"spins ignore the draw", spins, 1, 0.9, time.Millisecond},
		{"jitter after the spins", spins, 2, 0, 500 * time.Millisecond},
		{"zero ceiling", Policy{Jitter: Equal}, 0, 0.7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Wait(tc.n, tc.u); got != tc.want {
				t.Errorf("Wait(%d, %v) = %v, want %v", tc.n, tc.u, got, tc.want)
			}
		})
	}
}

// TestAt: the next attempt is due the wait after the now passed in.
func TestAt(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := Policy{First: time.Second, Max: time.Minute, Jitter: Equal}
	if got, want := p.At(now, 2, 0.5), now.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("At = %v, want %v", got, want)
	}
}

// TestEqualJitterSpreads: a thousand processes that failed at the same
// moment, each with its own random source, retry spread evenly over the
// upper half of the back-off, not in lockstep.
func TestEqualJitterSpreads(t *testing.T) {
	const procs = 1000
	p := Policy{First: time.Second, Max: 4 * time.Second, Jitter: Equal}
	for n, ceiling := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		var bins [10]int
		for i := range procs {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			w := p.Wait(n, rng.Float64())
			if w < ceiling/2 || w > ceiling {
				t.Fatalf("attempt %d: wait %v outside [%v, %v]", n, w, ceiling/2, ceiling)
			}
			bins[min(int(10*(w-ceiling/2)/(ceiling/2)), 9)]++
		}
		if slices.Min(bins[:]) < procs/20 || slices.Max(bins[:]) > procs/5 {
			t.Errorf("attempt %d: waits per tenth of [%v, %v]: %v, want about %d each", n, ceiling/2, ceiling, bins, procs/10)
		}
	}
}

// FuzzWait: whatever the policy, attempt and draw, the ceiling never
// shrinks from one attempt to the next after the spins, never exceeds the
// larger of First and Max, and the wait lies between half the ceiling and
// the ceiling.
func FuzzWait(f *testing.F) {
	f.Add(int64(time.Second), int64(time.Minute), 2.0, 3, 0.5, true)
	f.Add(int64(time.Millisecond), int64(50*time.Millisecond), 0.0, 40, 0.0, false)
	f.Add(int64(0), int64(0), 0.0, 0, 0.0, false)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), math.Inf(1), math.MaxInt, 1.0, true)
	f.Fuzz(func(t *testing.T, first, maxWait int64, factor float64, n int, u float64, jitter bool) {
		if first < 0 || maxWait < 0 || math.IsNaN(factor) || math.IsNaN(u) {
			t.Skip()
		}
		p := Policy{First: time.Duration(first), Max: time.Duration(maxWait), Factor: factor}
		if jitter {
			p.Jitter = Equal
		}
		c := p.Ceiling(n)
		if limit := max(p.First, p.Max); c < 0 || c > limit {
			t.Fatalf("%+v: Ceiling(%d) = %v, outside [0, %v]", p, n, c, limit)
		}
		if n >= 0 && n < math.MaxInt && p.Ceiling(n+1) < c {
			t.Fatalf("%+v: Ceiling(%d) = %v below Ceiling(%d) = %v", p, n+1, p.Ceiling(n+1), n, c)
		}
		if w := p.Wait(n, u); w > c || (jitter && w < c/2) || (!jitter && w != c) {
			t.Fatalf("%+v: Wait(%d, %v) = %v, ceiling %v", p, n, u, w, c)
		}
	})
}

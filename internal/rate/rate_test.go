package rate

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestMeter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readings [][2]float64 // seconds, count
		now      float64      // when the rate is asked for
		want     float64      // -1: unknown
	}{
		{"one reading", [][2]float64{{0, 100}}, 0, -1},
		{"no commit yet", [][2]float64{{0, 0}, {1, 0}, {2, 0}}, 2, -1},
		// Its bytes may have been copied long before the first reading.
		{"the first commit is only a starting point", [][2]float64{{0, 0}, {0.99, 0}, {1, 100}}, 1, -1},
		{"readings just before each commit bound it tightly", [][2]float64{{0, 0}, {0.99, 0}, {1, 100}, {1.99, 100}, {2, 200}, {2.99, 200}, {3, 300}}, 3, 200 / 2.01},
		// A commit read at 2 may have happened just after 1.
		{"readings only at commits: the longest interval they allow", [][2]float64{{0, 0}, {1, 100}, {2, 200}, {3, 300}}, 3, 200.0 / 3},
		{"a waiting file's wait is not counted", [][2]float64{{0, 0}, {5, 0}, {9, 0}, {9.9, 0}, {10, 100}, {10.9, 100}, {11, 200}}, 11, 100 / 1.1},
		{"a reset starts afresh", [][2]float64{{0, 500}, {0.9, 500}, {1, 900}, {1.9, 900}, {2, 100}}, 2, -1},
		{"a reading at the same instant is ignored", [][2]float64{{0, 0}, {1, 100}, {1.9, 100}, {2, 200}, {2, 5000}}, 2, 50},
		{"a stall decays by e after tau past the mean interval", [][2]float64{{0, 0}, {0.9, 0}, {1, 100}, {1.9, 100}, {2, 200}}, 2 + 1.1 + 10, 100 / 1.1 / math.E},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(10 * time.Second)
			for _, rd := range tc.readings {
				m.Observe(at(rd[0]), int64(rd[1]))
			}
			got, ok := m.Rate(at(tc.now))
			switch {
			case tc.want < 0 && ok:
				t.Fatalf("rate %v, want unknown", got)
			case tc.want >= 0 && (!ok || math.Abs(got-tc.want) > 1e-9*tc.want):
				t.Fatalf("rate %v (%v), want %v", got, ok, tc.want)
			}
		})
	}
}

// TestMeterWindow: commits of 64 MiB at irregular intervals around a steady
// 32 MiB/s, read every quarter of a second, then a change of pace, which
// the rate follows within the window.
func TestMeterWindow(t *testing.T) {
	const step, mib = 64 << 20, 1 << 20
	m := New(10 * time.Second)
	s, n := 0.0, int64(0)
	commitAt := func(gap float64) { // readings every 0.25 s, then the commit
		end := s + gap
		for s+0.25 < end {
			s += 0.25
			m.Observe(at(s), n)
		}
		s, n = end, n+step
		m.Observe(at(s), n)
	}
	for i := range 20 {
		commitAt([]float64{1.5, 2.5}[i%2]) // 64 MiB in 1.5 s, then in 2.5 s: 32 MiB/s on average
		if r, _ := m.Rate(at(s)); s > 10 && (r < 28*mib || r > 32*mib) {
			t.Fatalf("%.1fs: %.1f MiB/s, want at most 32 and near it", s, r/mib)
		}
	}
	for range 15 {
		commitAt(1) // 64 MiB/s
	}
	if r, _ := m.Rate(at(s)); r < 58*mib || r > 64*mib {
		t.Fatalf("15 s at 64 MiB/s: %.1f MiB/s", r/mib)
	}
}

func TestMeterAverage(t *testing.T) {
	m := New(0)
	if _, ok := m.Average(); ok {
		t.Fatal("average before any reading")
	}
	m.Observe(at(10), 1000)
	m.Observe(at(11), 1000)
	m.Observe(at(12), 5000)
	if a, ok := m.Average(); ok {
		t.Fatalf("average %v of one commit, whose bytes may predate the first reading", a)
	}
	m.Observe(at(14), 9000)
	m.Observe(at(16), 9000)
	if a, ok := m.Average(); !ok || a != 4000/5.0 {
		t.Fatalf("average %v %v, want 4000 bytes over 5 s", a, ok)
	}
	if e := m.Elapsed(at(20)); e != 10*time.Second {
		t.Fatalf("elapsed %v", e)
	}
}

func TestAverage(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		d    time.Duration
		want float64
	}{{100, 2 * time.Second, 50}, {100, 0, 0}, {100, -time.Second, 0}, {0, time.Second, 0}} {
		if got := Average(tc.n, tc.d); got != tc.want {
			t.Errorf("Average(%d, %v) = %v, want %v", tc.n, tc.d, got, tc.want)
		}
	}
}

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
		{"steady", [][2]float64{{0, 0}, {1, 100}, {2, 200}}, 2, 100},
		{"readings between commits change nothing", [][2]float64{{0, 0}, {2, 400}, {3, 400}, {4, 800}, {5, 800}, {6, 1200}}, 6, 200},
		{"a waiting file's wait is not counted", [][2]float64{{0, 0}, {5, 0}, {9, 0}, {10, 100}, {11, 200}}, 11, 100},
		{"a reset starts afresh", [][2]float64{{0, 500}, {1, 900}, {2, 100}}, 2, -1},
		{"a reading at the same instant is ignored", [][2]float64{{0, 0}, {2, 200}, {2, 5000}}, 2, 100},
		{"a stall decays by e after tau past the usual interval", [][2]float64{{0, 0}, {1, 100}, {2, 200}}, 13, 100 / math.E},
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

// TestMeterSmoothsCommitSteps: commits of 64 MiB at irregular intervals
// around a steady 32 MiB/s, and a change of pace, which shows gradually.
func TestMeterSmoothsCommitSteps(t *testing.T) {
	m := New(10 * time.Second)
	const step = 64 << 20
	s, n := 0.0, int64(0)
	m.Observe(at(s), n)
	for i := range 20 {
		s += []float64{1.5, 2.5}[i%2] // 64 MiB in 1.5 s, then in 2.5 s: 32 MiB/s on average
		n += step
		m.Observe(at(s), n)
		if r, _ := m.Rate(at(s)); i > 4 && (r < 25<<20 || r > 40<<20) {
			t.Fatalf("commit %d: %.1f MiB/s, want near 32", i, r/(1<<20))
		}
	}
	// The pace doubles: one commit later the rate has moved, not jumped.
	s += 1
	n += step
	m.Observe(at(s), n)
	r, _ := m.Rate(at(s))
	if r <= 33<<20 || r >= 50<<20 {
		t.Fatalf("one commit after the pace doubled: %.1f MiB/s, want between 33 and 50", r/(1<<20))
	}
	for range 30 {
		s += 1
		n += step
		m.Observe(at(s), n)
	}
	if r, _ := m.Rate(at(s)); r < 60<<20 {
		t.Fatalf("30 s at 64 MiB/s: %.1f MiB/s", r/(1<<20))
	}
}

func TestMeterAverage(t *testing.T) {
	m := New(0)
	if _, ok := m.Average(); ok {
		t.Fatal("average before any reading")
	}
	m.Observe(at(10), 1000)
	if _, ok := m.Average(); ok {
		t.Fatal("average of one reading")
	}
	m.Observe(at(12), 1000)
	m.Observe(at(14), 5000)
	if a, ok := m.Average(); !ok || a != 1000 {
		t.Fatalf("average %v %v, want 1000", a, ok)
	}
	if e := m.Elapsed(at(20)); e != 10*time.Second {
		t.Fatalf("elapsed %v", e)
	}
}

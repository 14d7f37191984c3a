package rate

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// flushSim is a throttled copy seen through readings on a fake clock: the
// daemon copies at exactly bw from copyStart and commits WRITTEN every
// commitEvery (or commitBytes, whichever comes first), each commit taking
// effect fsync after its bytes were copied; a reader reads the count every
// tick, and after every commit with a delay of notify (inotify, or a
// metadata poll on a file system inotify does not see) when notify >= 0.
type flushSim struct {
	bw          float64
	size        int64
	copyStart   float64 // seconds; the reader starts at 0
	commitEvery float64
	commitBytes int64
	fsync       float64
	tick        float64
	notify      float64 // < 0: no reading on change
}

type reading struct {
	at float64
	n  int64
}

// commits returns the times and counts of the commits.
func (s flushSim) commits() []reading {
	var out []reading
	var n int64
	t := s.copyStart
	for n < s.size {
		step := min(int64(s.bw*s.commitEvery), s.commitBytes, s.size-n)
		t += float64(step) / s.bw
		n += step
		out = append(out, reading{t + s.fsync, n})
	}
	return out
}

// readings returns what the reader sees, in time order, from 0 until the
// last commit.
func (s flushSim) readings() []reading {
	cs := s.commits()
	count := func(at float64) int64 {
		var n int64
		for _, c := range cs {
			if c.at <= at {
				n = c.n
			}
		}
		return n
	}
	var times []float64
	end := cs[len(cs)-1].at
	for t := 0.0; t < end; t += s.tick {
		times = append(times, t)
	}
	if s.notify >= 0 {
		for _, c := range cs {
			times = append(times, c.at+s.notify)
		}
	}
	sort.Float64s(times)
	out := make([]reading, 0, len(times))
	for _, t := range times {
		out = append(out, reading{t, count(t)})
	}
	return out
}

// TestThrottledFlush: under BW the rate never reads above 1.1 × BW once a
// commit is in (the first commit's bytes divided by the gap between two
// readings once read as several times BW), reaches BW within a margin once
// the window is full, and the time left counts down by the time that
// passes, rising by no more than 2 % at a reading, and is never far above the true
// time left.
func TestThrottledFlush(t *testing.T) {
	const mib = 1 << 20
	for _, s := range []flushSim{
		{bw: 20 * mib, size: 400 * mib, copyStart: -1.5, commitEvery: 2, commitBytes: 64 * mib, fsync: 0.02, tick: 1, notify: 0.005},
		{bw: 20 * mib, size: 400 * mib, copyStart: 0.3, commitEvery: 2, commitBytes: 64 * mib, fsync: 0.02, tick: 1, notify: -1},
		{bw: 2 * mib, size: 25 * mib, copyStart: -0.9, commitEvery: 2, commitBytes: 64 * mib, fsync: 0.01, tick: 1, notify: 0.25},
		{bw: 8 * mib, size: 300 * mib, copyStart: -10, commitEvery: 2, commitBytes: 64 * mib, fsync: 0.05, tick: 0.25, notify: 0.001},
		{bw: 100 * mib, size: 4000 * mib, copyStart: -0.2, commitEvery: 2, commitBytes: 64 * mib, fsync: 0.03, tick: 1, notify: 0.002},
	} {
		t.Run(fmt.Sprintf("bw %.0f MiB/s, tick %gs, notify %gs", s.bw/mib, s.tick, s.notify), func(t *testing.T) {
			m := New(0)
			lastETA, firstETA := time.Duration(-1), time.Duration(-1)
			var firstAt, lastAt float64
			var lastRate float64
			for _, rd := range s.readings() {
				now := at(rd.at)
				m.Observe(now, rd.n)
				r, ok := m.Rate(now)
				if ok && r > 1.1*s.bw {
					t.Fatalf("at %.3fs (WRITTEN %d): rate %.1f MiB/s, above 1.1 × BW %.0f MiB/s", rd.at, rd.n, r/mib, s.bw/mib)
				}
				eta, ok := m.ETA(now, s.size-rd.n, s.bw)
				if !ok {
					continue
				}
				// The window sliding past a commit read late can move the
				// rate by a reading's resolution, never more.
				if lastETA >= 0 && eta > lastETA+lastETA/50 {
					t.Fatalf("at %.3fs: ETA %v went up from %v", rd.at, eta, lastETA)
				}
				if firstETA < 0 {
					firstETA, firstAt = eta, rd.at
				}
				truth := time.Duration((s.copyStart + float64(s.size)/s.bw - rd.at) * float64(time.Second))
				if eta > 2*truth+5*time.Second {
					t.Fatalf("at %.3fs: ETA %v, the copy ends in %v", rd.at, eta, truth)
				}
				lastETA, lastRate, lastAt = eta, r, rd.at
			}
			if lastETA < 0 {
				t.Fatal("no ETA at all")
			}
			if counted := firstETA - lastETA; counted.Seconds() < 0.9*(lastAt-firstAt) {
				t.Fatalf("ETA went from %v to %v in %.1fs", firstETA, lastETA, lastAt-firstAt)
			}
			if lastRate < 0.8*s.bw {
				t.Fatalf("rate at the end %.1f MiB/s, want near BW %.0f MiB/s", lastRate/mib, s.bw/mib)
			}
		})
	}
}

package flush

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tests in this file drive the throttle's decisions with a fake clock:
// time passes only when the test says so.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// bwClock copies size bytes through th at a fake time starting at now, one
// chunk at a time, each chunk moved in no time once its tokens are there,
// plus stall after every stallEvery bytes (an fsync). It returns the time
// after the last byte.
func bwClock(th *Throttle, now time.Time, size int, stallEvery int, stall time.Duration) time.Time {
	th.beginAt(now)
	done := 0
	for done < size {
		k, d, _, _ := th.reserveAt(now, min(th.chunkSize(1<<20), size-done))
		now = now.Add(d)
		before := done / max(stallEvery, 1)
		done += k
		if stallEvery > 0 && done/stallEvery != before {
			now = now.Add(stall)
		}
	}
	th.endAt(now)
	return now
}

// TestBucketStartsEmpty: a flush of one second's worth of data takes at
// least one second, whether the limit was set just now or long before, and
// again after the daemon sat idle: an idle bucket does not fill.
func TestBucketStartsEmpty(t *testing.T) {
	const bw = 50 << 20
	tests := []struct {
		name  string
		setup func(th *Throttle) time.Time // returns when the flush starts
	}{
		{"limit set as the flush starts", func(th *Throttle) time.Time {
			th.setBWAt(t0, bw)
			return t0
		}},
		{"limit set an hour before", func(th *Throttle) time.Time {
			th.setBWAt(t0, bw)
			return t0.Add(time.Hour)
		}},
		{"after an earlier flush and an idle minute", func(th *Throttle) time.Time {
			th.setBWAt(t0, bw)
			end := bwClock(th, t0, bw/4, 0, 0)
			return end.Add(time.Minute)
		}},
		{"limit lifted and set again while idle", func(th *Throttle) time.Time {
			th.setBWAt(t0, bw)
			th.setBWAt(t0.Add(time.Second), 0)
			th.setBWAt(t0.Add(time.Hour), bw)
			return t0.Add(2 * time.Hour)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newThrottleAt(t0)
			start := tc.setup(th)
			end := bwClock(th, start, bw, 0, 0)
			if rate := float64(bw) / end.Sub(start).Seconds(); rate > 1.0001*bw {
				t.Errorf("one second's worth took %v: %.4f× the limit", end.Sub(start), rate/bw)
			}
		})
	}
}

// TestBucketAbsorbsStalls: during a copy the bucket fills while the copy
// waits for an fsync, so stalls shorter than the bucket do not slow the
// flush below the limit, and the rate still never exceeds it over the flush.
func TestBucketAbsorbsStalls(t *testing.T) {
	const bw = 100 << 20
	th := newThrottleAt(t0)
	th.setBWAt(t0, bw)
	// 10 s of data, a 50 ms stall after every 64 MiB.
	end := bwClock(th, t0, 10*bw, 64<<20, 50*time.Millisecond)
	rate := 10 * bw / end.Sub(t0).Seconds()
	if rate > 1.0001*bw || rate < 0.99*bw {
		t.Errorf("10 s of data with stalls moved at %.4f× the limit, want 0.99–1", rate/bw)
	}
}

// dutySim runs workers under th on a fake clock and records when the
// daemon worked (any worker working).
type dutySim struct {
	th    *Throttle
	now   time.Time
	late  time.Duration // how late every pause's timer fires
	busy  []span
	start time.Time
}

type span struct{ from, to time.Time }

// work spends d working, then paces as Work.Pace does.
func (s *dutySim) work(d time.Duration) {
	s.busy = append(s.busy, span{s.now, s.now.Add(d)})
	s.now = s.now.Add(d)
	for {
		p, _ := s.th.pauseAt(s.now)
		if p <= 0 {
			return
		}
		s.th.idleAt(s.now)
		s.now = s.now.Add(p + s.late)
		s.th.resumeAt(s.now)
	}
}

// share returns the busy share of [from,to).
func (s *dutySim) share(from, to time.Time) float64 {
	var b time.Duration
	for _, sp := range s.busy {
		lo, hi := maxTime(sp.from, from), minTime(sp.to, to)
		if hi.After(lo) {
			b += hi.Sub(lo)
		}
	}
	return b.Seconds() / to.Sub(from).Seconds()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestDutyCycle: PERCENT is the share of wall time spent working, within
// ±1 point over every 1 s window of a copy made of small pieces (chunks of
// about a millisecond, as a copy's reads and writes are), whether the
// pauses' timers fire on time or late; and over the whole copy when some
// pieces are long (an fsync of 120 ms, a transfer-file commit).
func TestDutyCycle(t *testing.T) {
	for _, pct := range []float64{1, 5, 20, 50, 80} {
		for _, late := range []time.Duration{0, 300 * time.Microsecond, 2 * time.Millisecond} {
			t.Run(fmt.Sprintf("%g%%/late%v", pct, late), func(t *testing.T) {
				th := newThrottleAt(t0)
				th.setPercentAt(t0, pct)
				s := &dutySim{th: th, now: t0.Add(time.Hour), late: late}
				th.beginAt(s.now)
				s.start = s.now
				var pieces int
				for s.now.Sub(s.start) < 10*time.Second {
					s.work(time.Duration(700+pieces%5*150) * time.Microsecond)
					pieces++
				}
				th.endAt(s.now)
				for w := s.start; w.Add(time.Second).Before(s.now); w = w.Add(100 * time.Millisecond) {
					if got := 100 * s.share(w, w.Add(time.Second)); got > pct+1 || got < pct-1 {
						t.Fatalf("busy %.2f %% over the second from %v, want %g ±1", got, w.Sub(s.start), pct)
					}
				}
			})
		}
	}
	t.Run("long pieces", func(t *testing.T) {
		for _, pct := range []float64{5, 20, 50} {
			th := newThrottleAt(t0)
			th.setPercentAt(t0, pct)
			s := &dutySim{th: th, now: t0, late: 100 * time.Microsecond}
			th.beginAt(s.now)
			s.start = s.now
			for i := 0; s.now.Sub(s.start) < time.Minute; i++ {
				switch {
				case i%500 == 499:
					s.work(120 * time.Millisecond) // fsync
				case i%100 == 99:
					s.work(3 * time.Millisecond) // commit
				default:
					s.work(time.Millisecond)
				}
			}
			th.endAt(s.now)
			if got := 100 * s.share(s.start, s.now); got > pct+1 || got < pct-1 {
				t.Errorf("PERCENT %g: busy %.2f %% of the flush", pct, got)
			}
		}
	})
}

// TestDutyIdleIsNotBanked: time the daemon sat idle buys no burst of work:
// after an idle hour, the first pieces of work are paced at once.
func TestDutyIdleIsNotBanked(t *testing.T) {
	th := newThrottleAt(t0)
	th.setPercentAt(t0, 20)
	s := &dutySim{th: th, now: t0.Add(time.Hour)}
	th.beginAt(s.now)
	s.start = s.now
	for s.now.Sub(s.start) < 200*time.Millisecond {
		s.work(time.Millisecond)
	}
	if got := s.share(s.start, s.now); got > 0.21+float64(maxCredit)/float64(200*time.Millisecond) {
		t.Errorf("busy %.1f %% of the first 200 ms after an idle hour", 100*got)
	}
}

// TestDutyCountsConcurrentWorkOnce: the daemon is working while any of its
// copies works; two copies working at once for 10 ms owe the idle time of
// 10 ms of work, and a pause is owed by every copy alike.
func TestDutyCountsConcurrentWorkOnce(t *testing.T) {
	th := newThrottleAt(t0)
	th.setPercentAt(t0, 50)
	th.beginAt(t0)
	th.beginAt(t0)
	d, _ := th.pauseAt(t0.Add(10 * time.Millisecond))
	if d != 10*time.Millisecond {
		t.Fatalf("pause %v, want 10ms", d)
	}
	// One copy pauses, the other works on 5 ms: the debt grows by 5 ms.
	th.idleAt(t0.Add(10 * time.Millisecond))
	d, _ = th.pauseAt(t0.Add(15 * time.Millisecond))
	if d != 15*time.Millisecond {
		t.Fatalf("pause %v, want 15ms", d)
	}
	// Both paused for 15 ms: nothing owed.
	th.idleAt(t0.Add(15 * time.Millisecond))
	if d, _ = th.pauseAt(t0.Add(30 * time.Millisecond)); d != 0 {
		t.Fatalf("pause %v after paying, want none", d)
	}
}

// TestPercentCountsWallTime: time the copy spends waiting (here on a slow
// commit, as on a loaded parallel file system, where it uses no CPU) counts
// as working time: under PERCENT 20 the copy pauses four times as long as it
// works. The commit's sleep stands for slow I/O, not for a condition.
func TestPercentCountsWallTime(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	want := randBytes(2<<20, 26)
	writeFile(t, src, want)
	th := NewThrottle()
	th.SetPercent(20)
	commit := func(int64, uint32) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}
	start := time.Now()
	res, err := NewCopier(th, Options{BufSize: 64 << 10, SyncBytes: 256 << 10}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(want))}, commit)
	wall := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	checkDst(t, res, dst, want)
	s := th.Stats()
	if share := 1 - s.Slept.Seconds()/wall.Seconds(); share > 0.22 {
		t.Errorf("worked %.1f %% of %v (paused %v), PERCENT is 20", 100*share, wall, s.Slept)
	}
}

// TestPaceOutsideCopies: work outside copies (checkpoint verification) is
// paced by the same share.
func TestPaceOutsideCopies(t *testing.T) {
	th := NewThrottle()
	w := th.Begin()
	if err := w.Pace(context.Background()); err != nil || th.Stats().Sleeps != 0 {
		t.Fatalf("unlimited: %v, %+v", err, th.Stats())
	}
	w.End()
	th.SetPercent(10)
	w = th.Begin()
	start := time.Now()
	var busy time.Duration
	for range 5 {
		// A piece of verification; the sleep stands for reading.
		t0 := time.Now()
		time.Sleep(10 * time.Millisecond)
		busy += time.Since(t0)
		if err := w.Pace(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	w.End()
	wall := time.Since(start)
	if s := th.Stats(); s.PercentSleeps == 0 || wall < 9*busy {
		t.Errorf("worked %v in %v under PERCENT 10 (%+v)", busy, wall, s)
	}
}

// TestInterruptedUnderPercentCommits: a copy stopped while PERCENT pauses it
// still fsyncs and commits what it copied; the throttle never stands
// between durable bytes and their commit.
func TestInterruptedUnderPercentCommits(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	want := randBytes(8<<20, 27)
	writeFile(t, src, want)
	th := NewThrottle()
	th.SetPercent(1)
	th.burst = 0 // pause at once: the copy is over within one burstWork
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && th.Stats().PercentSleeps < 2 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	var committed int64
	res, err := NewCopier(th, Options{BufSize: 64 << 10}).Copy(ctx, Job{Src: src, Dst: dst, Size: int64(len(want))},
		func(n int64, _ uint32) error { committed = n; return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if strings.Contains(err.Error(), "saving progress") {
		t.Fatalf("progress not saved: %v", err)
	}
	if res.Written == 0 || committed != res.Written {
		t.Fatalf("stopped with %d bytes durable and %d committed: the copied bytes were not committed (%v)", res.Written, committed, err)
	}
	checkPrefix(t, TempPath(dst), want, res.Written)
}
